package asl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda/messages"
)

// JobCancelled mirrors a phase's typed error: a pointer receiver, as
// functions usually return them.
type JobCancelled struct{ Job string }

func (e *JobCancelled) Error() string { return "job " + e.Job + " was cancelled" }

// quotaError has a value receiver.
type quotaError struct{}

func (quotaError) Error() string { return "over quota" }

func named(name string) error {
	return messages.InvokeResponse_Error{Type: name, Message: name + " happened"}
}

// failing returns the errors in turn, then succeeds with {"ok": true}.
func failing(errs ...error) func(context.Context, []byte) ([]byte, error) {
	var mu sync.Mutex
	return func(context.Context, []byte) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		if len(errs) == 0 {
			return []byte(`{"ok": true}`), nil
		}
		err := errs[0]
		errs = errs[1:]
		return nil, err
	}
}

func repeatErr(err error, n int) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

func seconds(s ...float64) []time.Duration {
	out := make([]time.Duration, len(s))
	for i, v := range s {
		out[i] = time.Duration(v * float64(time.Second))
	}
	return out
}

var defRetryBackoff = asl("retry-backoff", `{
  "StartAt": "Work",
  "States": {
    "Work": {
      "Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:a",
      "Parameters": {"retryCount.$": "$$.State.RetryCount"},
      "Retry": [{"ErrorEquals": ["Flaky"], "IntervalSeconds": 2, "BackoffRate": 3, "MaxAttempts": 3}],
      "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Caught"}],
      "ResultPath": "$.result",
      "End": true
    },
    "Caught": {"Type": "Pass", "End": true}
  }
}`)

func TestRetryBackoff(t *testing.T) {
	var rec recorder
	res, x, clock := run(t, defRetryBackoff, `{}`, handlers{fnA: rec.wrap(failing(repeatErr(named("Flaky"), 3)...))})
	wantSucceeded(t, res, x, `{"result": {"ok": true}}`)
	if got, want := clock.Sleeps(), seconds(2, 6, 18); !slices.Equal(got, want) {
		t.Fatalf("sleeps %v, want %v", got, want)
	}
	// $$.State.RetryCount counts the retries of this visit.
	for i, p := range rec.got() {
		if !sameJSON(t, p, fmt.Sprintf(`{"retryCount": %d}`, i)) {
			t.Fatalf("attempt %d got %s", i, p)
		}
	}
	retries := eventsOf(x, EventStateRetryScheduled)
	if len(retries) != 3 {
		t.Fatalf("history:%s", historyString(x))
	}
	if d := details(t, retries[2]); d["error"] != "Flaky" || d["delaySeconds"] != float64(18) || d["attempt"] != float64(3) {
		t.Fatalf("retry details %v", d)
	}

	// Out of attempts: the catcher takes the fourth failure.
	res, x, clock = run(t, defRetryBackoff, `{}`, handlers{fnA: failing(repeatErr(named("Flaky"), 4)...)})
	wantSucceeded(t, res, x, `{"error": {"Error": "Flaky", "Cause": "{\"errorMessage\":\"Flaky happened\",\"errorType\":\"Flaky\"}"}}`)
	if got := len(eventsOf(x, EventLambdaFunctionFailed)); got != 4 {
		t.Fatalf("%d failed attempts, want 4", got)
	}
	if got, want := clock.Sleeps(), seconds(2, 6, 18); !slices.Equal(got, want) {
		t.Fatalf("sleeps %v, want %v", got, want)
	}
}

var defRetryCapped = asl("retry-capped", `{
  "StartAt": "Work",
  "States": {
    "Work": {
      "Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:a",
      "Retry": [{"ErrorEquals": ["Flaky"], "IntervalSeconds": 1, "MaxAttempts": 5, "MaxDelaySeconds": 5}],
      "End": true
    }
  }
}`)

func TestRetryMaxDelaySeconds(t *testing.T) {
	res, x, clock := run(t, defRetryCapped, `{}`, handlers{fnA: failing(repeatErr(named("Flaky"), 5)...)})
	wantSucceeded(t, res, x, `{"ok": true}`)
	if got, want := clock.Sleeps(), seconds(1, 2, 4, 5, 5); !slices.Equal(got, want) {
		t.Fatalf("sleeps %v, want %v", got, want)
	}
}

