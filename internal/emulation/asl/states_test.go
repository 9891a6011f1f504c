package asl

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda/messages"
)

var defPass = asl("pass", `{
  "StartAt": "Static",
  "States": {
    "Static": {"Type": "Pass", "Result": {"x": 1}, "ResultPath": "$.static", "Next": "Shaped"},
    "Shaped": {"Type": "Pass", "InputPath": "$.in", "Parameters": {"copy.$": "$.v", "fixed": "f", "nested": {"deep.$": "$.v"}},
               "ResultPath": "$.shaped", "Next": "Discard"},
    "Discard": {"Type": "Pass", "Result": "dropped", "ResultPath": null, "Next": "Select"},
    "Select": {"Type": "Pass", "OutputPath": "$.shaped", "End": true}
  }
}`)

func TestPass(t *testing.T) {
	res, x, _ := run(t, defPass, `{"in": {"v": 7}}`, nil)
	wantSucceeded(t, res, x, `{"copy": 7, "fixed": "f", "nested": {"deep": 7}}`)
	got := eventTypes(x)
	want := []EventType{EventExecutionStarted,
		EventPassStateEntered, EventPassStateExited, EventPassStateEntered, EventPassStateExited,
		EventPassStateEntered, EventPassStateExited, EventPassStateEntered, EventPassStateExited,
		EventExecutionSucceeded}
	if !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

var defTaskARN = asl("task-arn", `{
  "StartAt": "Work",
  "States": {
    "Work": {
      "Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:a",
      "InputPath": "$.job",
      "Parameters": {"id.$": "$.id", "kind": "crawl"},
      "ResultSelector": {"pages.$": "$.count"},
      "ResultPath": "$.result",
      "OutputPath": "$.result",
      "End": true
    }
  }
}`)

func TestTaskWithLambdaARN(t *testing.T) {
	var rec recorder
	res, x, _ := run(t, defTaskARN, `{"job": {"id": "j-1"}}`, handlers{fnA: rec.wrap(constant(`{"count": 22, "noise": true}`))})
	wantSucceeded(t, res, x, `{"pages": 22}`)
	if got := rec.got(); len(got) != 1 || !sameJSON(t, got[0], `{"id": "j-1", "kind": "crawl"}`) {
		t.Fatalf("payloads %v", got)
	}
	types := eventTypes(x)
	want := []EventType{EventExecutionStarted, EventTaskStateEntered, EventLambdaFunctionScheduled,
		EventLambdaFunctionStarted, EventLambdaFunctionSucceeded, EventTaskStateExited, EventExecutionSucceeded}
	if !slices.Equal(types, want) {
		t.Fatalf("events %v, want %v", types, want)
	}
	sched := details(t, eventsOf(x, EventLambdaFunctionScheduled)[0])
	if sched["resource"] != fnA || !sameJSON(t, sched["input"].(string), `{"id":"j-1","kind":"crawl"}`) {
		t.Fatalf("scheduled details %v", sched)
	}
}

var defTaskInvoke = asl("task-invoke", `{
  "StartAt": "Invoke",
  "States": {
    "Invoke": {
      "Type": "Task", "Resource": "arn:aws:states:::lambda:invoke",
      "Parameters": {"FunctionName": "arn:aws:lambda:us-east-1:123456789012:function:b", "Qualifier": "7", "Payload": {"n.$": "$.n"}},
      "ResultPath": "$.invoked",
      "Next": "Unwrap"
    },
    "Unwrap": {"Type": "Pass", "InputPath": "$.invoked.Payload", "End": true}
  }
}`)

func TestTaskWithLambdaInvokeIntegration(t *testing.T) {
	var rec recorder
	res, x, _ := run(t, defTaskInvoke, `{"n": 3}`, handlers{fnB + ":7": rec.wrap(constant(`{"doubled": 6}`))})
	wantSucceeded(t, res, x, `{"doubled": 6}`)
	if got := rec.got(); len(got) != 1 || !sameJSON(t, got[0], `{"n": 3}`) {
		t.Fatalf("payloads %v", got)
	}
	succeeded := eventsOf(x, EventTaskSucceeded)
	if len(succeeded) != 1 {
		t.Fatalf("history:%s", historyString(x))
	}
	d := details(t, succeeded[0])
	var result map[string]any
	if err := json.Unmarshal([]byte(d["output"].(string)), &result); err != nil {
		t.Fatal(err)
	}
	if result["StatusCode"] != float64(200) || result["ExecutedVersion"] != "7" {
		t.Fatalf("invoke result %v", result)
	}
	for _, k := range []string{"Payload", "SdkHttpMetadata", "SdkResponseMetadata"} {
		if _, ok := result[k]; !ok {
			t.Fatalf("invoke result lacks %s: %v", k, result)
		}
	}
	if d["resourceType"] != "lambda" || d["resource"] != "invoke" {
		t.Fatalf("TaskSucceeded details %v", d)
	}
	sched := details(t, eventsOf(x, EventTaskScheduled)[0])
	if sched["region"] != "local" || !sameJSON(t, sched["parameters"].(string), `{"FunctionName":"`+fnB+`","Qualifier":"7","Payload":{"n":3}}`) {
		t.Fatalf("TaskScheduled details %v", sched)
	}
}

var defWait = asl("wait", `{
  "StartAt": "Fixed",
  "States": {
    "Fixed": {"Type": "Wait", "Seconds": 10, "Next": "FromInput"},
    "FromInput": {"Type": "Wait", "SecondsPath": "$.delay", "Next": "Until"},
    "Until": {"Type": "Wait", "Timestamp": "2024-03-01T12:01:00Z", "Next": "UntilFromInput"},
    "UntilFromInput": {"Type": "Wait", "TimestampPath": "$.at", "Next": "Past"},
    "Past": {"Type": "Wait", "Timestamp": "2020-01-01T00:00:00Z", "End": true}
  }
}`)

func TestWait(t *testing.T) {
	// The clock starts at testEpoch, 12:00:00; after 10 s and 5 s it is
	// 12:00:15, so waiting until 12:01:00 takes 45 s, then 90 s to
	// 12:02:30+01:00 expressed with an offset and a fraction.
	res, x, clock := run(t, defWait, `{"delay": 5, "at": "2024-03-01T13:02:30.000+01:00"}`, nil)
	wantSucceeded(t, res, x, `{"delay": 5, "at": "2024-03-01T13:02:30.000+01:00"}`)
	want := []time.Duration{10 * time.Second, 5 * time.Second, 45 * time.Second, 90 * time.Second}
	if got := clock.Sleeps(); !slices.Equal(got, want) {
		t.Fatalf("sleeps %v, want %v", got, want)
	}

	for input, cause := range map[string]string{
		`{"delay": -1, "at": "2024-03-01T12:00:00Z"}`:  "references a negative value",
		`{"delay": 1.5, "at": "2024-03-01T12:00:00Z"}`: "cannot be parsed as a long value",
		`{"at": "2024-03-01T12:00:00Z"}`:               "does not reference an input value",
		`{"delay": 1, "at": "2024-03-01 12:00:00Z"}`:   "valid ISO-8601",
	} {
		res, x, _ := run(t, defWait, input, nil)
		wantFailed(t, res, x, ErrorRuntime)
		if !strings.Contains(res.Cause, cause) {
			t.Errorf("input %s: cause %q, want %q", input, res.Cause, cause)
		}
	}
}

var defSucceedFail = asl("succeed-fail", `{
  "StartAt": "Route",
  "States": {
    "Route": {"Type": "Choice", "Choices": [
      {"Variable": "$.ok", "BooleanEquals": true, "Next": "Done"},
      {"Variable": "$.literal", "IsPresent": true, "Next": "Literal"},
      {"Variable": "$.format", "IsPresent": true, "Next": "Formatted"}
    ], "Default": "FromInput"},
    "Done": {"Type": "Succeed", "InputPath": "$.payload", "OutputPath": "$.keep"},
    "Literal": {"Type": "Fail", "Error": "Broken", "Cause": "it broke"},
    "Formatted": {"Type": "Fail", "Error": "Formatted", "CausePath": "States.Format('job {} failed: {}', $.format.id, $.format.why)"},
    "FromInput": {"Type": "Fail", "ErrorPath": "$.error.Error", "CausePath": "$.error.Cause"}
  }
}`)

func TestSucceedAndFail(t *testing.T) {
	res, x, _ := run(t, defSucceedFail, `{"ok": true, "payload": {"keep": {"a": 1}, "drop": 2}}`, nil)
	wantSucceeded(t, res, x, `{"a": 1}`)

	res, x, _ = run(t, defSucceedFail, `{"ok": false, "literal": 1}`, nil)
	wantFailed(t, res, x, "Broken")
	if res.Cause != "it broke" {
		t.Fatalf("cause %q", res.Cause)
	}
	if got := eventTypes(x); got[len(got)-2] != EventFailStateEntered {
		t.Fatalf("events %v", got)
	}

	res, x, _ = run(t, defSucceedFail, `{"ok": false, "format": {"id": "j-9", "why": "no sandbox"}}`, nil)
	wantFailed(t, res, x, "Formatted")
	if res.Cause != "job j-9 failed: no sandbox" {
		t.Fatalf("cause %q", res.Cause)
	}

	res, x, _ = run(t, defSucceedFail, `{"ok": false, "error": {"Error": "JobCancelled", "Cause": "by the user"}}`, nil)
	wantFailed(t, res, x, "JobCancelled")
	if res.Cause != "by the user" {
		t.Fatalf("cause %q", res.Cause)
	}

	res, x, _ = run(t, defSucceedFail, `{"ok": false, "error": {"Cause": "no name"}}`, nil)
	wantFailed(t, res, x, ErrorRuntime)
	if !strings.Contains(res.Cause, "The JSONPath '$.error.Error' specified for the field 'ErrorPath' could not be found") {
		t.Fatalf("cause %q", res.Cause)
	}
}

var defParallel = asl("parallel", `{
  "StartAt": "Both",
  "States": {
    "Both": {
      "Type": "Parallel",
      "Parameters": {"n.$": "$.n"},
      "Branches": [
        {"StartAt": "A", "States": {"A": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:a", "End": true}}},
        {"StartAt": "B", "States": {"B": {"Type": "Pass", "Parameters": {"b.$": "$.n"}, "Next": "B2"}, "B2": {"Type": "Succeed"}}}
      ],
      "ResultSelector": {"first.$": "$[0]", "second.$": "$[1].b"},
      "ResultPath": "$.both",
      "End": true
    }
  }
}`)

func TestParallel(t *testing.T) {
	res, x, _ := run(t, defParallel, `{"n": 5}`, handlers{fnA: constant(`{"a": true}`)})
	wantSucceeded(t, res, x, `{"n": 5, "both": {"first": {"a": true}, "second": 5}}`)
	types := eventTypes(x)
	for _, want := range []EventType{EventParallelStateEntered, EventParallelStateStarted, EventParallelStateSucceeded, EventParallelStateExited} {
		if !slices.Contains(types, want) {
			t.Fatalf("no %s in %v", want, types)
		}
	}
	// Branch events chain back to ParallelStateStarted, not to each other.
	started := eventsOf(x, EventParallelStateStarted)[0].ID
	var firsts int
	for _, e := range x.History() {
		if (e.Type == EventTaskStateEntered || e.Type == EventPassStateEntered) && e.PreviousID == started {
			firsts++
		}
	}
	if firsts != 2 {
		t.Fatalf("%d branch starts chained to event %d; history:%s", firsts, started, historyString(x))
	}
}

var defParallelFailure = asl("parallel-failure", `{
  "StartAt": "Both",
  "States": {
    "Both": {
      "Type": "Parallel",
      "Branches": [
        {"StartAt": "Slow", "States": {"Slow": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:a", "End": true}}},
        {"StartAt": "Boom", "States": {"Boom": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:b", "End": true}}}
      ],
      "Catch": [{"ErrorEquals": ["BranchBroke"], "ResultPath": "$.error", "Next": "Handled"}],
      "End": true
    },
    "Handled": {"Type": "Pass", "End": true}
  }
}`)

func TestParallelBranchFailureCancelsSiblingsAndIsCaught(t *testing.T) {
	started, cancelled := make(chan struct{}), make(chan struct{})
	slow := func(ctx context.Context, _ []byte) ([]byte, error) {
		close(started)
		<-ctx.Done()
		close(cancelled)
		return nil, ctx.Err()
	}
	boom := func(context.Context, []byte) ([]byte, error) {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
		}
		return nil, messages.InvokeResponse_Error{Type: "BranchBroke", Message: "on purpose"}
	}
	res, x, _ := run(t, defParallelFailure, `{"in": 1}`, handlers{fnA: slow, fnB: boom})
	wantSucceeded(t, res, x, `{"in": 1, "error": {"Error": "BranchBroke", "Cause": "{\"errorMessage\":\"on purpose\",\"errorType\":\"BranchBroke\"}"}}`)
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the sibling branch's task was not cancelled")
	}
	if len(eventsOf(x, EventParallelStateFailed)) != 1 {
		t.Fatalf("history:%s", historyString(x))
	}
}

