package sessions

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/sandstep/sandstep/internal/service/sandboxes"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/providers"
)

// acquire moves the session to running at its version: from then on the
// run holds it and the cleanup cannot delete it. A session another run
// holds is waited for; one held longer than any run may take is taken
// back from its holder, whose process is gone.
func (s *Service) acquire(ctx context.Context, sess store.Session) (store.Session, error) {
	key, id := sess.ID, sess.ClientID
	for attempt := 0; ; attempt++ {
		switch sess.State {
		case store.SessionIdle:
			got, err := s.st.BeginRun(ctx, key, sess.Version, s.ttl())
			if err == nil {
				return got, nil
			}
			if !errors.Is(err, store.ErrConflict) {
				return sess, s.unavailable(err)
			}
			if got.ID == "" {
				return sess, s.unavailable(err)
			}
			sess = got
			continue
		case store.SessionRunning:
			if time.Since(sess.LastAccessedAt) > s.staleAfter() {
				s.log.Warn("taking back a session held by a run that did not end", "session", key, "since", sess.LastAccessedAt)
				if got, err := s.st.EndRun(ctx, key, sess.Version, s.ttl()); err == nil || got.ID != "" {
					sess = got
					continue
				}
			}
		case store.SessionDeleting:
			return sess, &Error{Kind: KindConflict, Message: fmt.Sprintf("session %q is being deleted; its files are going", id)}
		case store.SessionDeleted:
			return sess, s.gone(ctx, sess)
		default:
			return sess, &Error{Kind: KindUnavailable, Message: fmt.Sprintf("session %q is in an unknown state %q", id, sess.State)}
		}
		// Held by another run: wait for it, backing off up to a second.
		d := time.Duration(rand.Int64N(int64(20*time.Millisecond)<<min(attempt, 6))) + 5*time.Millisecond
		t := time.NewTimer(min(d, time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			return sess, &Error{Kind: KindConflict, Message: fmt.Sprintf("session %q stayed busy with another run", id), Err: ctx.Err()}
		case <-t.C:
		}
		got, err := s.st.GetSession(ctx, key)
		if err != nil {
			return sess, s.unavailable(err)
		}
		sess = got
	}
}

// release ends the run's hold on the session; the volume's idle time
// counts from now.
func (s *Service) release(ctx context.Context, sess *store.Session) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	got, err := s.st.EndRun(ctx, sess.ID, sess.Version, s.ttl())
	if err != nil {
		// Taken back as stale meanwhile, or the store failed: either way
		// the cleanup or the next run sorts the session out.
		s.log.Warn("ending a run's hold on its session", "session", sess.ID, "err", err)
		return
	}
	*sess = got
}