var defRetryJitter = asl("retry-jitter", `{
  "StartAt": "Work",
  "States": {
    "Work": {
      "Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:a",
      "Retry": [{"ErrorEquals": ["Flaky"], "IntervalSeconds": 10, "MaxAttempts": 4, "MaxDelaySeconds": 15, "JitterStrategy": "FULL"}],
      "End": true
    }
  }
}`)

func TestRetryFullJitter(t *testing.T) {
	res, x, clock := run(t, defRetryJitter, `{}`, handlers{fnA: failing(repeatErr(named("Flaky"), 4)...)})
	wantSucceeded(t, res, x, `{"ok": true}`)
	got := clock.Sleeps()
	limits := seconds(10, 15, 15, 15)
	if len(got) != len(limits) {
		t.Fatalf("sleeps %v", got)
	}
	for i := range got {
		if got[i] < 0 || got[i] > limits[i] {
			t.Fatalf("sleep %d is %v, want within [0, %v]", i, got[i], limits[i])
		}
	}
}

var defRetryZero = asl("retry-zero", `{
  "StartAt": "Work",
  "States": {
    "Work": {
      "Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:a",
      "Retry": [
        {"ErrorEquals": ["Fatal"], "MaxAttempts": 0},
        {"ErrorEquals": ["States.ALL"], "IntervalSeconds": 1}
      ],
      "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Caught"}],
      "End": true
    },
    "Caught": {"Type": "Pass", "End": true}
  }
}`)

func TestRetryMaxAttemptsZero(t *testing.T) {
	// The first matching retrier decides; with MaxAttempts 0 the error is
	// never retried, even though States.ALL below would match it.
	res, x, clock := run(t, defRetryZero, `{}`, handlers{fnA: failing(named("Fatal"))})
	wantSucceeded(t, res, x, `{"Error": "Fatal", "Cause": "{\"errorMessage\":\"Fatal happened\",\"errorType\":\"Fatal\"}"}`)
	if len(clock.Sleeps()) != 0 || len(eventsOf(x, EventLambdaFunctionScheduled)) != 1 {
		t.Fatalf("sleeps %v; history:%s", clock.Sleeps(), historyString(x))
	}
	res, x, clock = run(t, defRetryZero, `{}`, handlers{fnA: failing(named("Other"), named("Other"))})
	wantSucceeded(t, res, x, `{"ok": true}`)
	if got, want := clock.Sleeps(), seconds(1, 2); !slices.Equal(got, want) {
		t.Fatalf("sleeps %v, want %v", got, want)
	}
}

var defRetrierCounts = asl("retrier-counts", `{
  "StartAt": "X",
  "States": {
    "X": {
      "Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:a",
      "Retry": [
        {"ErrorEquals": ["ErrorA", "ErrorB"], "IntervalSeconds": 1, "BackoffRate": 2.0, "MaxAttempts": 2},
        {"ErrorEquals": ["ErrorC"], "IntervalSeconds": 5}
      ],
      "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Z"}],
      "End": true
    },
    "Z": {"Type": "Pass", "End": true}
  }
}`)

// TestRetrierCountsAreKeptPerRetrier replays the example in Step Functions'
// error-handling guide: ErrorA, ErrorB, ErrorC, ErrorB.
func TestRetrierCountsAreKeptPerRetrier(t *testing.T) {
	res, x, clock := run(t, defRetrierCounts, `{}`, handlers{fnA: failing(named("ErrorA"), named("ErrorB"), named("ErrorC"), named("ErrorB"))})
	wantSucceeded(t, res, x, `{"Error": "ErrorB", "Cause": "{\"errorMessage\":\"ErrorB happened\",\"errorType\":\"ErrorB\"}"}`)
	if got, want := clock.Sleeps(), seconds(1, 2, 5); !slices.Equal(got, want) {
		t.Fatalf("sleeps %v, want %v", got, want)
	}
}

