// Package quota enforces the tenant quotas of [quotas]: the sandbox owner
// (package sandboxes) asks it before every create, the API before every job
// submission, and the reaper has it give back slots a crash lost. Every
// decision is one conditional write in the store (store.AcquireSlot,
// store.CountInWindow): there is no read-then-write that two Lambdas could
// both pass.
package quota

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/store"
)

// Enforcer applies a config's quotas. A nil *Enforcer allows everything.
type Enforcer struct {
	st  *store.Store
	cfg *config.QuotasConfig
}

// New returns an Enforcer; with a nil config it allows everything.
func New(st *store.Store, cfg *config.QuotasConfig) *Enforcer {
	if st == nil || cfg == nil {
		return nil
	}
	return &Enforcer{st: st, cfg: cfg}
}

func (e *Enforcer) limits(tenant string) config.QuotaLimits {
	if e == nil || tenant == "" {
		return config.QuotaLimits{}
	}
	return e.cfg.For(tenant)
}

// AdmitSandbox is asked before a sandbox named name is created for tenant
// with the given lifetime: the lifetime within max_sandbox_ttl, a slot of
// concurrent_sandboxes (held under the name until ReleaseSandbox) and one
// creation of sandbox_creations_per_hour. Refusals are *store.LimitError;
// a refused creation gives back the slot this call took.
func (e *Enforcer) AdmitSandbox(ctx context.Context, tenant, name string, lifetime time.Duration, create bool) error {
	l := e.limits(tenant)
	if ttl := l.MaxSandboxTTL.D(); ttl > 0 && lifetime > ttl {
		return &store.LimitError{Limit: store.QuotaMaxSandboxTTL, Max: int64(ttl / time.Second), Scope: "tenant"}
	}
	taken := false
	if l.ConcurrentSandboxes > 0 {
		var err error
		if taken, err = e.st.TakeSlot(ctx, tenant, store.QuotaConcurrentSandboxes, int64(l.ConcurrentSandboxes), name); err != nil {
			return err
		}
	}
	if create && l.SandboxCreationsPerHour > 0 {
		if err := e.st.CountInWindow(ctx, tenant, store.QuotaSandboxCreationsPerHour, int64(l.SandboxCreationsPerHour), time.Hour); err != nil {
			if taken {
				err = errors.Join(err, e.ReleaseSandbox(context.WithoutCancel(ctx), tenant, name))
			}
			return err
		}
	}
	return nil
}

// ReleaseSandbox gives back the concurrent_sandboxes slot of the sandbox
// named name, once its ledger entry is closed. Releasing twice is harmless.
func (e *Enforcer) ReleaseSandbox(ctx context.Context, tenant, name string) error {
	if e == nil || tenant == "" {
		return nil
	}
	// Released whatever the limit is now: a slot taken under an older
	// config must not stay taken.
	return e.st.ReleaseSlot(ctx, tenant, store.QuotaConcurrentSandboxes, name)
}

// AdmitJob is asked before a new job (its key) is created: one of
// jobs_per_hour when counted is set, and a slot of concurrent_jobs, which
// the store gives back when the job ends (store.UpdateJob). Refusals are
// *store.LimitError.
func (e *Enforcer) AdmitJob(ctx context.Context, tenant, key string, counted bool) error {
	l := e.limits(tenant)
	if counted && (l.MaxCostPerDay > 0 || l.MaxCostPerMonth > 0) {
		if err := e.checkSpend(ctx, tenant, l); err != nil {
			return err
		}
	}
	// The slot first: a submission refused for want of one must not use
	// up one of the hour's jobs, which cannot be given back.
	taken := false
	if l.ConcurrentJobs > 0 {
		var err error
		if taken, err = e.st.TakeSlot(ctx, tenant, store.QuotaConcurrentJobs, int64(l.ConcurrentJobs), key); err != nil {
			return err
		}
	}
	if counted && l.JobsPerHour > 0 {
		if err := e.st.CountInWindow(ctx, tenant, store.QuotaJobsPerHour, int64(l.JobsPerHour), time.Hour); err != nil {
			if taken {
				err = errors.Join(err, e.ReleaseJob(context.WithoutCancel(ctx), tenant, key))
			}
			return err
		}
	}
	return nil
}