// runCode runs code in the session's sandbox, starting one if needed. It
// returns the session held (nil when it was not taken), for the caller to
// let go of (see execute).
func (s *Service) runCode(ctx context.Context, sess store.Session, run Run, code string) (*Result, *store.Session, error) {
	// A first build may take minutes: wait for it before holding the
	// session, so that holding it stays within what staleAfter allows.
	if err := s.snapshotReady(ctx); err != nil {
		return nil, nil, err
	}
	h, err := s.acquire(ctx, sess)
	if err != nil {
		return nil, nil, err
	}
	held := &h
	ctx, cancel := context.WithTimeout(ctx, setupBudget+run.Timeout)
	defer cancel()
	log := s.log.With("session", held.ID, "run_id", run.ID)
	for attempt := 0; ; attempt++ {
		sbID, err := s.ensureSandbox(ctx, held, run.Timeout)
		if err != nil {
			return nil, held, err
		}
		mark := newMark()
		stdout, stderr := newCaptures(s.redact)
		newRequest := execRequest
		if run.Stateful {
			newRequest = statefulRequest
		}
		req := newRequest(run.Language, code, mark, s.runEnv(), run.Timeout)
		req.Stdout, req.Stderr = stdout, stderr
		res, err := s.prov.Exec(ctx, sbID, req)
		if run.Stateful && err == nil {
			if why := lostReason(res, run.Timeout); why != "" {
				s.endInterpreter(ctx, sbID, run.Language, why)
			}
		}
		if providers.IsNotFound(err) && attempt == 0 {
			// The sandbox is gone (its lifetime or idle timeout ended at
			// the provider); the code did not start. Start another.
			log.Info("session sandbox is gone; starting another", "sandbox_id", sbID)
			if derr := s.dropSandbox(ctx, held, "gone"); derr != nil {
				return nil, held, derr
			}
			continue
		}
		if err != nil {
			return nil, held, &Error{Kind: KindUnavailable, Message: "the sandbox did not run the code: " + s.redact.Error(err), Err: s.hide(err)}
		}
		out := result(run.Language, mark, stdout, stderr, res, s.redact, s.cfg.MemoryMB)
		log.Info("run ended", "sandbox_id", sbID, "language", run.Language, "success", out.Success,
			"exit_code", out.ExitCode, "duration_ms", out.DurationMS, "timed_out", out.TimedOut, "oom", out.OOM)
		return out, held, nil
	}
}

// runEnv is what every run's command gets besides the sandbox's own
// environment: where the dependencies are when they were installed at
// start.
func (s *Service) runEnv() map[string]string {
	caps, _ := s.capabilities(context.Background())
	if caps.Snapshots || len(s.deps.packages) == 0 {
		return nil
	}
	_, env := s.deps.setup(startRoot)
	return env
}

// ensureSandbox returns the session's sandbox, starting one when it has
// none, or when the one it has would end before a run of timeout could.
// The session must be held (running).
func (s *Service) ensureSandbox(ctx context.Context, sess *store.Session, timeout time.Duration) (string, error) {
	if id := sess.SandboxID; id != "" {
		info, known := s.cached(id)
		if !known {
			sb, err := s.prov.Get(ctx, id)
			switch {
			case err == nil && sb.State == providers.StateRunning:
				info = sandboxInfo{expiresAt: sb.ExpiresAt}
				s.remember(id, info)
			case err == nil || providers.IsNotFound(err):
				info = sandboxInfo{expiresAt: time.Now()} // gone
			default:
				return "", &Error{Kind: KindUnavailable, Message: "the sandbox provider does not answer", Err: s.hide(err)}
			}
		}
		if info.expiresAt.IsZero() || time.Until(info.expiresAt) > timeout+time.Minute {
			return id, nil
		}
		if err := s.dropSandbox(ctx, sess, "lifetime ending"); err != nil {
			return "", err
		}
	}
	return s.createSandbox(ctx, sess)
}

// dropSandbox lets go of the session's sandbox: the record first, then the
// sandbox, so that no one else can still be handed it.
func (s *Service) dropSandbox(ctx context.Context, sess *store.Session, reason string) error {
	id := sess.SandboxID
	got, err := s.st.SetSessionSandbox(ctx, sess.ID, sess.Version, "")
	if err != nil {
		return s.unavailable(err)
	}
	*sess = got
	s.terminate(ctx, sess.ID, id, reason)
	return nil
}