var defCatchResultPaths = asl("catch-result-paths", `{
  "StartAt": "Route",
  "States": {
    "Route": {"Type": "Choice", "Choices": [
      {"Variable": "$.mode", "StringEquals": "merge", "Next": "Merge"},
      {"Variable": "$.mode", "StringEquals": "discard", "Next": "Discard"}
    ], "Default": "Replace"},
    "Merge": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:a",
      "Catch": [{"ErrorEquals": ["JobCancelled"], "ResultPath": "$.error", "Next": "Done"}], "End": true},
    "Discard": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:a",
      "Catch": [{"ErrorEquals": ["States.TaskFailed"], "ResultPath": null, "Next": "Done"}], "End": true},
    "Replace": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:a",
      "OutputPath": "$.never", "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Done"}], "End": true},
    "Done": {"Type": "Pass", "End": true}
  }
}`)

func TestCatchResultPath(t *testing.T) {
	cancelled := func(context.Context, []byte) ([]byte, error) { return nil, &JobCancelled{Job: "j-1"} }
	cause := `{\"errorMessage\":\"job j-1 was cancelled\",\"errorType\":\"JobCancelled\"}`
	res, x, _ := run(t, defCatchResultPaths, `{"mode": "merge", "job": "j-1"}`, handlers{fnA: cancelled})
	wantSucceeded(t, res, x, `{"mode": "merge", "job": "j-1", "error": {"Error": "JobCancelled", "Cause": "`+cause+`"}}`)

	res, x, _ = run(t, defCatchResultPaths, `{"mode": "discard", "job": "j-1"}`, handlers{fnA: cancelled})
	wantSucceeded(t, res, x, `{"mode": "discard", "job": "j-1"}`)

	// Without ResultPath the error output replaces the input, and the
	// state's OutputPath does not apply to a catcher's output.
	res, x, _ = run(t, defCatchResultPaths, `{"mode": "replace"}`, handlers{fnA: cancelled})
	wantSucceeded(t, res, x, `{"Error": "JobCancelled", "Cause": "`+cause+`"}`)
	exited := eventsOf(x, EventTaskStateExited)
	if len(exited) != 1 || !sameJSON(t, details(t, exited[0])["output"].(string), `{"Error": "JobCancelled", "Cause": "`+cause+`"}`) {
		t.Fatalf("history:%s", historyString(x))
	}
}

type panicValue struct{ n int }

var defErrorNames = asl("error-names", `{
  "StartAt": "Work",
  "States": {
    "Work": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:a",
      "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Caught"}], "End": true},
    "Caught": {"Type": "Pass", "End": true}
  }
}`)

