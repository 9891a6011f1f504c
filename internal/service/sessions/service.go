// Package sessions is the run_code workload: code runs in a sandbox that
// boots from a snapshot of the configured dependencies, with the session's
// own volume at /workspace, so files survive from one run to the next and
// across sandboxes until the session has been idle for the volume TTL.
//
// A session record (internal/store) is the lock: a run moves it from idle
// to running and back with conditional writes at a version, and the
// cleanup may only move an idle, expired one to deleting. A run and a
// deletion can therefore never both win, whatever the timing; nothing here
// checks a state and then acts on it.
//
// Every sandbox is acquired and released through package sandboxes, which
// writes it to the ledger before it is created and closes it after it is
// terminated, as for a job. Its name is new for each sandbox, so a ledger
// entry always stands for exactly one sandbox.
//
// Secrets of the dependencies are given to every session sandbox. One with
// hosts, on a provider with host-scoped secrets, is a placeholder in the
// sandbox that the provider's way out replaces in requests to those hosts
// only; otherwise (and on other providers, which a log line says) it is the
// value itself. Values are replaced in everything a run returns, in events,
// errors and logs, either way.
package sessions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/ids"
	"github.com/sandstep/sandstep/internal/service/quota"
	"github.com/sandstep/sandstep/internal/service/sandboxes"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/providers"
)

// Options configure a Service.
type Options struct {
	// Config supplies [sessions], the sandbox lifetime and the provider's
	// name.
	Config *config.Config
	// Store keeps the sessions, their runs and events, and the ledger.
	Store *store.Store
	// Provider may be nil where only the API's input checks run; every
	// operation that needs it then fails with KindUnavailable.
	Provider providers.Provider
	// Launcher starts a run where it outlives the request that asked for
	// it; nil runs it in this process.
	Launcher Launcher
	// Getenv resolves the dependencies' secret_env (default os.Getenv).
	Getenv func(string) string
	Logger *slog.Logger
}

// Budgets of the parts of a run other than the code itself.
const (
	// setupBudget bounds what a run does with its session held besides
	// the code: starting a sandbox, installing the dependencies into it
	// where there is no snapshot. The snapshot is awaited before.
	setupBudget = 5 * time.Minute
	// staleGrace is added to the longest a run may hold its session
	// before another run or the cleanup takes the session back.
	staleGrace = time.Minute
	// recordTimeout bounds the store writes that close a run, which
	// happen even when the run's own context ended.
	recordTimeout = 30 * time.Second
)

// Service runs code in sessions. It is safe for concurrent use.
type Service struct {
	cfg      config.SessionsConfig
	lifetime time.Duration
	provName string
	// deployment labels the session's sandboxes, volumes and snapshots.
	deployment string
	st         *store.Store
	prov       providers.Provider
	sbx        *sandboxes.Manager // over prov; nil without one
	launcher   Launcher
	log        *slog.Logger
	deps       deps
	secrets    []providers.Secret
	redact     *redactor

	capsMu sync.Mutex
	caps   *providers.Capabilities

	snapMu         sync.Mutex
	snapReady      bool
	snapFlight     *snapshotFlight
	snapFailure    *snapshotFailure // the last build's, while remembered
	snapshotBuilds atomic.Int64
	// buildRedact also hides what build_env holds of secrets (a proxy's
	// credentials), in what a dependency install says.
	buildRedact *redactor

	cacheMu   sync.Mutex
	sandboxes map[string]sandboxInfo // by provider id
	volumes   map[string]bool        // by session key and creation time

	// base outlives requests: runs that answer 202 go on under it.
	base context.Context
	stop context.CancelFunc
	bg   sync.WaitGroup
}

type sandboxInfo struct {
	name      string
	expiresAt time.Time
}

