package store

import (
	"fmt"
	"time"
)

// The tenant quotas, as config ([quotas]) and LimitError name them.
const (
	QuotaConcurrentSandboxes     = "concurrent_sandboxes"
	QuotaSandboxCreationsPerHour = "sandbox_creations_per_hour"
	QuotaMaxSandboxTTL           = "max_sandbox_ttl"
	QuotaConcurrentJobs          = "concurrent_jobs"
	QuotaJobsPerHour             = "jobs_per_hour"
	QuotaMaxCostPerDay           = "max_cost_per_day"
	QuotaMaxCostPerMonth         = "max_cost_per_month"
)

// LimitError is a limit that refused work: a tenant quota (concurrent
// sandboxes, creations per hour, jobs), a per-parent child limit, a budget.
// Whoever enforces a limit atomically in a table returns it; the API answers
// it as 429 naming the limit, its maximum and when to retry.
type LimitError struct {
	// Limit names the limit as config and docs call it, for example
	// "concurrent_sandboxes" or "children_per_hour".
	Limit string
	// Max is the limit's value.
	Max int64
	// Scope says whose limit it is: "tenant", "parent", "job".
	Scope string
	// RetryAfter is when the limit may let the same work through again
	// (a slot frees, a window rolls over); zero when only a release can.
	RetryAfter time.Duration
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s limit %s (%d) reached", e.Scope, e.Limit, e.Max)
}