func TestLambdaErrorNames(t *testing.T) {
	ive := messages.InvokeResponse_Error{Type: "JobCancelled", Message: "stop"}
	cases := []struct {
		name      string
		fn        func(context.Context, []byte) ([]byte, error)
		wantError string
		wantCause string // a substring when prefix is set
		prefix    bool
	}{
		{"InvokeResponse_Error value", func(context.Context, []byte) ([]byte, error) { return nil, ive },
			"JobCancelled", `{"errorMessage":"stop","errorType":"JobCancelled"}`, false},
		{"InvokeResponse_Error pointer", func(context.Context, []byte) ([]byte, error) { return nil, &ive },
			"InvokeResponse_Error", `"errorType":"InvokeResponse_Error"`, true},
		{"wrapped InvokeResponse_Error", func(context.Context, []byte) ([]byte, error) { return nil, fmt.Errorf("phase: %w", ive) },
			"wrapError", `"errorType":"wrapError"`, true},
		{"pointer type", func(context.Context, []byte) ([]byte, error) { return nil, &JobCancelled{Job: "j"} },
			"JobCancelled", `{"errorMessage":"job j was cancelled","errorType":"JobCancelled"}`, false},
		{"value type", func(context.Context, []byte) ([]byte, error) { return nil, quotaError{} },
			"quotaError", `{"errorMessage":"over quota","errorType":"quotaError"}`, false},
		{"errors.New", func(context.Context, []byte) ([]byte, error) { return nil, errors.New("plain") },
			"errorString", `{"errorMessage":"plain","errorType":"errorString"}`, false},
		{"panic with a string", func(context.Context, []byte) ([]byte, error) { panic("boom") },
			"string", `{"errorMessage":"boom","errorType":"string","stackTrace":[`, true},
		{"panic with an error", func(context.Context, []byte) ([]byte, error) { panic(&JobCancelled{Job: "p"}) },
			"JobCancelled", `{"errorMessage":"job p was cancelled","errorType":"JobCancelled","stackTrace":[`, true},
		{"panic with a struct", func(context.Context, []byte) ([]byte, error) { panic(panicValue{n: 1}) },
			"panicValue", `{"errorMessage":"{1}","errorType":"panicValue"`, true},
	}
	m := mustLoad(t, defErrorNames)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, x, _ := runMachine(t, m, `{}`, handlers{fnA: c.fn})
			if res.Status != StatusSucceeded {
				t.Fatalf("status %s; history:%s", res.Status, historyString(x))
			}
			var out struct{ Error, Cause string }
			if err := json.Unmarshal(res.Output, &out); err != nil {
				t.Fatal(err)
			}
			if out.Error != c.wantError {
				t.Fatalf("error name %q, want %q", out.Error, c.wantError)
			}
			if c.prefix && !strings.Contains(out.Cause, c.wantCause) || !c.prefix && out.Cause != c.wantCause {
				t.Fatalf("cause %s, want %s", out.Cause, c.wantCause)
			}
			failed := eventsOf(x, EventLambdaFunctionFailed)
			if len(failed) != 1 || details(t, failed[0])["error"] != c.wantError {
				t.Fatalf("history:%s", historyString(x))
			}
		})
	}
}

var defTaskTimeout = asl("task-timeout", `{
  "StartAt": "Work",
  "States": {
    "Work": {
      "Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:a",
      "TimeoutSecondsPath": "$.timeout",
      "Catch": [
        {"ErrorEquals": ["States.TaskFailed"], "Next": "TaskFailed"},
        {"ErrorEquals": ["States.Timeout"], "Next": "TimedOut"}
      ],
      "End": true
    },
    "TaskFailed": {"Type": "Pass", "Result": "task failed", "End": true},
    "TimedOut": {"Type": "Pass", "Result": "timed out", "End": true}
  }
}`)

func TestTaskTimeout(t *testing.T) {
	ctxErr := make(chan error, 1)
	blocking := func(ctx context.Context, _ []byte) ([]byte, error) {
		<-ctx.Done()
		ctxErr <- ctx.Err()
		return nil, ctx.Err()
	}
	// States.TaskFailed does not match States.Timeout; States.Timeout does.
	res, x, _ := run(t, defTaskTimeout, `{"timeout": 1}`, handlers{fnA: blocking})
	wantSucceeded(t, res, x, `"timed out"`)
	if err := <-ctxErr; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("handler saw %v, want its context's deadline", err)
	}
	if len(eventsOf(x, EventLambdaFunctionTimedOut)) != 1 {
		t.Fatalf("history:%s", historyString(x))
	}

	// A handler that ignores its context is abandoned at the timeout.
	release := make(chan struct{})
	defer close(release)
	ignoring := func(context.Context, []byte) ([]byte, error) {
		select {
		case <-release:
		case <-time.After(20 * time.Second):
		}
		return []byte(`{}`), nil
	}
	res, x, _ = run(t, defTaskTimeout, `{"timeout": 1}`, handlers{fnA: ignoring})
	wantSucceeded(t, res, x, `"timed out"`)

	res, x, _ = run(t, defTaskTimeout, `{"timeout": 1}`, handlers{fnA: failing(named("Custom"))})
	wantSucceeded(t, res, x, `"task failed"`)

	res, x, _ = run(t, defTaskTimeout, `{"timeout": 0}`, handlers{fnA: echo})
	wantFailed(t, res, x, ErrorRuntime)
}