var defMap = asl("map", `{
  "StartAt": "Each",
  "States": {
    "Each": {
      "Type": "Map",
      "ItemsPath": "$.pages",
      "MaxConcurrency": 2,
      "ItemSelector": {"url.$": "$$.Map.Item.Value", "index.$": "$$.Map.Item.Index", "job.$": "$.job"},
      "ItemProcessor": {
        "ProcessorConfig": {"Mode": "INLINE"},
        "StartAt": "Fetch",
        "States": {"Fetch": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:a", "End": true}}
      },
      "ResultPath": "$.fetched",
      "End": true
    }
  }
}`)

func TestMap(t *testing.T) {
	var running, peak atomic.Int32
	release := make(chan struct{})
	var once sync.Once
	fetch := func(_ context.Context, p []byte) ([]byte, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			old := peak.Load()
			if n <= old || peak.CompareAndSwap(old, n) {
				break
			}
		}
		if n == 2 {
			once.Do(func() { close(release) })
		}
		// Hold the first iterations until two run at once, so the bound is
		// exercised, but never longer than a generous limit.
		select {
		case <-release:
		case <-time.After(5 * time.Second):
		}
		return p, nil
	}
	res, x, _ := run(t, defMap, `{"job": "j", "pages": ["a", "b", "c", "d", "e"]}`, handlers{fnA: fetch})
	wantSucceeded(t, res, x, `{"job": "j", "pages": ["a", "b", "c", "d", "e"], "fetched": [
	  {"url": "a", "index": 0, "job": "j"}, {"url": "b", "index": 1, "job": "j"}, {"url": "c", "index": 2, "job": "j"},
	  {"url": "d", "index": 3, "job": "j"}, {"url": "e", "index": 4, "job": "j"}]}`)
	if p := peak.Load(); p > 2 {
		t.Fatalf("%d iterations ran at once, MaxConcurrency is 2", p)
	}
	if n := len(eventsOf(x, EventMapIterationSucceeded)); n != 5 {
		t.Fatalf("%d MapIterationSucceeded events", n)
	}
	started := details(t, eventsOf(x, EventMapStateStarted)[0])
	if started["length"] != float64(5) {
		t.Fatalf("MapStateStarted details %v", started)
	}
}

