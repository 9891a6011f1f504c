package sandboxes

import (
	"context"
	"errors"
	"fmt"

	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/providers"
)

// Ref names one sandbox: by its ledger name, its provider id, or both.
type Ref struct {
	Name string
	ID   string
}

// Release terminates one sandbox of owner and closes its ledger entry. It
// is idempotent: a sandbox the ledger does not know, or knows as
// terminated, is a no-op (with only an id, the provider's terminate is
// idempotent too). With only an id, the entry is found among the owner's.
// A terminate that fails is a *TerminateError, and the entry stays live.
func (m *Manager) Release(ctx context.Context, owner Owner, ref Ref, reason string) error {
	name, id := ref.Name, ref.ID
	switch {
	case name == "" && id == "":
		return nil
	case name != "":
		e, err := m.st.LedgerGet(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			return m.end(ctx, target{owner: owner.String(), tenant: owner.Tenant, name: "", id: id}, reason)
		}
		if err != nil {
			// The sandbox goes anyway when its id is known; the entry is
			// closed by Reconcile once the provider no longer has it.
			return errors.Join(fmt.Errorf("ledger: %w", err), m.end(ctx, target{owner: owner.String(), tenant: owner.Tenant, name: "", id: id}, reason))
		}
		if e.Owner != owner.String() {
			return fmt.Errorf("release %s (owner %s) for %s: %w", name, e.Owner, owner, ErrNotOwner)
		}
		if e.State == store.LedgerTerminated {
			// A retried release: its usage record is written again (the
			// same record), in case the first write was lost.
			m.recordUsage(ctx, e)
			return m.end(ctx, target{owner: owner.String(), tenant: owner.Tenant, name: "", id: id}, reason)
		}
		if id == "" {
			if id = e.ProviderID; id == "" {
				if id, err = m.lookupByName(ctx, name); err != nil {
					return err
				}
			}
		}
	default:
		entries, err := m.st.LedgerListByOwner(ctx, owner.String())
		if err != nil {
			// The sandbox goes anyway; its entry is closed by Reconcile
			// once the provider no longer has it.
			m.log.Warn("finding a sandbox's ledger entry", "owner", owner.String(), "sandbox_id", id, "err", err)
		}
		for _, e := range entries {
			if e.ProviderID == id && e.State != store.LedgerTerminated {
				name = e.Name
			}
		}
	}
	return m.end(ctx, target{owner: owner.String(), tenant: owner.Tenant, name: name, id: id}, reason)
}

// ReleaseOwner terminates every live sandbox the ledger holds for owner and
// closes their entries; with owner.Labels set, also those the provider lists
// with the labels (where it can list). It returns the provider ids it
// terminated. It is idempotent; a failure for one sandbox does not stop the
// others, and the errors are joined.
func (m *Manager) ReleaseOwner(ctx context.Context, owner Owner, reason string) ([]string, error) {
	entries, err := m.st.LedgerListByOwner(ctx, owner.String())
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	var ended []string
	var errs []error
	done := map[string]bool{}
	for _, e := range entries {
		if e.State == store.LedgerTerminated {
			continue
		}
		id := e.ProviderID
		if id == "" {
			// Recorded before a create whose answer was lost: ask the
			// provider by name.
			if id, err = m.lookupByName(ctx, e.Name); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if err := m.end(ctx, target{owner: owner.String(), tenant: owner.Tenant, name: e.Name, id: id}, reason); err != nil {
			errs = append(errs, err)
			continue
		}
		if id != "" {
			ended = append(ended, id)
			done[id] = true
		}
	}
	if len(owner.Labels) > 0 {
		more, err := m.releaseListed(ctx, owner, reason, done)
		ended = append(ended, more...)
		errs = append(errs, err)
	}
	return ended, errors.Join(errs...)
}

// releaseListed ends the sandboxes the provider lists with the owner's
// labels that are not in done.
func (m *Manager) releaseListed(ctx context.Context, owner Owner, reason string, done map[string]bool) ([]string, error) {
	caps, err := m.capabilities(ctx)
	if err != nil {
		return nil, err
	}
	if !caps.ListByLabels {
		return nil, nil
	}
	// A tenant and session id may be another deployment's too: only this
	// deployment's sandboxes are the owner's.
	list, err := m.prov.List(ctx, providers.ListFilter{Labels: m.labelled(providers.CreateSpec{Labels: owner.Labels}).Labels})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes of %s: %w", owner, err)
	}
	var ended []string
	var errs []error
	for _, sb := range list {
		if done[sb.ID] {
			continue
		}
		name := ""
		if sb.Name != "" {
			// Its entry, if the ledger has one of this owner, closes too.
			if e, err := m.st.LedgerGet(ctx, sb.Name); err == nil && e.Owner == owner.String() && e.State != store.LedgerTerminated {
				name = e.Name
			}
		}
		if err := m.end(ctx, target{owner: owner.String(), tenant: owner.Tenant, name: name, id: sb.ID}, reason); err != nil {
			errs = append(errs, err)
			continue
		}
		ended = append(ended, sb.ID)
	}
	return ended, errors.Join(errs...)
}

// ReleaseAll terminates every live sandbox of this provider the ledger
// holds, whoever owns it: the backstop of a local stack that shuts down,
// for sandboxes no cleanup reached. It returns how many it released.
func (m *Manager) ReleaseAll(ctx context.Context, reason string) (int, error) {
	live, err := m.st.LedgerListLive(ctx, m.now().AddDate(100, 0, 0), 1000)
	if err != nil {
		return 0, fmt.Errorf("ledger: %w", err)
	}
	n := 0
	var errs []error
	for _, e := range live {
		if !m.mine(e) {
			continue
		}
		if err := m.end(ctx, target{owner: e.Owner, tenant: e.Tenant, name: e.Name, id: e.ProviderID}, reason); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// mine reports whether an entry is of this Manager's provider.
func (m *Manager) mine(e store.LedgerEntry) bool {
	return e.Provider == "" || m.name == "" || e.Provider == m.name
}
