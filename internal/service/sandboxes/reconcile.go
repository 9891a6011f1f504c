package sandboxes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/providers"
)

// ReconcileOptions shape one Reconcile pass.
type ReconcileOptions struct {
	// Now is the pass's time (default the Manager's clock): live entries
	// whose deadline is before it are reaped.
	Now time.Time
	// CreateGrace is how long an entry may stay "creating" before its
	// create is taken to have died with its caller. Default 10m.
	CreateGrace time.Duration
	// Unneeded, when set, asks the owner's side about a live entry whose
	// deadline has not passed: a non-empty reason reaps it (the job ended,
	// the session does not use it); "" keeps it. An error keeps it too and
	// is returned with the pass's others.
	Unneeded func(ctx context.Context, e store.LedgerEntry) (string, error)
}

// Counts is what a Reconcile pass did.
type Counts struct {
	// Reaped: live entries whose sandbox was terminated because its
	// deadline passed, its owner no longer needs it, or its create was
	// never confirmed.
	Reaped int
	// Gone: live entries whose sandbox the provider no longer has.
	Gone int
	// Orphans: sandboxes carrying our owner label and deployment id that
	// the ledger does not hold as live.
	Orphans int
}

// Reconcile brings the ledger and the provider together: it reaps live
// entries that are past their deadline, unneeded, or whose create was never
// confirmed; terminates sandboxes of ours the ledger does not know (where
// the provider can list); and closes entries whose sandbox is gone. Every
// action is idempotent or a conditional write, so passes may overlap with
// each other and with acquires and releases.
func (m *Manager) Reconcile(ctx context.Context, o ReconcileOptions) (Counts, error) {
	if o.Now.IsZero() {
		o.Now = m.now()
	}
	if o.CreateGrace <= 0 {
		o.CreateGrace = 10 * time.Minute
	}
	var c Counts
	// The ledger is read before the provider is asked: an entry listed
	// here was written before its create, so its sandbox, if alive, is in
	// the provider's answer below.
	live, err := m.st.LedgerListLive(ctx, o.Now.AddDate(100, 0, 0), 0)
	if err != nil {
		return c, fmt.Errorf("ledger: %w", err)
	}
	caps, err := m.capabilities(ctx)
	if err != nil {
		return c, err
	}
	var errs []error
	keep := live[:0]
	for _, e := range live {
		if !m.mine(e) {
			// Another provider's sandbox (the configuration changed): this
			// one can neither see nor stop it.
			continue
		}
		reason, err := m.unneeded(ctx, o, e)
		if err != nil {
			errs = append(errs, err)
			keep = append(keep, e)
			continue
		}
		if reason == "" {
			keep = append(keep, e)
			continue
		}
		if err := m.reap(ctx, e, reason); err != nil {
			errs = append(errs, err)
			continue
		}
		c.Reaped++
	}
	if caps.ListByLabels {
		errs = append(errs, m.reconcileByList(ctx, keep, &c))
	} else {
		errs = append(errs, m.reconcileByGet(ctx, keep, &c))
	}
	return c, errors.Join(errs...)
}

// unneeded says why a live entry's sandbox should go ("" to keep it).
func (m *Manager) unneeded(ctx context.Context, o ReconcileOptions, e store.LedgerEntry) (string, error) {
	if e.Deadline.Before(o.Now) {
		return "deadline passed", nil
	}
	if gone, err := m.parentGone(ctx, e); err != nil || gone {
		if gone {
			return "parent gone", nil
		}
		return "", err
	}
	if o.Unneeded != nil {
		reason, err := o.Unneeded(ctx, e)
		if reason != "" || err != nil {
			return reason, err
		}
	}
	if e.State == store.LedgerCreating && e.ProviderID == "" && o.Now.Sub(e.CreatedAt) > o.CreateGrace {
		return "create never confirmed", nil
	}
	return "", nil
}

