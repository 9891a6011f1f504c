package research

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sandstep/sandstep/internal/service/sandboxes"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/providers"
)

// jobOwner is the owner of a job's sandboxes.
func jobOwner(job store.Job) sandboxes.Owner { return sandboxes.JobOwner(job.ID, job.Tenant) }

// ensureSandbox returns the job's sandbox, creating it only if the ledger
// knows of no live one: a retried call adopts the sandbox an earlier
// attempt created.
func (r *run) ensureSandbox(spec providers.CreateSpec) (providers.Sandbox, error) {
	lease, err := r.p.Sandboxes.Acquire(r.ctx, sandboxes.Request{Owner: jobOwner(r.job), Spec: spec})
	if errors.Is(err, sandboxes.ErrReleased) {
		// The job was cleaned up while the sandbox was being created.
		return providers.Sandbox{}, &JobCancelled{JobID: r.job.ID}
	}
	if err != nil {
		return providers.Sandbox{}, err
	}
	if lease.Adopted {
		r.log.Info("reusing sandbox", "sandbox_id", lease.Sandbox.ID)
	} else {
		r.log.Info("sandbox created", "sandbox_id", lease.Sandbox.ID)
	}
	return lease.Sandbox, nil
}

// warmup runs `true` until the sandbox answers: "created" is not "ready" on
// every backend. Attempts back off exponentially with full jitter.
func (r *run) warmup(id string) error {
	attempts, backoff := r.p.WarmupAttempts, r.p.WarmupBackoff
	if attempts <= 0 {
		attempts = 5
	}
	if backoff <= 0 {
		backoff = 500 * time.Millisecond
	}
	var last error
	for i := 0; i < attempts; i++ {
		if i > 0 {
			d := time.Duration(rand.Int64N(int64(backoff)<<(i-1)) + 1)
			select {
			case <-r.ctx.Done():
				return r.ctx.Err()
			case <-time.After(d):
			}
		}
		res, err := r.exec(id, providers.ExecRequest{Argv: []string{"true"}, Timeout: 30 * time.Second})
		if err == nil && res.ExitCode == 0 {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("exec true exited %d", res.ExitCode)
		} else if c := providers.CodeOf(err); c == providers.NotFound || c == providers.PermissionDenied || c == providers.InvalidArgument {
			return err
		}
		last = err
		r.log.Warn("sandbox warmup", "sandbox_id", id, "attempt", i+1, "err", err)
		if cerr := r.checkCancel(); cerr != nil {
			return cerr
		}
	}
	return fmt.Errorf("sandbox did not answer after %d attempts: %w", attempts, last)
}

// terminateJobSandboxes terminates every live sandbox the ledger holds for
// the job and closes its entries. It is idempotent: terminating a gone
// sandbox succeeds.
func (p *Phases) terminateJobSandboxes(ctx context.Context, job store.Job, reason string) (int, error) {
	ended, err := p.Sandboxes.ReleaseOwner(ctx, jobOwner(job), reason)
	return len(ended), err
}