var defMapLegacy = asl("map-legacy", `{
  "StartAt": "Each",
  "States": {
    "Each": {
      "Type": "Map",
      "Parameters": {"v.$": "$$.Map.Item.Value"},
      "Iterator": {"StartAt": "Double", "States": {"Double": {"Type": "Pass", "Parameters": {"d.$": "States.MathAdd($.v, $.v)"}, "End": true}}},
      "End": true
    }
  }
}`)

func TestMapLegacyFieldsAndEmptyInput(t *testing.T) {
	res, x, _ := run(t, defMapLegacy, `[1, 2, 3]`, nil)
	wantSucceeded(t, res, x, `[{"d": 2}, {"d": 4}, {"d": 6}]`)
	res, x, _ = run(t, defMapLegacy, `[]`, nil)
	wantSucceeded(t, res, x, `[]`)
	res, x, _ = run(t, defMapLegacy, `{"not": "an array"}`, nil)
	wantFailed(t, res, x, ErrorRuntime)
	if !strings.Contains(res.Cause, `Map state input must be an array but was: {"not":"an array"}`) {
		t.Fatalf("cause %q", res.Cause)
	}
}

var defMapFailure = asl("map-failure", `{
  "StartAt": "Each",
  "States": {
    "Each": {
      "Type": "Map",
      "ItemProcessor": {"StartAt": "Check", "States": {
        "Check": {"Type": "Choice", "Choices": [{"Variable": "$", "NumericGreaterThan": 2, "Next": "Bad"}], "Default": "Good"},
        "Good": {"Type": "Succeed"},
        "Bad": {"Type": "Fail", "Error": "TooBig", "Cause": "item over 2"}}},
      "Catch": [{"ErrorEquals": ["States.TaskFailed"], "Next": "Caught"}],
      "End": true
    },
    "Caught": {"Type": "Pass", "End": true}
  }
}`)

