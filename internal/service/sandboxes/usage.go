package sandboxes

import (
	"context"

	"github.com/sandstep/sandstep/internal/service/store"
)

// recordUsage keeps the sandbox time of a closed ledger entry whose owner
// is not a job (a session, a tenant's or a sandbox's direct sandbox), where
// GET /v1/usage reads it by tenant and time. A job's sandboxes are counted
// by the job's Cleanup (Usage), so they are left out here. Every close
// calls it, and so does a release that finds the entry closed already: the
// record is keyed by the entry, so a retried release or a reaper pass
// writes the same record again, never a second one, and a write that
// failed the first time is made good by the next. A failure is logged:
// the sandbox is gone either way.
func (m *Manager) recordUsage(ctx context.Context, e store.LedgerEntry) {
	kind := ParseOwner(e.Owner).Kind
	if kind == KindJob || e.State != store.LedgerTerminated || e.RunningAt.IsZero() || e.TerminatedAt.IsZero() || e.Tenant == "" {
		return
	}
	u := store.SandboxUsage{Name: e.Name, OwnerKind: kind, Tenant: e.Tenant, Provider: e.Provider, MemoryMB: e.MemoryMB,
		RunningAt: e.RunningAt, TerminatedAt: e.TerminatedAt}
	if err := m.st.PutSandboxUsage(context.WithoutCancel(ctx), u); err != nil {
		m.log.Warn("record a sandbox's usage", "name", e.Name, "owner", e.Owner, "tenant", e.Tenant, "err", err)
	}
}
