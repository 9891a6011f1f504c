// Package sandboxes is the one owner of the sandbox lifecycle: the only code
// outside the providers that calls a provider's Create and Terminate, and the
// only code that writes the sandbox ledger. Research jobs, sessions, the
// reaper and the local stack's shutdown ask it for sandboxes and give them
// back; none of them repeats the protocol.
//
// The protocol, as Nomad's task runner keeps it for a driver: a ledger entry
// is written before every create, so no sandbox is ever untracked (a crash
// between the two leaves a "creating" entry that Reconcile resolves); the
// entry is marked running with the provider's id once the create answers;
// every terminate is followed by closing the entry. A sandbox belongs to an
// Owner (a job, a session; later a parent sandbox), recorded in its entry, so
// everything an owner holds can be found and released together.
package sandboxes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/sandstep/sandstep/internal/service/quota"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/providers"
)

// Kinds of owners.
const (
	KindJob     = "job"
	KindSession = "session"
)

// Owner is who a sandbox belongs to.
type Owner struct {
	// Kind is what the owner is (KindJob, KindSession).
	Kind string
	// Key is the owner's internal key (package ids): never a client's id,
	// which is unique within its tenant only.
	Key    string
	Tenant string
	// Parent is the owner's own owner, when it has one (a child sandbox
	// started by an agent in its parent). It is recorded in the ledger.
	Parent *Owner
	// Labels, when set, are labels every sandbox of the owner carries at
	// the provider: ReleaseOwner also ends the sandboxes the provider
	// lists with all of them, strays the ledger lost track of.
	Labels map[string]string
}

// JobOwner is the owner of a research job's sandboxes.
func JobOwner(key, tenant string) Owner { return Owner{Kind: KindJob, Key: key, Tenant: tenant} }

// SessionOwner is the owner of a session's sandboxes.
func SessionOwner(key, tenant string) Owner {
	return Owner{Kind: KindSession, Key: key, Tenant: tenant}
}

// String is the owner as the ledger records it: "<kind>:<key>".
func (o Owner) String() string { return o.Kind + ":" + o.Key }

// ParseOwner reads an owner as the ledger records it. Only Kind and Key
// come back.
func ParseOwner(s string) Owner {
	kind, key, _ := strings.Cut(s, ":")
	return Owner{Kind: kind, Key: key}
}

// Options configure a Manager.
type Options struct {
	Store    *store.Store
	Provider providers.Provider
	// ProviderName is recorded in every ledger entry; Reconcile leaves
	// entries of other providers alone (it can neither see nor stop them).
	ProviderName string
	// Deployment is this stack's id ([provider] deployment): every sandbox
	// is created with it in providers.LabelDeployment, and Reconcile takes
	// for orphans only sandboxes that carry it. "" is refused.
	Deployment string
	Logger     *slog.Logger
	// Now is the clock of deadlines (default time.Now).
	Now func() time.Time
	// Quotas, when set, are the tenant quotas every Acquire is admitted
	// by (max_sandbox_ttl, concurrent_sandboxes, sandbox_creations_per_hour);
	// nil allows everything. The slot is given back when the entry closes.
	Quotas *quota.Enforcer
	// Counters, when set, count this Manager's lifecycle events; nil
	// counts them in ProcessCounters.
	Counters *Counters
}

// Manager acquires and releases sandboxes. It is safe for concurrent use
// and holds no state of its own beyond the provider's capabilities and the
// counts of events: several Managers over one store and provider agree.
type Manager struct {
	st   *store.Store
	prov providers.Provider
	name string
	dep  string
	log  *slog.Logger
	now  func() time.Time
	quot *quota.Enforcer
	// counters is the one piece of state of its own: counts of events.
	counters *Counters

	capsMu sync.Mutex
	caps   *providers.Capabilities
}

