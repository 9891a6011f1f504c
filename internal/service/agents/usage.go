package agents

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/sandstep/sandstep/internal/service/direct"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/service/usage"
)

// An agent run's usage is recorded as a research job's is, one record per
// phase invocation under a key the invocation keeps when Lambda delivers it
// again (a replay replaces its record):
//
//	provision   agent_runs = 1
//	run:<n>     the model tokens of the result lines slice n read (slices
//	            are counted by the state machine, so a slice that read
//	            nothing still has its own key)
//	sandboxes   the run's sandbox and every child it started, from the
//	            ledger once cleanup terminated them: time by provider and
//	            size, bytes out where measured, execs
//
// The sandboxes' ledger entries name the run (direct.CreateRequest.Job),
// so they write no usage record of their own: each counts once, here.

// Keys of the usage records.
const (
	usageProvision = "provision"
	usageSandboxes = "sandboxes"
)

func usageRun(slice int) string { return "run:" + strconv.Itoa(slice) }

// putUsage writes one record, unless it is empty. What was spent counts
// even when the phase's context ends.
func (c *call) putUsage(ctx context.Context, key string, u store.Usage) error {
	if u.IsZero() {
		return nil
	}
	return c.r.o.Store.PutUsage(context.WithoutCancel(ctx), c.job.ID, key, u)
}

// closeUsage records the usage of the run's sandboxes, now terminated, and
// keeps the run's total on its record and in its tenant's spending.
func (c *call) closeUsage(ctx context.Context) error {
	if c.job.SandboxID != "" {
		sb, err := c.r.o.Direct.TreeUsage(ctx, c.caller, c.job.SandboxID)
		if err != nil && !isNotFound(err) {
			return fmt.Errorf("the sandboxes' usage: %w", err)
		}
		if err := c.putUsage(ctx, usageSandboxes, sb); err != nil {
			return err
		}
	}
	total, err := c.r.o.Store.JobUsage(ctx, c.job.ID)
	if err != nil {
		return err
	}
	if err := c.r.o.Store.SetJobUsage(ctx, c.job.ID, total); err != nil {
		return err
	}
	// Counted once per job against [quotas] max_cost_per_day and
	// max_cost_per_month, as a research job's cost is.
	cost := usage.Price(c.r.o.Pricing, total)
	return c.r.o.Store.AddTenantSpend(ctx, c.job.ID, c.job.Tenant, int64(math.Round(cost.Total*1e6)), c.r.o.Now())
}

func isNotFound(err error) bool {
	var de *direct.Error
	return errors.As(err, &de) && de.Kind == direct.KindNotFound
}

// FallbackBudgetExhausted: the run reached its budget ("budget" in the
// request): the agent was stopped, what it wrote so far is kept.
const FallbackBudgetExhausted = "budget_exhausted"

// budgetCheck is how often a run slice compares the run's sandbox time
// with its budget.
const budgetCheck = 5 * time.Second

// overBudget says which limit of the run's budget its sandboxes' time has
// reached ("" when none, or the run has no budget). The time is the
// ledger's, to now for the sandboxes still running.
func (c *call) overBudget(ctx context.Context, sandbox string) (string, error) {
	b := c.req.Budget
	if b == nil || b.MaxSandboxSeconds <= 0 {
		return "", nil
	}
	u, err := c.r.o.Direct.TreeUsage(ctx, c.caller, sandbox)
	if err != nil {
		return "", fmt.Errorf("budget: %w", err)
	}
	if s := u.TotalSandboxSeconds(); s >= float64(b.MaxSandboxSeconds) {
		return fmt.Sprintf("max_sandbox_seconds %d (used %.0f)", b.MaxSandboxSeconds, s), nil
	}
	return "", nil
}

// stopGraceSeconds is how long the agent has between SIGTERM and SIGKILL
// when its budget stops it.
const stopGraceSeconds = 3

// stopAgent ends every process of the agent's exec (each carries the
// exec's id in its environment, direct.EnvExecID): SIGTERM, then SIGKILL
// after a grace. The exec then ends as killed, and its output so far stays
// readable.
func (c *call) stopAgent(ctx context.Context, sandbox, eid string) error {
	marker := shellQuote(direct.EnvExecID + "=" + eid)
	sig := func(s string) string {
		return `for p in /proc/[0-9]*; do if tr '\0' '\n' < "$p/environ" 2>/dev/null | grep -qxF ` + marker + `; then kill -` + s + ` "${p#/proc/}" 2>/dev/null; fi; done`
	}
	res, err := c.r.o.Direct.RunToEnd(ctx, c.caller, sandbox, direct.ExecRequest{
		Command: sig("TERM") + "; sleep " + strconv.Itoa(stopGraceSeconds) + "; " + sig("KILL") + "; true",
		Timeout: time.Minute,
	})
	if err != nil {
		return fmt.Errorf("stop the agent: %w", err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("stop the agent: exit status %d: %s", res.ExitCode, tail(res.Stderr, 500))
	}
	return nil
}
