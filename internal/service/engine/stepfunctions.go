// Package engine starts and stops deep-research executions on AWS Step
// Functions, the executor the API and reaper Lambdas wire. On one machine the
// same definition runs on the local executor (internal/emulation/localexec);
// the API sees one Executor interface.
package engine

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/sandstep/sandstep/internal/service/awsenv"
)

// StepFunctions starts, lists and stops executions of the deployed state
// machine. It speaks Step Functions' JSON protocol through awsenv.Client:
// four calls do not justify the SDK's service client, which costs every
// Lambda that links it a quarter of a megabyte.
type StepFunctions struct {
	Client          *awsenv.Client
	StateMachineARN string
}

// NewStepFunctions returns the executor of the state machine arn, with
// the region, credentials and endpoint (AWS_ENDPOINT_URL_SFN) of env.
func NewStepFunctions(env awsenv.Env, arn string) *StepFunctions {
	return &StepFunctions{Client: env.NewClient(awsenv.StepFunctions), StateMachineARN: arn}
}

func (s *StepFunctions) call(ctx context.Context, op string, in, out any) error {
	h := http.Header{}
	h.Set("Content-Type", "application/x-amz-json-1.0")
	h.Set("X-Amz-Target", "AWSStepFunctions."+op)
	return s.Client.Do(ctx, awsenv.Request{Path: "/", Header: h, Body: in}, out)
}

// Start starts the execution named jobID. Execution names are unique per
// state machine for 90 days, which makes a retried start idempotent: an
// existing execution's ARN is returned.
func (s *StepFunctions) Start(ctx context.Context, jobID string, input []byte) (string, error) {
	var out struct {
		ExecutionArn string `json:"executionArn"`
	}
	err := s.call(ctx, "StartExecution", map[string]string{
		"stateMachineArn": s.StateMachineARN,
		"name":            jobID,
		"input":           string(input),
	}, &out)
	if awsenv.ErrorCode(err) == "ExecutionAlreadyExists" {
		return s.executionARN(jobID), nil
	}
	if err != nil {
		return "", fmt.Errorf("start execution %s: %w", jobID, err)
	}
	return out.ExecutionArn, nil
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
	err := s.call(ctx, "StopExecution", map[string]string{
		"executionArn": s.executionARN(jobID),
		"error":        "JobCancelled",
		"cause":        cause,
	}, nil)
	if awsenv.ErrorCode(err) == "ExecutionDoesNotExist" {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stop execution %s: %w", jobID, err)
	}
	return nil
}

// Running pages through the names of the state machine's running
// executions (the job ids).
func (s *StepFunctions) Running(ctx context.Context) ([]string, error) {
	var names []string
	token := ""
	for {
		in := map[string]string{"stateMachineArn": s.StateMachineARN, "statusFilter": "RUNNING"}
		if token != "" {
			in["nextToken"] = token
		}
		var out struct {
			Executions []struct {
				Name string `json:"name"`
			} `json:"executions"`
			NextToken string `json:"nextToken"`
		}
		if err := s.call(ctx, "ListExecutions", in, &out); err != nil {
			return nil, fmt.Errorf("list executions: %w", err)
		}
		for _, x := range out.Executions {
			names = append(names, x.Name)
		}
		if out.NextToken == "" {
			return names, nil
		}
		token = out.NextToken
	}
}

// executionARN derives an execution's ARN from the state machine's:
// arn:aws:states:R:A:stateMachine:N -> arn:aws:states:R:A:execution:N:<name>.
func (s *StepFunctions) executionARN(name string) string {
	return strings.Replace(s.StateMachineARN, ":stateMachine:", ":execution:", 1) + ":" + name
}