// New returns a Service. With sessions enabled, every dependency's
// secret_env must be set; the values are read once, here.
func New(opts Options) (*Service, error) {
	if opts.Config == nil || opts.Store == nil {
		return nil, errors.New("sessions.New: Config and Store are required")
	}
	cfg := opts.Config
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Service{
		cfg:        cfg.Sessions,
		lifetime:   cfg.Sandbox.Lifetime.D(),
		provName:   cfg.Provider.Name,
		deployment: cfg.Provider.Deployment,
		st:         opts.Store,
		prov:       opts.Provider,
		launcher:   opts.Launcher,
		log:        log.With("component", "sessions"),
		deps:       planDeps(cfg.Provider.Deployment, cfg.Sessions.Dependencies),
		sandboxes:  map[string]sandboxInfo{},
		volumes:    map[string]bool{},
	}
	values := map[string]string{}
	if s.cfg.Enabled {
		var missing []error
		for i, d := range s.cfg.Dependencies {
			if d.SecretEnv == "" {
				continue
			}
			v := getenv(d.SecretEnv)
			if v == "" {
				missing = append(missing, fmt.Errorf("sessions.dependencies[%d].secret_env: environment variable %s is not set or is empty", i, d.SecretEnv))
				continue
			}
			values[d.SecretEnv] = v
			s.secrets = append(s.secrets, providers.Secret{Name: d.SecretEnv, Value: v, Hosts: d.Hosts})
		}
		build := map[string]string{}
		for i, name := range s.cfg.BuildEnv {
			v := getenv(name)
			if v == "" {
				missing = append(missing, fmt.Errorf("sessions.build_env[%d]: environment variable %s is not set or is empty", i, name))
				continue
			}
			build[name] = v
		}
		s.deps.buildEnv = build
		if err := errors.Join(missing...); err != nil {
			return nil, err
		}
	}
	if s.prov != nil {
		s.sbx = sandboxes.New(sandboxes.Options{Store: s.st, Provider: s.prov, ProviderName: s.provName, Deployment: s.deployment, Logger: log, Quotas: quota.New(s.st, &cfg.Quotas)})
	}
	s.redact = newRedactor(values)
	s.buildRedact = newRedactor(buildSecrets(values, s.deps.buildEnv))
	s.base, s.stop = context.WithCancel(context.Background())
	return s, nil
}

// Enabled reports whether the session routes are on.
func (s *Service) Enabled() bool { return s.cfg.Enabled }

// Shutdown waits for the runs and the snapshot build going on in this
// process; when ctx ends first, it cancels them (their sessions are
// released and their results recorded as failed) and waits again.
func (s *Service) Shutdown(ctx context.Context) error {
	done := make(chan struct{})
	go func() { s.bg.Wait(); close(done) }()
	select {
	case <-done:
		s.stop()
		return nil
	case <-ctx.Done():
	}
	s.stop()
	select {
	case <-done:
		return nil
	case <-time.After(recordTimeout):
		return errors.New("sessions: runs still ending after shutdown")
	}
}

func (s *Service) capabilities(ctx context.Context) (providers.Capabilities, error) {
	s.capsMu.Lock()
	defer s.capsMu.Unlock()
	if s.caps != nil {
		return *s.caps, nil
	}
	if s.prov == nil {
		return providers.Capabilities{}, &Error{Kind: KindUnavailable, Message: "no sandbox provider is configured"}
	}
	info, err := s.prov.Info(ctx)
	if err != nil {
		return providers.Capabilities{}, &Error{Kind: KindUnavailable, Message: "the sandbox provider does not answer", Err: s.hide(err)}
	}
	s.caps = &info.Capabilities
	if !info.Capabilities.HostScopedSecrets {
		for _, sec := range s.secrets {
			if len(sec.Hosts) > 0 {
				s.log.Warn("the provider cannot scope secrets to hosts: this secret is a plain environment variable in every session sandbox, readable by the code that runs there", "provider", info.Name, "secret", sec.Name)
			}
		}
	}
	return info.Capabilities, nil
}

func (s *Service) ttl() time.Duration { return s.cfg.VolumeTTL() }

// staleAfter is how long a run may hold its session: after that its
// process is taken to be gone, and the session is taken back.
func (s *Service) staleAfter() time.Duration { return s.cfg.MaxTimeout() + setupBudget + staleGrace }

// View is a session as a client sees it.
type View struct {
	ID     string
	Tenant string
	State  store.SessionState
	Mode   string
	Volume string
	// SandboxID is the sandbox kept for the session, "" when none;
	// SandboxAlive says whether the provider still has it.
	SandboxID    string
	SandboxAlive bool
	Snapshot     string
	Dependencies string
	CreatedAt    time.Time
	// LastAccessedAt is when the last run began or ended; ExpiresAt is
	// when the cleanup may delete the volume if no run comes.
	LastAccessedAt time.Time
	ExpiresAt      time.Time
	DeletedAt      time.Time
}

