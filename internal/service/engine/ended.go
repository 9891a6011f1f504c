package engine

import (
	"encoding/json"

	"github.com/sandstep/sandstep/internal/service/store"
)

// How a job's execution ended, as the cleanup phase of its state machine
// learns it: the machine's own outcome on success, the error a Catch put at
// its ResultPath, or the EventBridge "Step Functions Execution Status
// Change" event for an execution no Catch saw end (aborted, timed out).
// Research jobs and agent runs end alike.

// StateError is the {"Error","Cause"} object a Catch puts at its ResultPath.
type StateError struct {
	Error string `json:"Error"`
	Cause string `json:"Cause"`
}

// StatusChange is the detail of an execution status change event.
type StatusChange struct {
	ExecutionARN string `json:"executionArn"`
	Name         string `json:"name"`
	Status       string `json:"status"`
	Error        string `json:"error,omitempty"`
	Cause        string `json:"cause,omitempty"`
}

// Ended is the job's final status and the message that says why it
// failed. A cancel the job asked for wins; failed is the message of an
// execution that ended without saying why.
func Ended(cancelRequested bool, detail *StatusChange, caught *StateError, outcome, failed string) (store.Status, string) {
	switch {
	case cancelRequested:
		return store.StatusCancelled, ""
	case detail != nil:
		switch detail.Status {
		case "SUCCEEDED":
			return store.StatusSucceeded, ""
		case "TIMED_OUT":
			return store.StatusFailed, "the execution timed out"
		case "ABORTED":
			return store.StatusFailed, "the execution was stopped"
		}
		return store.StatusFailed, ErrorMessage(detail.Error, detail.Cause)
	case caught != nil:
		if caught.Error == "JobCancelled" {
			return store.StatusCancelled, ""
		}
		return store.StatusFailed, ErrorMessage(caught.Error, caught.Cause)
	case outcome == "succeeded":
		return store.StatusSucceeded, ""
	}
	return store.StatusFailed, failed
}

// ErrorMessage renders a Step Functions error. A Lambda's Cause is its JSON
// error response ({"errorMessage","errorType"}); the message is what a user
// can read.
func ErrorMessage(name, cause string) string {
	var lambdaErr struct {
		Message string `json:"errorMessage"`
	}
	if json.Unmarshal([]byte(cause), &lambdaErr) == nil && lambdaErr.Message != "" {
		cause = lambdaErr.Message
	}
	switch {
	case name == "":
		return cause
	case cause == "":
		return name
	}
	return name + ": " + cause
}