func (s *Service) createSandbox(ctx context.Context, sess *store.Session) (string, error) {
	caps, err := s.capabilities(ctx)
	if err != nil {
		return "", err
	}
	if !caps.Volumes {
		return "", &Error{Kind: KindUnavailable, Message: fmt.Sprintf("the sandbox provider %q has no volumes; sessions need them to keep files", s.provName)}
	}
	if caps.Snapshots {
		if err := s.EnsureSnapshot(ctx); err != nil {
			return "", err
		}
	}
	if err := s.ensureVolume(ctx, *sess); err != nil {
		return "", err
	}
	key, tenant := sess.ID, sess.Tenant
	start := time.Now()
	name := sandboxName(key)
	labels := sessionLabels(*sess)
	spec := providers.CreateSpec{
		Name:        name,
		Labels:      labels,
		Mounts:      []providers.Mount{{Volume: sess.VolumeSlug, Path: WorkspacePath}},
		Secrets:     s.secrets,
		Lifetime:    s.lifetime,
		IdleTimeout: s.cfg.SandboxIdle() + time.Minute,
		Resources:   providers.Resources{MemoryMB: s.cfg.MemoryMB},
		Region:      s.cfg.Region,
	}
	mode := DepsNone
	if len(s.deps.packages) > 0 {
		mode = DepsAtStart
	}
	if caps.Snapshots {
		// The sandbox's ledger entry, written before the create, names it:
		// the snapshot cleanup keeps a snapshot a sandbox is being created
		// from. (Not a label: Deno keeps five labels at most.)
		spec.Snapshot = s.deps.slug
		if mode != DepsNone {
			mode = DepsSnapshot
		}
	} else if mode == DepsAtStart {
		_, spec.Env = s.deps.setup(startRoot)
	}
	req := sandboxes.Request{
		Owner: s.owner(*sess),
		Spec:  spec,
		// The volume is still mounted by a sandbox of this session that
		// nothing refers to any more: the run holds the session, so it is
		// a leftover.
		Unblock: func(ctx context.Context) error { s.terminateStrays(ctx, *sess); return nil },
	}
	if mode == DepsAtStart {
		req.Ready = func(ctx context.Context, sb providers.Sandbox) error { return s.installAtStart(ctx, sb.ID) }
	}
	lease, err := s.sbx.Acquire(ctx, req)
	var ce *sandboxes.CreateError
	if errors.As(err, &ce) && spec.Snapshot != "" && providers.IsNotFound(ce.Err) && s.snapshotMissing(ctx, spec.Snapshot) {
		// The snapshot was deleted since it was built (by hand, or
		// collected by a process whose dependency list moved on): build
		// it again and start from it once more.
		s.log.Warn("the dependency snapshot is gone; building it again", "snapshot", spec.Snapshot)
		s.snapshotGone()
		if err := s.EnsureSnapshot(ctx); err != nil {
			return "", err
		}
		lease, err = s.sbx.Acquire(ctx, req)
	}
	var se *Error
	switch {
	case errors.As(err, &ce):
		return "", &Error{Kind: KindUnavailable, Message: "the session's sandbox did not start: " + s.redact.Error(ce.Err), Err: s.hide(err)}
	case errors.As(err, &se):
		return "", se
	case err != nil:
		return "", s.unavailable(err)
	}
	sb := lease.Sandbox
	if spec.Snapshot != "" && !lease.Adopted && s.snapshotMissing(ctx, spec.Snapshot) {
		// Deleted while the create ran: the sandbox runs on from its
		// contents, and the snapshot is built again so that what a live
		// sandbox uses exists.
		s.log.Warn("the dependency snapshot was deleted while a sandbox was created from it; building it again", "snapshot", spec.Snapshot)
		s.snapshotGone()
		if err := s.EnsureSnapshot(ctx); err != nil {
			s.log.Error("rebuilding the dependency snapshot", "snapshot", spec.Snapshot, "err", err)
		}
	}
	s.remember(sb.ID, sandboxInfo{name: name, expiresAt: sb.ExpiresAt})
	got, err := s.st.SetSessionSandbox(ctx, key, sess.Version, sb.ID)
	if err != nil {
		// Never handed out: it goes without a sandbox.closed event, as
		// it had no sandbox.started.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
		defer cancel()
		if rerr := s.sbx.Release(rctx, req.Owner, sandboxes.Ref{Name: name, ID: sb.ID}, "session changed"); rerr != nil {
			s.log.Error("terminating a sandbox that could not be used", "sandbox_id", sb.ID, "err", s.redact.Error(rerr))
		}
		s.forget(sb.ID)
		return "", s.unavailable(err)
	}
	*sess = got
	took := time.Since(start)
	s.event(ctx, key, event{typ: EventSandboxStarted, data: map[string]any{
		"sandbox_id": sb.ID, "dependencies": mode, "snapshot": spec.Snapshot, "took_ms": took.Milliseconds(),
	}})
	s.log.Info("session sandbox started", "session", key, "tenant", tenant, "sandbox_id", sb.ID, "dependencies", mode, "took", took)
	return sb.ID, nil
}