func (s *Service) view(ctx context.Context, sess store.Session) View {
	v := View{
		ID: sess.ClientID, Tenant: sess.Tenant, State: sess.State, Mode: s.cfg.Mode, Volume: sess.VolumeSlug,
		SandboxID: sess.SandboxID, CreatedAt: sess.CreatedAt, LastAccessedAt: sess.LastAccessedAt,
		ExpiresAt: sess.IdleExpiresAt, DeletedAt: sess.DeletedAt, Dependencies: DepsNone,
	}
	caps, err := s.capabilities(ctx)
	snapshots := err == nil && caps.Snapshots
	if snapshots {
		v.Snapshot = s.deps.slug
	}
	if len(s.deps.packages) > 0 {
		v.Dependencies = DepsAtStart
		if snapshots {
			v.Dependencies = DepsSnapshot
		}
	}
	if sess.State == store.SessionDeleted {
		v.ExpiresAt = time.Time{}
	}
	if sess.SandboxID != "" && s.prov != nil {
		sb, err := s.prov.Get(ctx, sess.SandboxID)
		v.SandboxAlive = err == nil && sb.State == providers.StateRunning
	}
	return v
}

func (s *Service) check(id string) error {
	if !s.cfg.Enabled {
		return ErrDisabled
	}
	if !ids.Valid(id) {
		return invalid("session_id", "a session id is 1 to %d characters of A-Z, a-z, 0-9, '.', '_' and '-' (and not \".\" or \"..\")", ids.MaxLen)
	}
	return nil
}

// Get returns a session of the tenant.
func (s *Service) Get(ctx context.Context, tenant, id string) (View, error) {
	if err := s.check(id); err != nil {
		return View{}, err
	}
	sess, err := s.st.GetSession(ctx, ids.SessionKey(tenant, id))
	if errors.Is(err, store.ErrNotFound) {
		return View{}, notFound(id)
	}
	if err != nil {
		return View{}, s.unavailable(err)
	}
	return s.view(ctx, sess), nil
}

// Open creates the session unless it exists (created reports which); in
// warm mode its sandbox starts now. A deleted session starts again, empty.
func (s *Service) Open(ctx context.Context, tenant, id string) (View, bool, error) {
	if err := s.check(id); err != nil {
		return View{}, false, err
	}
	sess, created, err := s.record(ctx, tenant, id, true)
	if err != nil {
		return View{}, false, err
	}
	if s.cfg.Mode == config.SessionModeWarm {
		if sess, err = s.warm(ctx, sess); err != nil {
			return View{}, false, err
		}
	}
	return s.view(ctx, sess), created, nil
}

// warm starts the session's sandbox, holding the session as a run does.
func (s *Service) warm(ctx context.Context, sess store.Session) (store.Session, error) {
	ctx, cancel := context.WithTimeout(ctx, s.staleAfter()+setupBudget)
	defer cancel()
	if err := s.snapshotReady(ctx); err != nil {
		return sess, err
	}
	held, err := s.acquire(ctx, sess)
	if err != nil {
		return sess, err
	}
	hctx, hcancel := context.WithTimeout(ctx, setupBudget)
	_, err = s.ensureSandbox(hctx, &held, 0)
	hcancel()
	s.release(ctx, &held)
	return held, err
}

// snapshotReady waits for the dependency snapshot where the provider has
// snapshots.
func (s *Service) snapshotReady(ctx context.Context) error {
	caps, err := s.capabilities(ctx)
	if err != nil || !caps.Snapshots {
		return err
	}
	return s.EnsureSnapshot(ctx)
}

// record returns the session, creating it when there is none. A deleted
// session is KindGone unless reopen is set, which starts it again.
func (s *Service) record(ctx context.Context, tenant, id string, reopen bool) (store.Session, bool, error) {
	key := ids.SessionKey(tenant, id)
	sess, err := s.st.GetSession(ctx, key)
	switch {
	case err == nil && sess.State == store.SessionDeleting:
		return sess, false, &Error{Kind: KindConflict, Message: fmt.Sprintf("session %q is being deleted; its files are going", id)}
	case err == nil && sess.State == store.SessionDeleted && !reopen:
		return sess, false, s.gone(ctx, sess)
	case err == nil && sess.State != store.SessionDeleted:
		return sess, false, nil
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return sess, false, s.unavailable(err)
	}
	sess, created, err := s.st.CreateSession(ctx, store.NewSession{ID: key, Tenant: tenant, ClientID: id, VolumeSlug: volumeSlug(s.deployment, key), IdleTTL: s.ttl()})
	if err != nil {
		return sess, false, s.unavailable(err)
	}
	if created {
		s.event(ctx, key, event{typ: EventCreated, data: map[string]any{"volume": sess.VolumeSlug, "expires_at": sess.IdleExpiresAt}, revive: true})
		s.log.Info("session created", "session", key, "volume", sess.VolumeSlug)
	}
	return sess, created, nil
}