var (
	bigString = `"` + strings.Repeat("a", MaxPayloadBytes) + `"`
	halfBig   = `"` + strings.Repeat("b", MaxPayloadBytes/2+16) + `"`

	defDataLimitCatchAll = asl("data-limit-catch-all", `{
  "StartAt": "Work",
  "States": {
    "Work": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:a",
      "ResultPath": "$.result",
      "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Caught"}], "End": true},
    "Caught": {"Type": "Pass", "End": true}
  }
}`)
	defDataLimitInvoke = asl("data-limit-invoke", `{
  "StartAt": "Work",
  "States": {
    "Work": {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke",
      "Parameters": {"FunctionName": "arn:aws:lambda:us-east-1:123456789012:function:a", "Payload.$": "$"},
      "Catch": [{"ErrorEquals": ["States.DataLimitExceeded"], "Next": "Caught"}], "End": true},
    "Caught": {"Type": "Pass", "End": true}
  }
}`)
	defDataLimitNoCatch = asl("data-limit-no-catch", `{
  "StartAt": "Work",
  "States": {"Work": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:a", "End": true}}
}`)
	defDataLimitPass = asl("data-limit-pass", `{
  "StartAt": "Big",
  "States": {"Big": {"Type": "Pass", "Result": {"pad": `+bigString+`}, "End": true}}
}`)
)

// TestDataLimitExceeded covers the 256 KiB quota. A task result over it is a
// task failure: Step Functions lets Retry and Catch see it, and a States.ALL
// catcher takes it (LocalStack's AWS-validated snapshots
// test_task_lambda_catch_state_all_data_limit_exceeded_on_large_utf8_response
// and its lambda:invoke twin record exactly that, although the developer
// guide calls the error terminal). A state's input or output over the quota
// ends the execution: no catcher, States.ALL included, sees it.
func TestDataLimitExceeded(t *testing.T) {
	huge := constant(bigString)

	res, x, _ := run(t, defDataLimitCatchAll, `{}`, handlers{fnA: huge})
	wantSucceeded(t, res, x, `{"error": {"Error": "States.DataLimitExceeded",
	  "Cause": "The state/task 'arn:aws:lambda:us-east-1:123456789012:function:a' returned a result with a size exceeding the maximum number of bytes service limit."}}`)

	res, x, _ = run(t, defDataLimitInvoke, `{}`, handlers{fnA: huge})
	wantSucceeded(t, res, x, `{"Error": "States.DataLimitExceeded",
	  "Cause": "The state/task 'lambda' returned a result with a size exceeding the maximum number of bytes service limit."}`)
	if failed := eventsOf(x, EventTaskFailed); len(failed) != 1 || details(t, failed[0])["error"] != ErrorDataLimitExceeded {
		t.Fatalf("history:%s", historyString(x))
	}

	res, x, _ = run(t, defDataLimitNoCatch, `{}`, handlers{fnA: huge})
	wantFailed(t, res, x, ErrorDataLimitExceeded)

	// Each half fits; the state's output, input plus result, does not.
	res, x, _ = run(t, defDataLimitCatchAll, `{"pad": `+halfBig+`}`, handlers{fnA: constant(halfBig)})
	wantFailed(t, res, x, ErrorDataLimitExceeded)
	if len(eventsOf(x, EventPassStateEntered)) != 0 {
		t.Fatalf("the catcher ran; history:%s", historyString(x))
	}

	res, x, _ = run(t, defDataLimitPass, `{}`, nil)
	wantFailed(t, res, x, ErrorDataLimitExceeded)
	if res.Cause != "The state/task 'Big' returned a result with a size exceeding the maximum number of bytes service limit." {
		t.Fatalf("cause %q", res.Cause)
	}
}