// checkSpend refuses a new job of a tenant whose ended jobs cost its daily
// or monthly budget. It is a read, not a conditional write: what a job
// costs is known only once it ended, so jobs running when the budget is
// reached finish (each within its own "budget", if it has one), and the
// tenant's next job is refused. The refusal is a 429 like every limit's,
// its Retry-After the end of the UTC day or month: waiting is what helps.
func (e *Enforcer) checkSpend(ctx context.Context, tenant string, l config.QuotaLimits) error {
	now := time.Now().UTC()
	day, month, err := e.st.TenantSpend(ctx, tenant, now)
	if err != nil {
		return err
	}
	if l.MaxCostPerDay > 0 && float64(day) >= l.MaxCostPerDay*1e6 {
		next := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
		return &store.LimitError{Limit: store.QuotaMaxCostPerDay, Max: int64(math.Ceil(l.MaxCostPerDay)), Scope: "tenant", RetryAfter: next.Sub(now)}
	}
	if l.MaxCostPerMonth > 0 && float64(month) >= l.MaxCostPerMonth*1e6 {
		next := time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, time.UTC)
		return &store.LimitError{Limit: store.QuotaMaxCostPerMonth, Max: int64(math.Ceil(l.MaxCostPerMonth)), Scope: "tenant", RetryAfter: next.Sub(now)}
	}
	return nil
}

// ReleaseJob gives back a job's concurrent_jobs slot before the job ends,
// for a job that will not run (its creation or start failed).
func (e *Enforcer) ReleaseJob(ctx context.Context, tenant, key string) error {
	if e == nil || tenant == "" {
		return nil
	}
	return e.st.ReleaseSlot(ctx, tenant, store.QuotaConcurrentJobs, key)
}

// NeverStartedAfter is how long a queued job without an execution keeps
// its slot before Reconcile takes it for abandoned.
const NeverStartedAfter = 10 * time.Minute

// Reconciled counts the slots Reconcile gave back.
type Reconciled struct {
	Jobs      int `json:"job_slots_released"`
	Sandboxes int `json:"sandbox_slots_released"`
}

// Reconcile gives back the slots whose holder is gone: a job that ended,
// does not exist, or never started (NeverStartedAfter), a sandbox whose ledger entry is closed or does not
// exist. Only holders older than grace are looked at, so that a slot taken
// just before its job or ledger entry is written is not taken for lost. It
// works with or without an Enforcer (the slots of a quota since turned off
// go back too). sandboxGone answers for a sandbox's name from the ledger,
// which only the sandbox owner reads (sandboxes.Manager.Closed).
func Reconcile(ctx context.Context, st *store.Store, grace time.Duration, now time.Time, sandboxGone func(ctx context.Context, name string) (bool, error)) (Reconciled, error) {
	var out Reconciled
	tenants, err := st.QuotaTenants(ctx)
	if err != nil {
		return out, err
	}
	var errs []error
	for _, t := range tenants {
		n, err := reconcile(ctx, st, t, store.QuotaConcurrentJobs, grace, now, func(key string) (bool, error) {
			job, err := st.GetJob(ctx, key)
			if errors.Is(err, store.ErrNotFound) {
				return true, nil
			}
			// A job whose execution never started (the API died between
			// the record and the start) runs nothing: resubmitting it
			// takes a slot again.
			neverStarted := job.Status == store.StatusQueued && job.ExecutionID == "" && now.Sub(job.CreatedAt) > NeverStartedAfter
			return err == nil && (job.Status.Terminal() || neverStarted), err
		})
		out.Jobs += n
		errs = append(errs, err)
		n, err = reconcile(ctx, st, t, store.QuotaConcurrentSandboxes, grace, now, func(name string) (bool, error) {
			return sandboxGone(ctx, name)
		})
		out.Sandboxes += n
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}

func reconcile(ctx context.Context, st *store.Store, tenant, limit string, grace time.Duration, now time.Time, gone func(string) (bool, error)) (int, error) {
	holders, err := st.SlotHolders(ctx, tenant, limit)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for h, since := range holders {
		if now.Sub(since) < grace {
			continue
		}
		g, err := gone(h)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s slot %s of %s: %w", limit, h, tenant, err))
			continue
		}
		if !g {
			continue
		}
		if err := st.ReleaseSlot(ctx, tenant, limit, h); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
