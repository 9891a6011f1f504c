package sandboxes

import (
	"context"
	"errors"
	"fmt"

	"github.com/sandstep/sandstep/internal/service/store"
)

// Where a sandbox's usage is counted is decided by its ledger entry, so
// that each sandbox counts once: a research job's own sandboxes (owner
// kind job) and the sandboxes of an agent run (entries naming the run in
// Job) in the job's usage records, which its cleanup writes from the
// ledger (Usage, TreeUsage); every other sandbox (sessions', direct
// sandboxes') in a usage record of its own when its entry closes
// (recordUsage), which GET /v1/usage reads by tenant.

// recordUsage keeps the usage of a closed ledger entry no job accounts
// for (a session's, a tenant's or a sandbox's direct sandbox): its time,
// its bytes out where measured, its execs, where GET /v1/usage reads it by
// tenant and time. Every close calls it, and so does a release that finds
// the entry closed already: the record is keyed by the entry, so a retried
// release or a reaper pass writes the same record again, never a second
// one, and a write that failed the first time is made good by the next. A
// failure is logged: the sandbox is gone either way.
func (m *Manager) recordUsage(ctx context.Context, e store.LedgerEntry) {
	kind := ParseOwner(e.Owner).Kind
	if kind == KindJob || e.Job != "" || e.State != store.LedgerTerminated || e.RunningAt.IsZero() || e.TerminatedAt.IsZero() || e.Tenant == "" {
		return
	}
	u := store.SandboxUsage{Name: e.Name, OwnerKind: kind, Tenant: e.Tenant, Provider: e.Provider, MemoryMB: e.MemoryMB,
		RunningAt: e.RunningAt, TerminatedAt: e.TerminatedAt, BytesOut: e.BytesOut, Execs: e.Execs}
	if err := m.st.PutSandboxUsage(context.WithoutCancel(ctx), u); err != nil {
		m.log.Warn("record a sandbox's usage", "name", e.Name, "owner", e.Owner, "tenant", e.Tenant, "err", err)
	}
}

// CountExec counts one command run in the sandbox name, for its usage. A
// sandbox that closed meanwhile is left as it is.
func (m *Manager) CountExec(ctx context.Context, name string) error {
	return m.st.LedgerAddExec(ctx, name)
}

// TreeUsage is what the sandbox name and, recursively, the sandboxes it
// owns (its children, theirs...) used, counting only entries that name job
// (store.EntryUsage; live ones to now): the usage of an agent run's
// sandboxes. Each entry is read strongly consistent, so a release just
// made is seen with its final time and bytes out. A name the ledger does
// not know counts nothing.
func (m *Manager) TreeUsage(ctx context.Context, name, job string) (store.Usage, error) {
	var u store.Usage
	return u, m.treeUsage(ctx, name, job, &u, 0)
}

func (m *Manager) treeUsage(ctx context.Context, name, job string, u *store.Usage, depth int) error {
	e, err := m.st.LedgerGet(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if e.Job == job {
		u.Add(store.EntryUsage(e, m.now()))
	}
	if depth >= maxTreeDepth {
		return fmt.Errorf("usage of %s: the tree is deeper than %d", name, maxTreeDepth)
	}
	children, err := m.st.LedgerListByOwner(ctx, SandboxOwner(name, e.Tenant).String())
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	for _, c := range children {
		if err := m.treeUsage(ctx, c.Name, job, u, depth+1); err != nil {
			return err
		}
	}
	return nil
}
