package research

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/providers"
)

// jobOwner is the ledger owner of a job's sandboxes.
func jobOwner(jobID string) string { return "job:" + jobID }

// ensureSandbox returns the job's sandbox, creating it only if the ledger
// knows of no live one. The ledger entry is written before the create, so a
// crash between the two leaves a "creating" entry the cleanup and the reaper
// resolve; a retried call finds the running entry and reuses its sandbox.
func (r *run) ensureSandbox(spec providers.CreateSpec) (providers.Sandbox, error) {
	p, ctx, job := r.p, r.ctx, r.job
	entry, err := p.Store.LedgerBegin(ctx, store.LedgerEntry{
		Name:     spec.Name,
		Provider: p.ProviderName,
		Owner:    jobOwner(job.ID),
		Tenant:   job.Tenant,
		Labels:   spec.Labels,
		Deadline: p.now().Add(spec.Lifetime + time.Minute),
	})
	if err != nil {
		return providers.Sandbox{}, fmt.Errorf("ledger: %w", err)
	}
	if entry.State == store.LedgerRunning && entry.ProviderID != "" {
		sb, err := p.Provider.Get(ctx, entry.ProviderID)
		if err == nil && sb.State == providers.StateRunning {
			r.log.Info("reusing sandbox", "sandbox_id", sb.ID)
			return sb, nil
		}
		if err != nil && !providers.IsNotFound(err) {
			return providers.Sandbox{}, fmt.Errorf("look up sandbox %s: %w", entry.ProviderID, err)
		}
		// It is gone (expired or preempted): close the entry and start over.
		if _, err := p.Store.LedgerClose(ctx, spec.Name, "gone"); err != nil {
			return providers.Sandbox{}, fmt.Errorf("ledger: %w", err)
		}
		if _, err := p.Store.LedgerBegin(ctx, store.LedgerEntry{Name: spec.Name, Provider: p.ProviderName, Owner: jobOwner(job.ID), Tenant: job.Tenant, Labels: spec.Labels, Deadline: p.now().Add(spec.Lifetime + time.Minute)}); err != nil {
			return providers.Sandbox{}, fmt.Errorf("ledger: %w", err)
		}
	}
	sb, err := p.Provider.Create(ctx, spec)
	if providers.CodeOf(err) == providers.AlreadyExists {
		// A previous attempt created it but did not live to record it.
		sb, err = findByName(ctx, p.Provider, spec.Name)
	}
	if err != nil {
		r.endLostCreate(spec.Name, err)
		if _, cerr := p.Store.LedgerClose(context.WithoutCancel(ctx), spec.Name, "create failed"); cerr != nil {
			r.log.Warn("ledger close after failed create", "err", cerr)
		}
		return providers.Sandbox{}, err
	}
	if _, err := p.Store.LedgerRunning(ctx, spec.Name, sb.ID); err != nil {
		// Closed meanwhile (the job was cleaned up): this sandbox must not
		// outlive the call.
		if terr := p.Provider.Terminate(context.WithoutCancel(ctx), sb.ID); terr != nil {
			r.log.Error("terminate orphaned sandbox", "sandbox_id", sb.ID, "err", terr)
		}
		if errors.Is(err, store.ErrConflict) {
			return providers.Sandbox{}, &JobCancelled{JobID: job.ID}
		}
		return providers.Sandbox{}, fmt.Errorf("ledger: %w", err)
	}
	r.log.Info("sandbox created", "sandbox_id", sb.ID)
	return sb, nil
}

// endLostCreate handles a create that failed in a way that does not say
// whether the sandbox was made (the plugin died during the call, the
// answer timed out): where the provider finds sandboxes by name, one that
// was made is terminated before its ledger entry closes. Elsewhere (Sandy
// has no names and no listing) it cannot be found, and it ends at the
// lifetime it was created with.
func (r *run) endLostCreate(name string, cause error) {
	switch providers.CodeOf(cause) {
	case providers.Unavailable, providers.DeadlineExceeded, providers.Internal:
	default:
		return
	}
	ctx := context.WithoutCancel(r.ctx)
	sb, err := findByName(ctx, r.p.Provider, name)
	switch {
	case err == nil:
		if terr := r.p.Provider.Terminate(ctx, sb.ID); terr != nil {
			r.log.Error("terminate the sandbox of a create whose answer was lost", "sandbox_id", sb.ID, "err", terr)
		}
	case providers.IsUnsupported(err):
		r.log.Warn("a create whose answer was lost may have made a sandbox the provider cannot find; it ends at its lifetime", "name", name, "err", cause)
	}
}

func findByName(ctx context.Context, p providers.Provider, name string) (providers.Sandbox, error) {
	list, err := p.List(ctx, providers.ListFilter{Name: name})
	if err != nil {
		return providers.Sandbox{}, err
	}
	for _, sb := range list {
		if sb.Name == name && sb.State == providers.StateRunning {
			return sb, nil
		}
	}
	return providers.Sandbox{}, providers.Errorf(providers.NotFound, "create", "sandbox %q exists but cannot be found", name)
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
		res, err := r.p.Provider.Exec(r.ctx, id, providers.ExecRequest{Argv: []string{"true"}, Timeout: 30 * time.Second})
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
func (p *Phases) terminateJobSandboxes(ctx context.Context, jobID, reason string) (int, error) {
	entries, err := p.Store.LedgerListByOwner(ctx, jobOwner(jobID))
	if err != nil {
		return 0, fmt.Errorf("ledger: %w", err)
	}
	n := 0
	var errs []error
	for _, e := range entries {
		if e.State == store.LedgerTerminated {
			continue
		}
		id := e.ProviderID
		if id == "" {
			// Recorded before a create whose answer was lost: ask the
			// provider by name.
			sb, err := findByName(ctx, p.Provider, e.Name)
			if err == nil {
				id = sb.ID
			} else if !providers.IsNotFound(err) && !providers.IsUnsupported(err) {
				errs = append(errs, err)
				continue
			}
		}
		if id != "" {
			// What the sandbox sent and received, read while it lives.
			if sb, err := p.Provider.Get(ctx, id); err == nil {
				p.logger().Info("sandbox network usage", "job_id", jobID, "sandbox_id", id, "network", sb.Network)
			}
			if err := p.Provider.Terminate(ctx, id); err != nil {
				errs = append(errs, fmt.Errorf("terminate %s: %w", id, err))
				continue
			}
			n++
		}
		if _, err := p.Store.LedgerClose(ctx, e.Name, reason); err != nil {
			errs = append(errs, fmt.Errorf("ledger close %s: %w", e.Name, err))
		}
	}
	return n, errors.Join(errs...)
}
