package sandboxes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/providers"
)

// Request is a sandbox an owner wants.
type Request struct {
	Owner Owner
	// Job, when set, is the job whose usage the sandbox counts in (an
	// agent run's direct sandbox and its children): its ledger entry
	// names it, and no usage record of its own is written when it closes.
	Job string
	// Spec is what to create. Spec.Name is required: it keys the ledger
	// entry, and it makes Acquire idempotent for the owner.
	Spec providers.CreateSpec
	// Unblock, when set, is called once if the provider refuses the create
	// with FailedPrecondition (something the owner holds is in the way, such
	// as its volume still mounted by a sandbox nothing refers to); the
	// create is then tried once more. It may release the owner's sandboxes,
	// this one's entry included: the entry is written again before the
	// second create.
	Unblock func(ctx context.Context) error
	// Ready, when set, warms the new sandbox up before Acquire returns it
	// (installs what it needs, waits until it answers). If it fails, the
	// sandbox is released and Ready's error returned as it is. An adopted
	// sandbox is not warmed up again.
	Ready func(ctx context.Context, sb providers.Sandbox) error
}

// Lease is an acquired sandbox.
type Lease struct {
	Sandbox providers.Sandbox
	// Adopted: the owner already held this sandbox under the name (an
	// earlier attempt created it and recorded it running), and it still
	// runs; nothing was created.
	Adopted bool
}

// deadline is the latest a sandbox may live: the reaper terminates live
// entries past it. The provider ends it at its lifetime; the minute covers
// the create itself.
func (m *Manager) deadline(spec providers.CreateSpec) time.Time {
	return m.now().Add(spec.Lifetime + time.Minute)
}

func (m *Manager) begin(ctx context.Context, req Request) (store.LedgerEntry, error) {
	e := store.LedgerEntry{
		Name:     req.Spec.Name,
		Provider: m.name,
		Owner:    req.Owner.String(),
		Job:      req.Job,
		Tenant:   req.Owner.Tenant,
		Labels:   req.Spec.Labels,
		Snapshot: req.Spec.Snapshot,
		MemoryMB: req.Spec.Resources.MemoryMB,
		Deadline: m.deadline(req.Spec),
	}
	if req.Owner.Parent != nil {
		e.Parent = req.Owner.Parent.String()
	}
	got, err := m.st.LedgerBegin(ctx, e)
	if err != nil {
		return got, fmt.Errorf("ledger: %w", err)
	}
	return got, nil
}

// Acquire returns a running sandbox for req.Owner named req.Spec.Name.
// The ledger entry is written before the create, so a crash between the
// two leaves a "creating" entry that ReleaseOwner and Reconcile resolve. A
// retried Acquire (same owner and name) finds the running entry and adopts
// its sandbox when it still runs; when it is gone, the entry is closed and
// a new sandbox created under the name. A name held live by another owner
// is store.ErrConflict.
//
// Errors: a *store.LimitError when a tenant quota refuses it (nothing is
// created); a *CreateError when the provider did not create it; ErrReleased
// when the owner was released while the create ran; Ready's own error; a
// store error (wrapped) when the ledger could not be written.
func (m *Manager) Acquire(ctx context.Context, req Request) (Lease, error) {
	req.Spec = m.labelled(req.Spec)
	spec := req.Spec
	if spec.Name == "" || req.Owner.Kind == "" || req.Owner.Key == "" {
		return Lease{}, fmt.Errorf("acquire: a sandbox needs a name and an owner: %w", store.ErrInvalid)
	}
	start := time.Now()
	t := target{owner: req.Owner.String(), tenant: req.Owner.Tenant, name: spec.Name}
	entry, err := m.begin(ctx, req)
	if err != nil {
		return Lease{}, err
	}
	if entry.State == store.LedgerRunning && entry.ProviderID != "" {
		sb, err := m.prov.Get(ctx, entry.ProviderID)
		if err == nil && sb.State == providers.StateRunning {
			t.id = sb.ID
			m.record(ctx, slog.LevelInfo, EventReused, t, time.Since(start), "found", "ledger")
			return Lease{Sandbox: sb, Adopted: true}, nil
		}
		if err != nil && !providers.IsNotFound(err) {
			return Lease{}, fmt.Errorf("look up sandbox %s: %w", entry.ProviderID, err)
		}
		// It is gone (expired or preempted): close the entry and start over.
		closed, err := m.st.LedgerClose(ctx, spec.Name, "gone", nil)
		if err != nil {
			return Lease{}, fmt.Errorf("ledger: %w", err)
		}
		m.recordUsage(ctx, closed)
		m.record(ctx, slog.LevelWarn, EventGone, target{owner: t.owner, tenant: t.tenant, name: t.name, id: entry.ProviderID}, time.Since(start), "reason", "retried acquire")
		if _, err := m.begin(ctx, req); err != nil {
			return Lease{}, err
		}
	}
	// Admitted once the ledger entry exists, so that a slot is never held
	// for a sandbox the ledger does not know; a refusal closes the entry.
	if err := m.quot.AdmitSandbox(ctx, req.Owner.Tenant, spec.Name, spec.Lifetime, true); err != nil {
		if _, cerr := m.close(context.WithoutCancel(ctx), spec.Name, "refused: "+err.Error(), nil); cerr != nil && !errors.Is(cerr, store.ErrNotFound) {
			m.log.Warn("ledger close after a refused acquire", "name", spec.Name, "err", cerr)
		}
		m.record(ctx, slog.LevelInfo, EventRefused, t, time.Since(start), "err", err)
		return Lease{}, err
	}
	sb, taken, err := m.create(ctx, req)
	if err != nil {
		m.record(ctx, slog.LevelWarn, EventFailed, t, time.Since(start), "stage", "create", "err", scrub(err, spec))
		m.endLostCreate(ctx, t, spec, err)
		if _, cerr := m.close(context.WithoutCancel(ctx), spec.Name, "create failed", nil); cerr != nil && !errors.Is(cerr, store.ErrNotFound) {
			m.log.Warn("ledger close after a failed create", "name", spec.Name, "err", cerr)
		}
		return Lease{}, &CreateError{Name: spec.Name, Err: err}
	}
	t.id = sb.ID
	if _, err := m.st.LedgerRunning(ctx, spec.Name, sb.ID); err != nil {
		stage := "ledger"
		if errors.Is(err, store.ErrConflict) {
			stage = "released"
		}
		m.record(ctx, slog.LevelWarn, EventFailed, t, time.Since(start), "stage", stage, "err", err)
		// Closed meanwhile (the owner was released), or the store failed:
		// either way this sandbox must not outlive the call untracked.
		if rerr := m.end(context.WithoutCancel(ctx), t, "released during create"); rerr != nil {
			m.log.Error("terminate a sandbox whose ledger entry could not be marked running", "sandbox_id", sb.ID, "err", rerr)
		}
		if errors.Is(err, store.ErrConflict) {
			return Lease{}, fmt.Errorf("%w: %w", ErrReleased, err)
		}
		return Lease{}, fmt.Errorf("ledger: %w", err)
	}
	if req.Ready != nil {
		if err := req.Ready(ctx, sb); err != nil {
			m.record(ctx, slog.LevelWarn, EventFailed, t, time.Since(start), "stage", "warm-up", "err", scrub(err, spec))
			if rerr := m.end(context.WithoutCancel(ctx), t, "warm-up failed"); rerr != nil {
				m.log.Error("terminate a sandbox that could not be used", "sandbox_id", sb.ID, "err", rerr)
			}
			return Lease{}, err
		}
	}
	if taken {
		m.record(ctx, slog.LevelInfo, EventReused, t, time.Since(start), "found", "name taken")
	} else {
		m.record(ctx, slog.LevelInfo, EventCreated, t, time.Since(start))
	}
	return Lease{Sandbox: sb}, nil
}