func TestMapFailureIsTheIterationsError(t *testing.T) {
	res, x, _ := run(t, defMapFailure, `[1, 2, 3]`, nil)
	wantSucceeded(t, res, x, `{"Error": "TooBig", "Cause": "item over 2"}`)
	if len(eventsOf(x, EventMapIterationFailed)) != 1 || len(eventsOf(x, EventMapStateFailed)) != 1 {
		t.Fatalf("history:%s", historyString(x))
	}
}

var (
	defMapToleratedCount = asl("map-tolerated-count", `{
  "StartAt": "Each",
  "States": {
    "Each": {
      "Type": "Map",
      "ToleratedFailureCount": 1,
      "ItemProcessor": {"StartAt": "Check", "States": {
        "Check": {"Type": "Choice", "Choices": [{"Variable": "$", "StringEquals": "bad", "Next": "Bad"}], "Default": "Good"},
        "Good": {"Type": "Pass", "End": true},
        "Bad": {"Type": "Fail", "Error": "BadItem", "Cause": "bad"}}},
      "End": true
    }
  }
}`)
	defMapToleratedPercentage = asl("map-tolerated-percentage", `{
  "StartAt": "Each",
  "States": {
    "Each": {
      "Type": "Map",
      "ItemsPath": "$.items",
      "ToleratedFailurePercentagePath": "$.pct",
      "ItemProcessor": {"StartAt": "Check", "States": {
        "Check": {"Type": "Choice", "Choices": [{"Variable": "$", "StringEquals": "bad", "Next": "Bad"}], "Default": "Good"},
        "Good": {"Type": "Pass", "End": true},
        "Bad": {"Type": "Fail", "Error": "BadItem", "Cause": "bad"}}},
      "End": true
    }
  }
}`)
)