// gone describes a deleted session: when, and whether it expired.
func (s *Service) gone(ctx context.Context, sess store.Session) *Error {
	id := sess.ClientID
	why := "was deleted"
	if evs, err := s.events(ctx, sess.ID, 0); err == nil {
		for i := len(evs) - 1; i >= 0; i-- {
			if evs[i].Type == EventExpired {
				why = fmt.Sprintf("expired after %d minutes without a run and was deleted", s.cfg.VolumeTTLMinutes)
				break
			}
			if evs[i].Type == EventDeleted {
				break
			}
		}
	}
	return &Error{Kind: KindGone, Message: fmt.Sprintf("session %q %s at %s; its files are gone. POST /v1/sessions/%s to start it again with an empty %s",
		id, why, sess.DeletedAt.Format(time.RFC3339), id, WorkspacePath)}
}

// Events returns a session's events after seq after.
func (s *Service) Events(ctx context.Context, tenant, id string, after int64) ([]Event, error) {
	if err := s.check(id); err != nil {
		return nil, err
	}
	key := ids.SessionKey(tenant, id)
	if _, err := s.st.GetSession(ctx, key); errors.Is(err, store.ErrNotFound) {
		return nil, notFound(id)
	} else if err != nil {
		return nil, s.unavailable(err)
	}
	evs, err := s.events(ctx, key, after)
	if err != nil {
		return nil, s.unavailable(err)
	}
	return evs, nil
}

// Delete closes the session's sandbox and deletes its volume now. A run
// in progress makes it KindConflict; deleting a deleted session changes
// nothing.
func (s *Service) Delete(ctx context.Context, tenant, id string) (View, error) {
	if err := s.check(id); err != nil {
		return View{}, err
	}
	key := ids.SessionKey(tenant, id)
	sess, err := s.st.GetSession(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return View{}, notFound(id)
	}
	if err != nil {
		return View{}, s.unavailable(err)
	}
	if sess.State == store.SessionIdle {
		// Any expiry before the end of time: this deletion is asked for.
		got, err := s.st.BeginDelete(ctx, key, time.Now().AddDate(100, 0, 0))
		switch {
		case err == nil:
			sess = got
		case errors.Is(err, store.ErrConflict) && got.ID != "":
			sess = got
		default:
			return View{}, s.unavailable(err)
		}
	}
	switch sess.State {
	case store.SessionRunning:
		return View{}, &Error{Kind: KindConflict, Message: fmt.Sprintf("a run is in progress on session %q; delete it when the run has ended", id)}
	case store.SessionDeleted:
		return s.view(ctx, sess), nil
	}
	done, err := s.finishDelete(ctx, sess, EventDeleted, "deleted on request")
	if err != nil {
		// The cleanup finishes what is left.
		s.log.Warn("session deletion left for the cleanup", "session", key, "err", s.redact.Error(err))
		return s.view(ctx, sess), nil
	}
	return s.view(ctx, done), nil
}

// RunRequest is code to run.
type RunRequest struct {
	Code     string
	Language string
	// Timeout of the code; 0 means [sessions] timeout_seconds.
	Timeout time.Duration
	// Stateful runs Python, JavaScript or TypeScript in the session's
	// long-lived interpreter (stateful.go).
	Stateful bool
}

// Validate checks a request and fills the default timeout.
func (s *Service) Validate(req *RunRequest) error {
	switch {
	case req.Code == "":
		return invalid("code", "code is required")
	case len(req.Code) > MaxCodeBytes:
		return &Error{Kind: KindTooLarge, Field: "code", Message: fmt.Sprintf("code is %d bytes; the limit is %d (256 KiB)", len(req.Code), MaxCodeBytes)}
	case req.Language == "":
		return invalid("language", "language is required: one of %v", Languages)
	case !validLanguage(req.Language):
		return invalid("language", "language %q is not one of %v", req.Language, Languages)
	case req.Stateful && !statefulLanguage(req.Language):
		return invalid("stateful", "stateful runs are for %s, %s and %s; %s runs are stateless", LangPython, LangJavaScript, LangTypeScript, req.Language)
	case req.Timeout < 0 || req.Timeout > s.cfg.MaxTimeout():
		return invalid("timeout_seconds", "timeout_seconds must be from 1 to %d", s.cfg.MaxTimeoutSeconds)
	}
	if req.Timeout == 0 {
		req.Timeout = s.cfg.Timeout()
	}
	return nil
}

