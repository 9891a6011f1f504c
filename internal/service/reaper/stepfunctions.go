package reaper

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sandstep/sandstep/internal/service/engine"
)

// StepFunctions lists and stops the deep-research executions in AWS.
// Executions are named by job id.
type StepFunctions struct {
	SF *engine.StepFunctions
}

// Running pages through the state machine's running executions.
func (s StepFunctions) Running(ctx context.Context) ([]string, error) {
	var ids []string
	var token *string
	for {
		out, err := s.SF.Client.ListExecutions(ctx, &sfn.ListExecutionsInput{
			StateMachineArn: aws.String(s.SF.StateMachineARN),
			StatusFilter:    types.ExecutionStatusRunning,
			NextToken:       token,
		})
		if err != nil {
			return nil, fmt.Errorf("list executions: %w", err)
		}
		for _, x := range out.Executions {
			ids = append(ids, aws.ToString(x.Name))
		}
		if out.NextToken == nil {
			return ids, nil
		}
		token = out.NextToken
	}
}

// Stop stops a job's execution.
func (s StepFunctions) Stop(ctx context.Context, jobID, cause string) error {
	return s.SF.Stop(ctx, jobID, cause)
}