// New returns a Manager. Store and Provider are required.
func New(o Options) *Manager {
	if o.Store == nil || o.Provider == nil || o.Deployment == "" {
		panic("sandboxes.New: Store, Provider and Deployment are required")
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	counters := o.Counters
	if counters == nil {
		counters = ProcessCounters()
	}
	return &Manager{st: o.Store, prov: o.Provider, name: o.ProviderName, dep: o.Deployment, log: log, now: now, quot: o.Quotas, counters: counters}
}

// Deployment is the deployment id the Manager labels sandboxes with.
func (m *Manager) Deployment() string { return m.dep }

// Labels are the labels every sandbox, volume and snapshot of this
// deployment carries: the owner label and the deployment's id.
func Labels(deployment string) map[string]string {
	return map[string]string{providers.LabelOwner: "sandstep", providers.LabelDeployment: deployment}
}

// labelled returns spec with this deployment's labels added.
func (m *Manager) labelled(spec providers.CreateSpec) providers.CreateSpec {
	labels := Labels(m.dep)
	for k, v := range spec.Labels {
		if k != providers.LabelOwner && k != providers.LabelDeployment {
			labels[k] = v
		}
	}
	spec.Labels = labels
	return spec
}

// Find returns the ledger entry of the sandbox named name; store.ErrNotFound
// when the ledger never knew it.
func (m *Manager) Find(ctx context.Context, name string) (store.LedgerEntry, error) {
	return m.st.LedgerGet(ctx, name)
}

// Live returns every live ledger entry (being created or running), of
// every owner: what a cleanup that must not take what a sandbox uses (a
// snapshot) checks against.
func (m *Manager) Live(ctx context.Context) ([]store.LedgerEntry, error) {
	return m.st.LedgerListLive(ctx, time.Now().AddDate(100, 0, 0), 0)
}

// Closed reports whether the sandbox named name is over as far as the
// ledger knows: its entry is terminated, or there is none.
func (m *Manager) Closed(ctx context.Context, name string) (bool, error) {
	e, err := m.st.LedgerGet(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return true, nil
	}
	return err == nil && e.State == store.LedgerTerminated, err
}

// Usage is what owner's sandboxes used, from the ledger (store.EntryUsage):
// their time by provider and memory size, from when each was confirmed
// running to when it was terminated (or to now, for one still live), their
// bytes out where measured, their execs.
func (m *Manager) Usage(ctx context.Context, owner Owner) (store.Usage, error) {
	entries, err := m.st.LedgerListByOwner(ctx, owner.String())
	if err != nil {
		return store.Usage{}, err
	}
	var u store.Usage
	now := m.now()
	for _, e := range entries {
		u.Add(store.EntryUsage(e, now))
	}
	return u, nil
}

// Held returns the live sandboxes owner holds (ledger entries not closed
// that have a provider id), oldest first: what a phase ending a job may
// still read from before ReleaseOwner takes them.
func (m *Manager) Held(ctx context.Context, owner Owner) ([]store.LedgerEntry, error) {
	entries, err := m.st.LedgerListByOwner(ctx, owner.String())
	if err != nil {
		return nil, err
	}
	held := entries[:0]
	for _, e := range entries {
		if e.State != store.LedgerTerminated && e.ProviderID != "" {
			held = append(held, e)
		}
	}
	return held, nil
}

// capabilities asks the provider once; a failure is not remembered.
func (m *Manager) capabilities(ctx context.Context) (providers.Capabilities, error) {
	m.capsMu.Lock()
	defer m.capsMu.Unlock()
	if m.caps != nil {
		return *m.caps, nil
	}
	info, err := m.prov.Info(ctx)
	if err != nil {
		return providers.Capabilities{}, fmt.Errorf("provider: %w", err)
	}
	m.caps = &info.Capabilities
	return info.Capabilities, nil
}

// CreateError is an Acquire whose create the provider refused or did not
// answer. The ledger entry is closed; where the provider finds sandboxes by
// name, one the create made anyway was terminated. Its message is the
// provider's, which callers show to users: the name (an internal key) is
// not in it.
type CreateError struct {
	Name string
	Err  error
}

func (e *CreateError) Error() string { return e.Err.Error() }
func (e *CreateError) Unwrap() error { return e.Err }

// TerminateError is a release whose terminate failed: the sandbox may
// still run, and its ledger entry stays live for the next release or
// Reconcile.
type TerminateError struct {
	ID  string
	Err error
}

func (e *TerminateError) Error() string { return "terminate sandbox " + e.ID + ": " + e.Err.Error() }
func (e *TerminateError) Unwrap() error { return e.Err }

// ErrReleased is an Acquire whose ledger entry was closed while the create
// ran (the owner was released meanwhile, e.g. a cancelled job's cleanup):
// the sandbox just made was terminated.
var ErrReleased = errors.New("the sandbox was released while it was being acquired")

// ErrNotOwner is a Release of a sandbox another owner holds.
var ErrNotOwner = errors.New("the sandbox belongs to another owner")

// lookupByName finds the live sandbox named name at the provider, for an
// entry whose create did not live to record the provider's id. It is ""
// when there is none, or when the provider cannot list (such a sandbox ends
// at the lifetime it was created with).
func (m *Manager) lookupByName(ctx context.Context, name string) (string, error) {
	sb, err := m.findByName(ctx, name)
	switch {
	case err == nil:
		return sb.ID, nil
	case providers.IsNotFound(err), providers.IsUnsupported(err):
		return "", nil
	}
	return "", fmt.Errorf("find sandbox %s: %w", name, err)
}

// findByName finds this deployment's live sandbox named name. Only this
// deployment's: a stack sharing the provider may hold a sandbox of the same
// name (the same tenant and job id), which this one must never adopt nor
// terminate.
func (m *Manager) findByName(ctx context.Context, name string) (providers.Sandbox, error) {
	list, err := m.prov.List(ctx, providers.ListFilter{Name: name, Labels: Labels(m.dep)})
	if err != nil {
		return providers.Sandbox{}, err
	}
	for _, sb := range list {
		if sb.Name == name && (sb.State == providers.StateRunning || sb.State == "") {
			return sb, nil
		}
	}
	return providers.Sandbox{}, providers.Errorf(providers.NotFound, "find", "no live sandbox named %q", name)
}

// end terminates the sandbox t.id (when known) and closes the entry t.name
// (when known), with the bytes out the provider measured before the
// terminate.
func (m *Manager) end(ctx context.Context, t target, reason string) error {
	var bytesOut *int64
	if t.id != "" {
		net, err := m.terminate(ctx, t, reason)
		if err != nil {
			return err
		}
		if net.Measured {
			bytesOut = &net.BytesOut
		}
	}
	if t.name != "" {
		if _, err := m.close(ctx, t.name, reason, bytesOut); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("ledger close %s: %w", t.name, err)
		}
	}
	return nil
}