func TestMapToleratedFailures(t *testing.T) {
	res, x, _ := run(t, defMapToleratedCount, `["ok", "bad", "ok"]`, nil)
	wantSucceeded(t, res, x, `["ok", {"Error": "BadItem", "Cause": "bad"}, "ok"]`)

	res, x, _ = run(t, defMapToleratedCount, `["bad", "ok", "bad"]`, nil)
	wantFailed(t, res, x, ErrorExceedToleratedFailureThreshold)

	res, x, _ = run(t, defMapToleratedPercentage, `{"pct": 50, "items": ["bad", "ok", "ok", "ok"]}`, nil)
	wantSucceeded(t, res, x, `[{"Error": "BadItem", "Cause": "bad"}, "ok", "ok", "ok"]`)

	res, x, _ = run(t, defMapToleratedPercentage, `{"pct": 25, "items": ["bad", "bad", "ok", "ok"]}`, nil)
	wantFailed(t, res, x, ErrorExceedToleratedFailureThreshold)

	res, x, _ = run(t, defMapToleratedPercentage, `{"pct": "half", "items": []}`, nil)
	wantFailed(t, res, x, ErrorRuntime)
	if !strings.Contains(res.Cause, `The ToleratedFailurePercentagePath field refers to value "half" which is not a valid float: $.pct`) {
		t.Fatalf("cause %q", res.Cause)
	}
}

var defMapFromPaths = asl("map-from-paths", `{
  "StartAt": "Each",
  "States": {
    "Each": {
      "Type": "Map",
      "ItemsPath": "$.items",
      "MaxConcurrencyPath": "$.limit",
      "ToleratedFailureCountPath": "$.tolerated",
      "ItemProcessor": {"StartAt": "Check", "States": {
        "Check": {"Type": "Choice", "Choices": [{"Variable": "$", "StringEquals": "bad", "Next": "Bad"}], "Default": "Good"},
        "Good": {"Type": "Pass", "End": true},
        "Bad": {"Type": "Fail", "Error": "BadItem"}}},
      "End": true
    }
  }
}`)

func TestMapSettingsFromPaths(t *testing.T) {
	res, x, _ := run(t, defMapFromPaths, `{"limit": 1, "tolerated": 1, "items": ["ok", "bad"]}`, nil)
	wantSucceeded(t, res, x, `["ok", {"Error": "BadItem", "Cause": ""}]`)
	for input, cause := range map[string]string{
		`{"limit": "many", "tolerated": 1, "items": []}`: `The MaxConcurrencyPath field refers to value "many" which is not a valid integer: $.limit`,
		`{"limit": 1, "tolerated": {}, "items": []}`:     `The ToleratedFailureCountPath field refers to value "{}" which is not a valid integer: $.tolerated`,
		`{"limit": 1, "tolerated": -1, "items": []}`:     "ToleratedFailureCount cannot be negative.",
	} {
		res, x, _ := run(t, defMapFromPaths, input, nil)
		wantFailed(t, res, x, ErrorRuntime)
		if !strings.Contains(res.Cause, cause) {
			t.Errorf("input %s: cause %q, want %q", input, res.Cause, cause)
		}
	}
}