// create asks the provider, handling the answers that do not mean failure.
// taken: the name was taken by a live sandbox, which is returned instead.
func (m *Manager) create(ctx context.Context, req Request) (sb providers.Sandbox, taken bool, err error) {
	sb, err = m.prov.Create(ctx, req.Spec)
	if providers.CodeOf(err) == providers.FailedPrecondition && req.Unblock != nil {
		if uerr := req.Unblock(ctx); uerr != nil {
			m.log.Warn("unblocking a create", "name", req.Spec.Name, "err", uerr)
		}
		if _, berr := m.begin(ctx, req); berr != nil {
			return providers.Sandbox{}, false, berr
		}
		sb, err = m.prov.Create(ctx, req.Spec)
	}
	if providers.CodeOf(err) == providers.AlreadyExists {
		// A previous attempt created it but did not live to record it.
		sb, ferr := m.findByName(ctx, req.Spec.Name)
		if providers.IsNotFound(ferr) {
			// Not this deployment's: another stack on the provider has a
			// live sandbox of this name, which is not ours to use.
			return providers.Sandbox{}, false, fmt.Errorf("the name is taken by a live sandbox of another deployment than %q: %w", m.dep, err)
		}
		return sb, ferr == nil, ferr
	}
	return sb, false, err
}

// endLostCreate handles a create that failed in a way that does not say
// whether the sandbox was made (the plugin died during the call, the answer
// timed out): where the provider finds sandboxes by name, one that was made
// is terminated before its ledger entry closes. Elsewhere (Sandy has no
// names and no listing) it cannot be found, and it ends at the lifetime it
// was created with.
func (m *Manager) endLostCreate(ctx context.Context, t target, spec providers.CreateSpec, cause error) {
	name := spec.Name
	switch providers.CodeOf(cause) {
	case providers.Unavailable, providers.DeadlineExceeded, providers.Internal:
	default:
		return
	}
	ctx = context.WithoutCancel(ctx)
	sb, err := m.findByName(ctx, name)
	switch {
	case err == nil:
		t.id = sb.ID
		// A failure is logged and counted by terminate; the entry closes
		// anyway, and Reconcile finds the sandbox as an orphan.
		_, _ = m.terminate(ctx, t, "create answer lost")
	case providers.IsUnsupported(err):
		m.log.Warn("a create whose answer was lost may have made a sandbox the provider cannot find; it ends at its lifetime", "name", name, "err", scrub(cause, spec))
	}
}

// scrub is err's message without the values of the spec's secrets, which a
// provider's error might echo: logs never hold them.
func scrub(err error, spec providers.CreateSpec) string {
	msg := err.Error()
	for _, sec := range spec.Secrets {
		if sec.Value != "" {
			msg = strings.ReplaceAll(msg, sec.Value, "[redacted:"+sec.Name+"]")
		}
	}
	return msg
}