var defRuntimeCatchAll = asl("runtime-catch-all", `{
  "StartAt": "Route",
  "States": {
    "Route": {"Type": "Choice", "Choices": [
      {"Variable": "$.case", "StringEquals": "parameters", "Next": "BadParameters"},
      {"Variable": "$.case", "StringEquals": "result", "Next": "BadResult"},
      {"Variable": "$.case", "StringEquals": "selector", "Next": "BadSelector"},
      {"Variable": "$.case", "StringEquals": "branch", "Next": "BadBranch"}
    ], "Default": "BadResultPath"},
    "BadParameters": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:a",
      "Parameters": {"id.$": "$.missing"},
      "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Caught"}], "End": true},
    "BadResult": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:b",
      "Retry": [{"ErrorEquals": ["States.ALL"]}],
      "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Caught"}], "End": true},
    "BadSelector": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:a",
      "ResultSelector": {"x.$": "$.nothing"},
      "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Caught"}], "End": true},
    "BadResultPath": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:a",
      "InputPath": "$.list", "ResultPath": "$.list.x",
      "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Caught"}], "End": true},
    "BadBranch": {"Type": "Parallel", "Branches": [
        {"StartAt": "Inner", "States": {"Inner": {"Type": "Pass", "Parameters": {"v.$": "$.absent"}, "End": true}}}],
      "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Caught"}], "End": true},
    "Caught": {"Type": "Pass", "End": true}
  }
}`)

// TestStatesRuntimeIsNotCaught: States.Runtime is terminal; neither Retry
// nor Catch with States.ALL sees it.
func TestStatesRuntimeIsNotCaught(t *testing.T) {
	h := handlers{fnA: constant(`{"a": 1}`), fnB: constant(`not json`)}
	for input, cause := range map[string]string{
		`{"case": "parameters"}`:             "An error occurred while executing the state 'BadParameters' (entered at the event id #4). The JSONPath '$.missing' specified for the field 'id.$' could not be found in the input '{\"case\":\"parameters\"}'",
		`{"case": "result"}`:                 "The Lambda function's response is not JSON",
		`{"case": "selector"}`:               "The JSONPath '$.nothing' specified for the field 'x.$' could not be found",
		`{"case": "path", "list": [1]}`:      "Unable to apply ReferencePath $.list.x to input",
		`{"case": "branch", "present": 1}`:   "An error occurred while executing the state 'Inner'",
		`{"case": "path", "list": "x"}`:      "Unable to apply ReferencePath",
		`{"case": "path", "list": {"y": 1}}`: "",
	} {
		res, x, _ := run(t, defRuntimeCatchAll, input, h)
		if cause == "" {
			wantSucceeded(t, res, x, `{"case": "path", "list": {"y": 1, "x": {"a": 1}}}`)
			continue
		}
		wantFailed(t, res, x, ErrorRuntime)
		if !strings.Contains(res.Cause, cause) {
			t.Errorf("input %s: cause %q, want %q", input, res.Cause, cause)
		}
		if strings.Count(res.Cause, "An error occurred while executing") != 1 {
			t.Errorf("input %s: cause %q is prefixed more than once", input, res.Cause)
		}
		if len(eventsOf(x, EventStateRetryScheduled)) != 0 || slices.ContainsFunc(x.History(), func(e HistoryEvent) bool { return e.StateName == "Caught" }) {
			t.Errorf("input %s: retried or caught; history:%s", input, historyString(x))
		}
	}
}

var defParallelRetry = asl("parallel-retry", `{
  "StartAt": "Both",
  "States": {
    "Both": {
      "Type": "Parallel",
      "Branches": [{"StartAt": "Boom", "States": {"Boom": {"Type": "Fail", "Error": "BranchBroke"}}}],
      "Retry": [{"ErrorEquals": ["BranchBroke"], "IntervalSeconds": 3, "MaxAttempts": 2}],
      "End": true
    }
  }
}`)

func TestParallelRetry(t *testing.T) {
	res, x, clock := run(t, defParallelRetry, `{}`, nil)
	wantFailed(t, res, x, "BranchBroke")
	if got := len(eventsOf(x, EventParallelStateStarted)); got != 3 {
		t.Fatalf("%d attempts, want 3", got)
	}
	if got, want := clock.Sleeps(), seconds(3, 6); !slices.Equal(got, want) {
		t.Fatalf("sleeps %v, want %v", got, want)
	}
}