// Run runs code in a session, creating the session on its first run. It
// waits up to [sessions] sync_wait: a run that takes longer comes back
// with Status RunRunning and goes on; GetRun has its result later.
func (s *Service) Run(ctx context.Context, tenant, id string, req RunRequest) (Run, error) {
	if err := s.check(id); err != nil {
		return Run{}, err
	}
	if err := s.Validate(&req); err != nil {
		return Run{}, err
	}
	sess, _, err := s.record(ctx, tenant, id, false)
	if err != nil {
		return Run{}, err
	}
	key := ids.SessionKey(tenant, id)
	now := time.Now()
	run := Run{ID: ids.New(now), Tenant: tenant, SessionID: id, Status: RunRunning, Language: req.Language, Stateful: req.Stateful, Timeout: req.Timeout, CreatedAt: now}
	if s.launcher != nil {
		return s.launch(ctx, key, run, req.Code)
	}
	done := make(chan runOutcome, 1)
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		ectx, cancel := context.WithTimeout(s.base, s.budget(req.Timeout))
		defer cancel()
		fin, err := s.execute(ectx, sess, run, req.Code)
		done <- runOutcome{fin, err}
	}()
	wait := time.NewTimer(s.cfg.SyncWait.D())
	defer wait.Stop()
	select {
	case o := <-done:
		return o.run, o.err
	case <-wait.C:
	case <-ctx.Done():
	}
	// The run goes on; its record says so until it ends.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	wrote, err := s.putPending(wctx, key, run)
	if err != nil {
		return run, s.unavailable(err)
	}
	if !wrote {
		// It ended meanwhile.
		o := <-done
		return o.run, o.err
	}
	return run, nil
}

type runOutcome struct {
	run Run
	err error
}

// budget bounds a run from its request to its recorded end: waiting for
// the session (at most until its holder is stale), starting a sandbox, and
// the code.
func (s *Service) budget(timeout time.Duration) time.Duration {
	return s.staleAfter() + setupBudget + timeout
}

// execute runs the code, records how it ended and lets go of the session.
// The run's record and the session's release are writes of their own,
// neither waiting for the other: made at once, a warm run waits for one
// store round trip instead of two. Both are done before it returns.
func (s *Service) execute(ctx context.Context, sess store.Session, run Run, code string) (Run, error) {
	res, held, err := s.runCode(ctx, sess, run, code)
	if held == nil {
		return s.finish(ctx, sess.ID, run, res, err)
	}
	released := make(chan struct{})
	go func() {
		defer close(released)
		s.release(ctx, held)
	}()
	fin, err := s.finish(ctx, sess.ID, run, res, err)
	<-released
	return fin, err
}

// finish records a run's end: its result, or the error that kept it from
// running.
func (s *Service) finish(ctx context.Context, key string, run Run, res *Result, err error) (Run, error) {
	run.FinishedAt = time.Now()
	run.Code = ""
	if err != nil {
		msg := s.redact.String(err.Error())
		var e *Error
		if errors.As(err, &e) {
			msg = s.redact.String(e.Message)
		}
		run.Status, run.Result = RunFailed, &Result{Error: &msg, Result: []byte("null"), ExitCode: -1}
	} else {
		run.Result = res
		run.Status = RunSucceeded
		if !res.Success {
			run.Status = RunFailed
		}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	if perr := s.putFinished(rctx, key, run); perr != nil {
		s.log.Error("recording a run's result", "session", key, "run_id", run.ID, "err", perr)
	}
	return run, err
}

// GetRun returns a run of a session of the tenant.
func (s *Service) GetRun(ctx context.Context, tenant, id, runID string) (Run, error) {
	if err := s.check(id); err != nil {
		return Run{}, err
	}
	if !ids.Valid(runID) {
		return Run{}, invalid("run_id", "a run id is 1 to %d characters of A-Z, a-z, 0-9, '.', '_' and '-'", ids.MaxLen)
	}
	run, err := s.getRun(ctx, ids.SessionKey(tenant, id), runID)
	if errors.Is(err, store.ErrNotFound) {
		return Run{}, &Error{Kind: KindNotFound, Message: fmt.Sprintf("run %q of session %q not found", runID, id)}
	}
	if err != nil {
		return Run{}, s.unavailable(err)
	}
	run.Code = ""
	if run.Status == RunRunning && time.Since(run.CreatedAt) > s.budget(run.Timeout)+recordTimeout {
		// Past anything a run may take: whatever ran it stopped before
		// recording how it ended.
		msg := "the run ended without a result: the process running it stopped"
		run.Status, run.Result = RunFailed, &Result{Error: &msg, Result: []byte("null"), ExitCode: -1}
	}
	return run, nil
}

func (s *Service) unavailable(err error) *Error {
	return &Error{Kind: KindUnavailable, Message: "the session store does not answer; retry", Err: err}
}
