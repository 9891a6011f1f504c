package research

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sandstep/sandstep/internal/service/engine"
	"github.com/sandstep/sandstep/internal/service/store"
)

// CleanupInput is either the state machine's input to Cleanup or the
// EventBridge "Step Functions Execution Status Change" event, which invokes
// Cleanup for executions that ended where no Catch runs (aborted, timed out).
type CleanupInput struct {
	JobID   string             `json:"job_id"`
	Outcome string             `json:"outcome"`
	Error   *engine.StateError `json:"error,omitempty"`

	DetailType string               `json:"detail-type,omitempty"`
	Detail     *engine.StatusChange `json:"detail,omitempty"`
}

// CleanupOutput is the job's final status.
type CleanupOutput struct {
	Status     string `json:"status"`
	Terminated int    `json:"terminated"`
}

// Cleanup keeps the artifacts the job's sandboxes hold (keepArtifacts),
// terminates the sandboxes and closes the job. It runs on
// success, from every Catch, and again from the status-change rule and the
// reaper, so it is idempotent: a second call terminates nothing new and
// keeps the status the first one set.
func (p *Phases) Cleanup(ctx context.Context, in CleanupInput) (CleanupOutput, error) {
	jobID := in.JobID
	if jobID == "" && in.Detail != nil {
		jobID = in.Detail.Name
	}
	if jobID == "" {
		return CleanupOutput{}, &BadInput{Message: "cleanup needs job_id or an execution status change event"}
	}
	job, err := p.Store.GetJob(ctx, jobID)
	if errors.Is(err, store.ErrNotFound) {
		return CleanupOutput{}, &BadInput{Message: "job " + jobID + " does not exist"}
	}
	if err != nil {
		return CleanupOutput{}, fmt.Errorf("cleanup: load job: %w", err)
	}
	log := p.logger().With("job_key", jobID, "tenant", job.Tenant, "job_id", job.ClientID, "phase", "cleanup")
	if !job.Status.Terminal() {
		if _, err := p.Store.SetStep(ctx, jobID, store.Step{ID: store.StepCleanup, State: store.StepRunning}); err != nil && !errors.Is(err, store.ErrConflict) {
			return CleanupOutput{}, fmt.Errorf("cleanup: %w", err)
		}
	}
	if !job.Status.Terminal() {
		// What an unfinished job found is kept while its sandbox lives.
		if status, msg := finalStatus(job, in); status != store.StatusSucceeded {
			p.salvage(ctx, job, status, msg, log)
		}
	}
	if !job.Status.Terminal() {
		// The files the job marked as artifacts go with its results
		// before its sandboxes end.
		p.keepArtifacts(ctx, job, log)
	}
	// Sandboxes next: whatever happens to the record, nothing keeps running.
	reason := "completed"
	if job.CancelRequested {
		reason = "cancelled"
	}
	n, err := p.terminateJobSandboxes(ctx, job, reason)
	if err != nil {
		return CleanupOutput{}, fmt.Errorf("cleanup: %w", err)
	}
	// The sandboxes' time is final now; the total goes on the record
	// before the job ends, so a listing of ended jobs has it.
	if _, err := p.closeUsage(ctx, job); err != nil {
		return CleanupOutput{}, fmt.Errorf("cleanup: usage: %w", err)
	}
	if job.Status.Terminal() {
		return CleanupOutput{Status: string(job.Status), Terminated: n}, nil
	}
	status, msg := finalStatus(job, in)
	// The store allows each final status only from the statuses that may
	// legally precede it.
	upd := store.JobUpdate{Status: status}
	if msg != "" {
		upd.Error = &msg
	}
	// Steps left running ended with the failure.
	if status != store.StatusSucceeded {
		for _, s := range job.Steps {
			if s.State == store.StepRunning && s.ID != store.StepCleanup {
				if _, err := p.Store.SetStep(ctx, jobID, store.Step{ID: s.ID, State: store.StepError, Current: s.Current, Total: s.Total}); err != nil && !errors.Is(err, store.ErrConflict) {
					return CleanupOutput{}, fmt.Errorf("cleanup: %w", err)
				}
			}
		}
	}
	if _, err := p.Store.SetStep(ctx, jobID, store.Step{ID: store.StepCleanup, State: store.StepComplete}); err != nil && !errors.Is(err, store.ErrConflict) {
		return CleanupOutput{}, fmt.Errorf("cleanup: %w", err)
	}
	data, _ := json.Marshal(EventData{Stage: "job", Status: string(status), Message: finishMessage(status, msg)})
	if _, err := p.Store.AppendEvents(ctx, jobID, []store.Event{{Key: "job:finished", Type: "job", Data: data}}); err != nil {
		return CleanupOutput{}, fmt.Errorf("cleanup: %w", err)
	}
	job, err = p.Store.UpdateJob(ctx, jobID, upd)
	if errors.Is(err, store.ErrConflict) && job.Status.Terminal() {
		// Another cleanup got there first.
		return CleanupOutput{Status: string(job.Status), Terminated: n}, nil
	}
	if err != nil {
		return CleanupOutput{}, fmt.Errorf("cleanup: close job: %w", err)
	}
	log.Info("job finished", "status", status, "terminated", n)
	return CleanupOutput{Status: string(status), Terminated: n}, nil
}

// finalStatus decides how the job ended from the cleanup input.
func finalStatus(job store.Job, in CleanupInput) (store.Status, string) {
	return engine.Ended(job.CancelRequested, in.Detail, in.Error, in.Outcome, "the job failed")
}

func finishMessage(status store.Status, msg string) string {
	if msg == "" {
		return "job " + string(status)
	}
	return "job " + string(status) + ": " + msg
}