// owner is the session as the owner of its sandboxes. A record from
// before sessions kept their client's id has no labels to look for strays
// by; its sandboxes are in the ledger.
func (s *Service) owner(sess store.Session) sandboxes.Owner {
	o := sandboxes.SessionOwner(sess.ID, sess.Tenant)
	if sess.ClientID != "" {
		o.Labels = sessionLabels(sess)
	}
	return o
}

// labels adds this deployment's labels (owner, deployment id) to own.
func (s *Service) labels(own map[string]string) map[string]string {
	l := sandboxes.Labels(s.deployment)
	maps.Copy(l, own)
	return l
}

// sessionLabels are the labels of the session's sandboxes at the provider,
// besides the deployment's, which package sandboxes adds.
func sessionLabels(sess store.Session) map[string]string {
	return map[string]string{providers.LabelTenant: sess.Tenant, providers.LabelSession: sess.ClientID}
}

// installAtStart installs the dependencies in a new sandbox, for providers
// without snapshots.
func (s *Service) installAtStart(ctx context.Context, id string) error {
	cmds, _ := s.deps.setup(startRoot)
	out := &capture{tail: 4 << 10}
	res, err := s.prov.Exec(ctx, id, providers.ExecRequest{
		Shell: strings.Join(cmds, " && "), Stdout: out, Stderr: out, Timeout: setupBudget,
	})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit status %d; output ends with:\n%s", res.ExitCode, out.last())
	}
	if err != nil {
		return &Error{Kind: KindUnavailable, Message: "installing the dependencies in the session's sandbox failed: " +
			lastLines(s.buildRedact.Error(err), buildOutputLines), Err: s.hideBuild(err)}
	}
	return nil
}

func (s *Service) ensureVolume(ctx context.Context, sess store.Session) error {
	k := fmt.Sprintf("%s@%d", sess.ID, sess.CreatedAt.UnixMilli())
	s.cacheMu.Lock()
	ok := s.volumes[k]
	s.cacheMu.Unlock()
	if ok {
		return nil
	}
	tenant, id := sess.Tenant, sess.ClientID
	_, err := s.prov.CreateVolume(ctx, providers.VolumeSpec{
		Slug:       sess.VolumeSlug,
		Labels:     s.labels(map[string]string{providers.LabelTenant: tenant, providers.LabelSession: id}),
		CapacityMB: s.cfg.VolumeCapacityMB,
		Region:     s.cfg.Region,
	})
	if err != nil {
		return &Error{Kind: KindUnavailable, Message: "the session's volume could not be created: " + s.redact.Error(err), Err: s.hide(err)}
	}
	s.cacheMu.Lock()
	s.volumes[k] = true
	s.cacheMu.Unlock()
	return nil
}

// terminate ends a sandbox of the session and closes its ledger entry.
// Both steps are idempotent; a failure is logged and left to the cleanup,
// which finds the entry still live.
func (s *Service) terminate(ctx context.Context, key, id, reason string) {
	if id == "" || s.sbx == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	info, _ := s.cached(id)
	err := s.sbx.Release(ctx, sandboxes.SessionOwner(key, ""), sandboxes.Ref{Name: info.name, ID: id}, reason)
	var te *sandboxes.TerminateError
	if errors.As(err, &te) {
		s.log.Error("terminating a session sandbox", "session", key, "sandbox_id", id, "err", s.redact.Error(err))
		return
	}
	if err != nil {
		s.log.Warn("closing a session sandbox's ledger entry", "session", key, "sandbox_id", id, "err", err)
	}
	s.forget(id)
	s.closed(ctx, key, id, reason)
}

