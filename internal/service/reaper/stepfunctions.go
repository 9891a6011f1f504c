package reaper

import (
	"context"

	"github.com/sandstep/sandstep/internal/service/engine"
)

// StepFunctions lists and stops the deep-research executions in AWS.
// Executions are named by job id.
type StepFunctions struct {
	SF *engine.StepFunctions
}

// Running returns the job ids of the running executions.
func (s StepFunctions) Running(ctx context.Context) ([]string, error) { return s.SF.Running(ctx) }

// Stop stops a job's execution.
func (s StepFunctions) Stop(ctx context.Context, jobID, cause string) error {
	return s.SF.Stop(ctx, jobID, cause)
}