// terminate ends the sandbox t.id, the one way every cleanup takes, and
// records it. What the sandbox sent and received is read first, while it
// lives, logged with the event and returned (not Measured when the
// provider does not count it or the sandbox was already gone).
func (m *Manager) terminate(ctx context.Context, t target, reason string) (providers.NetworkUsage, error) {
	start := time.Now()
	var network providers.NetworkUsage
	gone := false
	switch sb, err := m.prov.Get(ctx, t.id); {
	case err == nil:
		network = sb.Network
		gone = sb.State == providers.StateTerminated
	case providers.IsNotFound(err):
		gone = true
	}
	level := slog.LevelInfo
	if reason == reasonOrphan {
		level = slog.LevelWarn
	}
	if err := m.prov.Terminate(ctx, t.id); err != nil {
		m.record(ctx, slog.LevelError, EventCleanupFailed, t, time.Since(start), "reason", reason, "err", err)
		return providers.NetworkUsage{}, &TerminateError{ID: t.id, Err: err}
	}
	if gone {
		// The terminate is idempotent, and nothing was cleaned up now.
		// With a live ledger entry it ended behind the ledger's back; a
		// repeated release (no entry) is no event.
		if t.name != "" {
			m.record(ctx, slog.LevelWarn, EventGone, t, time.Since(start), "reason", reason)
		}
		return network, nil
	}
	m.record(ctx, level, EventCleanedUp, t, time.Since(start), "reason", reason, "network", network)
	return network, nil
}

// close closes the ledger entry name (with the sandbox's bytes out, when
// measured), records its usage (recordUsage) and gives back its tenant's
// concurrent_sandboxes slot. A slot whose release fails is logged and left
// to the reaper (quota.Reconcile): the sandbox is gone either way.
func (m *Manager) close(ctx context.Context, name, reason string, bytesOut *int64) (store.LedgerEntry, error) {
	e, err := m.st.LedgerClose(ctx, name, reason, bytesOut)
	if err != nil {
		return e, err
	}
	m.recordUsage(ctx, e)
	if rerr := m.quot.ReleaseSandbox(ctx, e.Tenant, name); rerr != nil {
		m.log.Warn("give back a sandbox's quota slot", "name", name, "tenant", e.Tenant, "err", rerr)
	}
	return e, nil
}