// closed records that a sandbox of the session ended.
func (s *Service) closed(ctx context.Context, key, id, reason string) {
	s.event(ctx, key, event{typ: EventSandboxClosed, data: map[string]any{"sandbox_id": id, "reason": reason}})
	s.log.Info("session sandbox closed", "session", key, "sandbox_id", id, "reason", reason)
}

// terminateStrays ends every live sandbox of the session: those the
// ledger holds for it and, where the provider can list, those carrying its
// labels.
func (s *Service) terminateStrays(ctx context.Context, sess store.Session) {
	if s.sbx == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	ended, err := s.sbx.ReleaseOwner(ctx, s.owner(sess), "stray")
	if err != nil {
		s.log.Warn("ending a session's stray sandboxes", "session", sess.ID, "err", s.redact.Error(err))
	}
	for _, id := range ended {
		s.forget(id)
		s.closed(ctx, sess.ID, id, "stray")
	}
}

// finishDelete deletes a session in state deleting: its sandboxes, its
// volume, then its record. Every step is idempotent, so the cleanup may
// finish a deletion that the API or an earlier pass began.
func (s *Service) finishDelete(ctx context.Context, sess store.Session, typ, reason string) (store.Session, error) {
	key := sess.ID
	s.terminate(ctx, key, sess.SandboxID, reason)
	s.terminateStrays(ctx, sess)
	if err := s.deleteVolume(ctx, sess.VolumeSlug); err != nil {
		return sess, err
	}
	// The code modules' index entries go with the volume that holds them;
	// until they are gone the session stays deleting, and the next pass
	// tries again.
	if err := s.st.DeleteSessionModules(ctx, key); err != nil {
		return sess, s.unavailable(err)
	}
	done, err := s.st.FinishDelete(ctx, key)
	if err != nil {
		return sess, s.unavailable(err)
	}
	s.event(ctx, key, event{typ: typ, data: map[string]any{"volume": sess.VolumeSlug, "reason": reason, "last_accessed_at": sess.LastAccessedAt}, final: true, once: "deleted"})
	s.log.Info("session deleted", "session", key, "volume", sess.VolumeSlug, "reason", reason)
	return done, nil
}

// deleteVolume retries a volume still held by a sandbox that is ending.
func (s *Service) deleteVolume(ctx context.Context, slug string) error {
	var err error
	for attempt := range 5 {
		if err = s.prov.DeleteVolume(ctx, slug); err == nil || providers.IsNotFound(err) {
			return nil
		}
		if providers.CodeOf(err) != providers.FailedPrecondition {
			break
		}
		t := time.NewTimer(100 * time.Millisecond << attempt)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	return &Error{Kind: KindUnavailable, Message: "the session's volume could not be deleted: " + s.redact.Error(err), Err: s.hide(err)}
}

// event appends a session event; a failure is logged, not returned: the
// state change it reports has happened.
func (s *Service) event(ctx context.Context, key string, e event) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	wrote, err := s.appendEvent(ctx, key, time.Now(), e)
	if err != nil {
		s.log.Warn("recording a session event", "session", key, "type", e.typ, "err", err)
	}
	return wrote
}

func (s *Service) cached(id string) (sandboxInfo, bool) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	info, ok := s.sandboxes[id]
	return info, ok
}

func (s *Service) remember(id string, info sandboxInfo) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	if old, ok := s.sandboxes[id]; ok && info.name == "" {
		info.name = old.name
	}
	s.sandboxes[id] = info
}

func (s *Service) forget(id string) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	delete(s.sandboxes, id)
}
