package research

import (
	"fmt"
	"time"

	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/service/usage"
)

// FallbackBudgetExhausted: the job reached its budget ("budget" in the
// request) and stopped spending: the crawl kept what it had, the report was
// written without a model.
const FallbackBudgetExhausted = "budget_exhausted"

// spent is what the job has used so far: the records of the other
// invocations (this one's own record, from an earlier delivery of it, is
// left out: its spending is counted again as it happens), this
// invocation's, and its sandboxes' time to now.
func (r *run) spent() (store.Usage, error) {
	recs, err := r.p.Store.JobUsageRecords(r.ctx, r.job.ID)
	if err != nil {
		return store.Usage{}, err
	}
	var u store.Usage
	for k, rec := range recs {
		if k != r.usageKey && k != "sandboxes" {
			u.Add(rec)
		}
	}
	u.Add(r.use.snapshot())
	if r.p.Sandboxes != nil {
		sb, err := r.p.Sandboxes.Usage(r.ctx, jobOwner(r.job))
		if err != nil {
			return store.Usage{}, err
		}
		u.Add(sb)
	}
	return u, nil
}

// overBudget says which of the job's budget limits spending extra more
// would reach ("" when none, or when the job has no budget).
func (r *run) overBudget(extra store.Usage) (string, error) {
	b := r.req.Budget
	if b == nil {
		return "", nil
	}
	u, err := r.spent()
	if err != nil {
		return "", fmt.Errorf("budget: %w", err)
	}
	u.Add(extra)
	switch {
	case b.MaxTokens > 0 && u.TotalTokens() >= b.MaxTokens:
		return fmt.Sprintf("max_tokens %d (used %d)", b.MaxTokens, u.TotalTokens()), nil
	case b.MaxSandboxSeconds > 0 && u.TotalSandboxSeconds() >= float64(b.MaxSandboxSeconds):
		return fmt.Sprintf("max_sandbox_seconds %d (used %.0f)", b.MaxSandboxSeconds, u.TotalSandboxSeconds()), nil
	case b.MaxCost > 0:
		c := usage.Price(r.p.Config.Pricing, u)
		if c.Total >= b.MaxCost {
			return fmt.Sprintf("max_cost %s %g (spent %.4f)", c.Currency, b.MaxCost, c.Total), nil
		}
	}
	return "", nil
}

// budgetCheck is how often a running crawl compares its spending with the
// budget.
const budgetCheck = 5 * time.Second
