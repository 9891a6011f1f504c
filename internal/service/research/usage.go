package research

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/sandstep/sandstep/internal/service/report"
	"github.com/sandstep/sandstep/internal/service/search"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/service/usage"
	"github.com/sandstep/sandstep/providers"
)

// usageMeter counts what one phase invocation uses. It is written as the
// invocation's usage record when the phase ends (see run.end), under a key
// the invocation keeps when it is delivered again, so a replay replaces its
// record instead of adding to the job's usage.
type usageMeter struct {
	mu sync.Mutex
	u  store.Usage
}

func (m *usageMeter) add(u store.Usage) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.u.Add(u)
}

func (m *usageMeter) snapshot() store.Usage {
	m.mu.Lock()
	defer m.mu.Unlock()
	var u store.Usage
	u.Add(m.u)
	return u
}

// tokens is the report.Meter of the phase's model calls.
func (m *usageMeter) tokens(model string, input, output int64, estimated bool) {
	m.add(store.Usage{Tokens: map[string]store.TokenCount{model: {Input: input, Output: output, Estimated: estimated}}})
}

// exec runs a command in a sandbox, counted.
func (r *run) exec(id string, req providers.ExecRequest) (providers.ExecResult, error) {
	r.use.add(store.Usage{Execs: 1})
	return r.p.Provider.Exec(r.ctx, id, req)
}

// meteredBackend counts a search backend's calls.
type meteredBackend struct {
	search.Backend
	m *usageMeter
}

func (b meteredBackend) Search(ctx context.Context, query string, limit int) ([]search.Result, error) {
	b.m.add(store.Usage{SearchCalls: map[string]int64{b.Name(): 1}})
	return b.Backend.Search(ctx, query, limit)
}

// searchBackends are the configured backends, counted for this run.
func (r *run) searchBackends() []search.Backend {
	out := make([]search.Backend, len(r.p.Search))
	for i, b := range r.p.Search {
		out[i] = meteredBackend{Backend: b, m: r.use}
	}
	return out
}

// withMeter makes the run's model calls count against it.
func (r *run) withMeter(ctx context.Context) context.Context {
	return report.WithMeter(ctx, r.use.tokens)
}

// recordUsage writes the invocation's usage record, when it used anything.
func (r *run) recordUsage() error {
	u := r.use.snapshot()
	if u.IsZero() {
		return nil
	}
	// Not the phase's context, which may be cancelled: what was spent
	// counts either way.
	if err := r.p.Store.PutUsage(context.WithoutCancel(r.ctx), r.job.ID, r.usageKey, u); err != nil {
		return err
	}
	return nil
}

// closeUsage records the sandbox time of the job's sandboxes, from the
// ledger, and keeps the job's total on its record. Cleanup calls it once
// the sandboxes are released, so their time is final.
func (p *Phases) closeUsage(ctx context.Context, job store.Job) (store.Usage, error) {
	sb, err := p.Sandboxes.Usage(ctx, jobOwner(job))
	if err != nil {
		return store.Usage{}, fmt.Errorf("sandbox usage: %w", err)
	}
	if !sb.IsZero() {
		if err := p.Store.PutUsage(ctx, job.ID, "sandboxes", sb); err != nil {
			return store.Usage{}, err
		}
	}
	total, err := p.Store.JobUsage(ctx, job.ID)
	if err != nil {
		return store.Usage{}, err
	}
	if err := p.Store.SetJobUsage(ctx, job.ID, total); err != nil {
		return store.Usage{}, err
	}
	// Counted once per job against the tenant's daily and monthly budget
	// ([quotas] max_cost_per_day, max_cost_per_month).
	c := usage.Price(p.Config.Pricing, total)
	if err := p.Store.AddTenantSpend(ctx, job.ID, job.Tenant, int64(math.Round(c.Total*1e6)), time.Now()); err != nil {
		return store.Usage{}, err
	}
	return total, nil
}

// costFooter is the report's last line: what the job used and cost up to
// its report (its sandbox still runs until Cleanup, whose time GET
// /v1/jobs/{id} adds).
func (r *run) costFooter() (string, error) {
	// As the budget counts it: a report phase run again is not counted
	// twice in its own footer.
	u, err := r.spent()
	if err != nil {
		return "", err
	}
	return "\n\n---\n\n_" + usage.Line(u, usage.Price(r.p.Config.Pricing, u)) + " (Up to this report; GET /v1/jobs/{id} has the final usage.)_\n", nil
}
