package reaper

import (
	"context"

	"github.com/sandstep/sandstep/internal/service/engine"
)

// StepFunctions lists and stops the executions in AWS: deep research's
// (SF) and, when set, agent runs' (Agents). Executions are named by job
// id, and a job id is one job's, of one type.
type StepFunctions struct {
	SF     *engine.StepFunctions
	Agents *engine.StepFunctions
}

// Running returns the job ids of the running executions.
func (s StepFunctions) Running(ctx context.Context) ([]string, error) {
	ids, err := s.SF.Running(ctx)
	if err != nil || s.Agents == nil {
		return ids, err
	}
	more, err := s.Agents.Running(ctx)
	return append(ids, more...), err
}

// Stop stops a job's execution, on whichever machine runs it: stopping a
// name a machine does not have is no error.
func (s StepFunctions) Stop(ctx context.Context, jobID, cause string) error {
	if err := s.SF.Stop(ctx, jobID, cause); err != nil || s.Agents == nil {
		return err
	}
	return s.Agents.Stop(ctx, jobID, cause)
}
