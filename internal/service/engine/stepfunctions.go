// Package engine starts and stops deep-research executions on AWS Step
// Functions, the executor the API and reaper Lambdas wire. On one machine the
// same definition runs on the local executor (internal/emulation/localexec);
// the API sees one Executor interface.
package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/aws-sdk-go-v2/service/sfn/types"
)

// StepFunctions starts executions of the deployed state machine.
type StepFunctions struct {
	Client          *sfn.Client
	StateMachineARN string
}

// Start starts the execution named jobID. Execution names are unique per
// state machine for 90 days, which makes a retried start idempotent: an
// existing execution's ARN is returned.
func (s *StepFunctions) Start(ctx context.Context, jobID string, input []byte) (string, error) {
	out, err := s.Client.StartExecution(ctx, &sfn.StartExecutionInput{
		StateMachineArn: aws.String(s.StateMachineARN),
		Name:            aws.String(jobID),
		Input:           aws.String(string(input)),
	})
	var exists *types.ExecutionAlreadyExists
	if errors.As(err, &exists) {
		return s.executionARN(jobID), nil
	}
	if err != nil {
		return "", fmt.Errorf("start execution %s: %w", jobID, err)
	}
	return aws.ToString(out.ExecutionArn), nil
}

// Cancel leaves the stopping to the phases: each one watches its job and
// fails with JobCancelled within seconds of a cancel, which takes the Catch
// path into Cleanup. A Lambda cannot wait out a grace period, so the
// StopExecution fallback for a job that did not stop is Stop, called by the
// scheduled reaper for jobs cancelled longer than the grace period ago; the
// status-change rule then runs Cleanup.
func (s *StepFunctions) Cancel(ctx context.Context, jobID, executionARN string) error {
	return nil
}

// Stop ends the execution now.
func (s *StepFunctions) Stop(ctx context.Context, jobID, cause string) error {
	_, err := s.Client.StopExecution(ctx, &sfn.StopExecutionInput{
		ExecutionArn: aws.String(s.executionARN(jobID)),
		Error:        aws.String("JobCancelled"),
		Cause:        aws.String(cause),
	})
	var missing *types.ExecutionDoesNotExist
	if errors.As(err, &missing) {
		return nil
	}
	return err
}

// executionARN derives an execution's ARN from the state machine's:
// arn:aws:states:R:A:stateMachine:N -> arn:aws:states:R:A:execution:N:<name>.
func (s *StepFunctions) executionARN(name string) string {
	return strings.Replace(s.StateMachineARN, ":stateMachine:", ":execution:", 1) + ":" + name
}