// reap terminates an entry's sandbox and closes the entry. An entry whose
// create was never confirmed has no id: where the provider can list, its
// sandbox is found by name.
func (m *Manager) reap(ctx context.Context, e store.LedgerEntry, reason string) error {
	id := e.ProviderID
	if id == "" {
		var err error
		if id, err = m.lookupByName(ctx, e.Name); err != nil {
			return err
		}
	}
	return m.end(ctx, target{owner: e.Owner, tenant: e.Tenant, name: e.Name, id: id}, "reaped: "+reason)
}

// reconcileByList compares the provider's sandboxes with the ledger: a
// sandbox of ours the ledger does not hold as live is terminated; a live
// entry whose sandbox is not there any more is closed.
func (m *Manager) reconcileByList(ctx context.Context, live []store.LedgerEntry, c *Counts) error {
	// Only this deployment's: another stack sharing the provider keeps a
	// ledger of its own, which this one cannot read. Sandboxes made before
	// deployments were labelled carry no id and are left to their lifetime
	// (README, "Deployments").
	list, err := m.prov.List(ctx, providers.ListFilter{Labels: Labels(m.dep)})
	if err != nil {
		return fmt.Errorf("list sandboxes: %w", err)
	}
	var errs []error
	present := make(map[string]bool, len(list))
	for _, sb := range list {
		present[sb.ID] = true
		if sb.State != "" && sb.State != providers.StateRunning {
			continue
		}
		known, err := m.known(ctx, sb)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if known {
			continue
		}
		if _, err := m.terminate(ctx, target{tenant: sb.Labels[providers.LabelTenant], name: sb.Name, id: sb.ID}, reasonOrphan); err != nil {
			errs = append(errs, fmt.Errorf("terminate orphan: %w", err))
			continue
		}
		c.Orphans++
	}
	for _, e := range live {
		if e.State != store.LedgerRunning || e.ProviderID == "" || present[e.ProviderID] {
			continue
		}
		if err := m.closeGone(ctx, e); err != nil {
			errs = append(errs, err)
			continue
		}
		c.Gone++
	}
	return errors.Join(errs...)
}

// known reports whether the ledger holds sb as live. The ledger entry is
// read now, consistently: an entry is written before its create, so a
// sandbox that exists and is ours has one unless it was created behind the
// ledger's back, or its entry was closed.
func (m *Manager) known(ctx context.Context, sb providers.Sandbox) (bool, error) {
	if sb.Name == "" {
		return false, nil
	}
	e, err := m.st.LedgerGet(ctx, sb.Name)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if e.State == store.LedgerTerminated {
		return false, nil
	}
	return e.ProviderID == "" || e.ProviderID == sb.ID, nil
}

// reconcileByGet asks the provider about each live entry, for providers
// that cannot list: a sandbox it does not know any more is gone.
func (m *Manager) reconcileByGet(ctx context.Context, live []store.LedgerEntry, c *Counts) error {
	var errs []error
	for _, e := range live {
		if e.ProviderID == "" {
			continue
		}
		sb, err := m.prov.Get(ctx, e.ProviderID)
		if err == nil && sb.State != providers.StateTerminated {
			continue
		}
		if err != nil && !providers.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("get sandbox %s: %w", e.ProviderID, err))
			continue
		}
		if err := m.closeGone(ctx, e); err != nil {
			errs = append(errs, err)
			continue
		}
		c.Gone++
	}
	return errors.Join(errs...)
}

// reasonOrphan is the reason a sandbox the ledger does not know is ended.
const reasonOrphan = "orphan: the ledger does not know it"

func (m *Manager) closeGone(ctx context.Context, e store.LedgerEntry) error {
	start := time.Now()
	if _, err := m.close(ctx, e.Name, "gone", nil); err != nil {
		return fmt.Errorf("close ledger entry %s: %w", e.Name, err)
	}
	m.record(ctx, slog.LevelWarn, EventGone, target{owner: e.Owner, tenant: e.Tenant, name: e.Name, id: e.ProviderID}, time.Since(start), "reason", "reconcile")
	return nil
}
