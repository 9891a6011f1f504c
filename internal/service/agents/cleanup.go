package agents

import (
	"context"
	"errors"
	"fmt"

	"github.com/sandstep/sandstep/internal/service/direct"
	"github.com/sandstep/sandstep/internal/service/engine"
	"github.com/sandstep/sandstep/internal/service/store"
)

// cleanup ends the run: for a run that did not finish, what it left (its
// artifacts, its output so far) is kept first; then the sandbox and every
// child it started are terminated, and the job closes. It runs on every
// path and again from the status-change rule, so it is idempotent.
func (c *call) cleanup(ctx context.Context, in Input) (Output, error) {
	job := c.job
	if job.Status.Terminal() {
		return Output{Status: string(job.Status), Done: true}, nil
	}
	status, msg := finalStatus(job, in)
	if job.SandboxID != "" {
		if status != store.StatusSucceeded {
			if _, err := c.r.o.Store.GetReport(ctx, job.ID); errors.Is(err, store.ErrNotFound) {
				eid, _ := c.startedExec(ctx, job.SandboxID)
				if _, err := c.gather(ctx, job.SandboxID, eid, false); err != nil {
					// The sandbox may be gone; nothing more to keep then.
					c.log.Warn("keeping what an unfinished run left", "err", err)
				}
			}
		}
		reason := "agent run " + string(status)
		n, err := c.r.o.Direct.TerminateTree(ctx, c.caller, job.SandboxID, reason)
		var de *direct.Error
		if err != nil && !(errors.As(err, &de) && de.Kind == direct.KindNotFound) {
			return Output{}, fmt.Errorf("terminate the agent's sandbox: %w", err)
		}
		if err := c.event(ctx, "sandbox.terminated", "sandbox.terminated", map[string]any{
			"sandbox_id": job.SandboxID, "terminated": n, "message": fmt.Sprintf("sandbox %s terminated with its children (%d closed)", job.SandboxID, n),
		}); err != nil {
			return Output{}, err
		}
	}
	// The sandboxes are closed: their time and bytes out are final.
	if err := c.closeUsage(ctx); err != nil {
		return Output{}, fmt.Errorf("the run's usage: %w", err)
	}
	m := "job " + string(status)
	if msg != "" {
		m += ": " + msg
	}
	if err := c.event(ctx, "job:finished", "job."+string(status), map[string]any{"status": string(status), "message": m}); err != nil {
		return Output{}, err
	}
	upd := store.JobUpdate{Status: status}
	if msg != "" {
		upd.Error = &msg
	}
	job, err := c.r.o.Store.UpdateJob(ctx, job.ID, upd)
	if errors.Is(err, store.ErrConflict) && job.Status.Terminal() {
		return Output{Status: string(job.Status), Done: true}, nil
	}
	if err != nil {
		return Output{}, fmt.Errorf("close the job: %w", err)
	}
	c.log.Info("agent run finished", "status", status)
	return Output{Status: string(status), Done: true}, nil
}

// finalStatus decides how the run ended from the cleanup's input.
func finalStatus(job store.Job, in Input) (store.Status, string) {
	return engine.Ended(job.CancelRequested, in.Detail, in.Error, in.Outcome, "the run failed")
}
