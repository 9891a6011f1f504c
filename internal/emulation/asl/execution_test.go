package asl

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

var defStop = asl("stop", `{
  "StartAt": "Work",
  "States": {
    "Work": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:a",
      "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Caught"}], "End": true},
    "Caught": {"Type": "Pass", "End": true}
  }
}`)

func TestStopAbortsAndCancelsRunningTasks(t *testing.T) {
	started, handlerErr := make(chan struct{}), make(chan error, 1)
	blocking := func(ctx context.Context, _ []byte) ([]byte, error) {
		close(started)
		<-ctx.Done()
		handlerErr <- ctx.Err()
		return nil, ctx.Err()
	}
	m := mustLoad(t, defStop)
	x, err := m.Start(context.Background(), "to-stop", nil, handlers{fnA: blocking})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the task never started")
	}
	if err := x.Stop("User.Cancelled", "stopped by the test"); err != nil {
		t.Fatal(err)
	}
	if x.Status() != StatusAborted {
		t.Fatalf("status %s right after Stop", x.Status())
	}
	select {
	case <-x.Done():
	default:
		t.Fatal("Done is open after Stop")
	}
	res, err := x.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != StatusAborted || res.Error != "User.Cancelled" || res.Cause != "stopped by the test" {
		t.Fatalf("result %+v", res)
	}
	select {
	case err := <-handlerErr:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("handler saw %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the running task's context was not cancelled")
	}
	if err := x.Stop("", ""); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("second Stop: %v", err)
	}
	h := x.History()
	last := h[len(h)-1]
	if last.Type != EventExecutionAborted || !sameJSON(t, string(last.Details), `{"error":"User.Cancelled","cause":"stopped by the test"}`) {
		t.Fatalf("history:%s", historyString(x))
	}
	// The abandoned task's failure must not reach the catcher afterwards.
	for _, e := range x.History() {
		if e.StateName == "Caught" {
			t.Fatalf("the catcher ran after Stop; history:%s", historyString(x))
		}
	}
}

var defExecutionTimeout = asl("execution-timeout", `{
  "TimeoutSeconds": 1,
  "StartAt": "Work",
  "States": {"Work": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:a", "End": true}}
}`)

func TestExecutionTimeoutSeconds(t *testing.T) {
	cancelled := make(chan struct{})
	blocking := func(ctx context.Context, _ []byte) ([]byte, error) {
		<-ctx.Done()
		close(cancelled)
		return nil, ctx.Err()
	}
	res, x, _ := runMachine(t, mustLoad(t, defExecutionTimeout), `{}`, handlers{fnA: blocking}, WithClock(realClock{}))
	if res.Status != StatusTimedOut || res.Error != ErrorTimeout {
		t.Fatalf("result %+v; history:%s", res, historyString(x))
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the running task's context was not cancelled")
	}
	if types := eventTypes(x); types[len(types)-1] != EventExecutionTimedOut {
		t.Fatalf("history:%s", historyString(x))
	}
}

var defTimeoutDuringWait = asl("timeout-during-wait", `{
  "TimeoutSeconds": 30,
  "StartAt": "Short",
  "States": {
    "Short": {"Type": "Wait", "Seconds": 10, "Next": "Long"},
    "Long": {"Type": "Wait", "Seconds": 3600, "End": true}
  }
}`)

// TestExecutionTimeoutOnTheClock: a wait that would outlast TimeoutSeconds
// ends the execution at the deadline, also on a test clock.
func TestExecutionTimeoutOnTheClock(t *testing.T) {
	res, x, clock := run(t, defTimeoutDuringWait, `{}`, nil)
	if res.Status != StatusTimedOut {
		t.Fatalf("result %+v; history:%s", res, historyString(x))
	}
	if got := clock.Sleeps(); len(got) != 2 || got[0] != 10*time.Second || got[1] != 20*time.Second {
		t.Fatalf("sleeps %v, want [10s 20s]", got)
	}
	if !res.StopDate.Equal(testEpoch.Add(30 * time.Second)) {
		t.Fatalf("stopped at %v", res.StopDate)
	}
}

var defContextObject = asl("context-object", `{
  "StartAt": "Look",
  "States": {
    "Look": {"Type": "Pass", "Parameters": {
      "id.$": "$$.Execution.Id", "name.$": "$$.Execution.Name", "input.$": "$$.Execution.Input",
      "start.$": "$$.Execution.StartTime", "role.$": "$$.Execution.RoleArn",
      "state.$": "$$.State.Name", "entered.$": "$$.State.EnteredTime", "retries.$": "$$.State.RetryCount",
      "machine.$": "$$.StateMachine.Id", "machineName.$": "$$.StateMachine.Name"}, "End": true}
  }
}`)

func TestContextObject(t *testing.T) {
	m := mustLoad(t, defContextObject, LoadOptions{Name: "jobs", ARN: "arn:aws:states:us-east-1:123456789012:stateMachine:jobs"})
	res, x, _ := runMachine(t, m, `{"job": 1}`, nil, WithRoleARN("arn:aws:iam::123456789012:role/sfn"))
	wantSucceeded(t, res, x, `{
	  "id": "arn:aws:states:us-east-1:123456789012:execution:jobs:exec-1", "name": "exec-1", "input": {"job": 1},
	  "start": "2024-03-01T12:00:00.000Z", "role": "arn:aws:iam::123456789012:role/sfn",
	  "state": "Look", "entered": "2024-03-01T12:00:00.000Z", "retries": 0,
	  "machine": "arn:aws:states:us-east-1:123456789012:stateMachine:jobs", "machineName": "jobs"}`)
	if x.ARN() != "arn:aws:states:us-east-1:123456789012:execution:jobs:exec-1" || x.Name() != "exec-1" {
		t.Fatalf("ARN %s name %s", x.ARN(), x.Name())
	}
}

func TestHistoryEvents(t *testing.T) {
	res, x, _ := run(t, defTaskARN, `{"job": {"id": "j"}}`, handlers{fnA: constant(`{"count": 1}`)})
	wantSucceeded(t, res, x, `{"pages": 1}`)
	h := x.History()
	for i, e := range h {
		if e.ID != int64(i+1) || e.PreviousID != int64(i) {
			t.Fatalf("event %d has id %d previous %d", i, e.ID, e.PreviousID)
		}
		if !e.Timestamp.Equal(testEpoch) {
			t.Fatalf("event %d at %v", e.ID, e.Timestamp)
		}
	}
	entered := details(t, h[1])
	if h[1].StateName != "Work" || entered["name"] != "Work" || !sameJSON(t, entered["input"].(string), `{"job":{"id":"j"}}`) {
		t.Fatalf("entered event %+v", entered)
	}
	succeeded := details(t, h[len(h)-1])
	if !sameJSON(t, succeeded["output"].(string), `{"pages":1}`) {
		t.Fatalf("ExecutionSucceeded details %v", succeeded)
	}
}

func TestStartValidatesItsArguments(t *testing.T) {
	m := mustLoad(t, defPass)
	inv := handlers{}
	for name, call := range map[string]func() error{
		"empty name":     func() error { _, err := m.Start(context.Background(), "", nil, inv); return err },
		"long name":      func() error { _, err := m.Start(context.Background(), strings.Repeat("n", 81), nil, inv); return err },
		"name with /":    func() error { _, err := m.Start(context.Background(), "a/b", nil, inv); return err },
		"name with text": func() error { _, err := m.Start(context.Background(), "a b", nil, inv); return err },
		"input not JSON": func() error { _, err := m.Start(context.Background(), "x", []byte(`{`), inv); return err },
		"input too big": func() error {
			_, err := m.Start(context.Background(), "x", []byte(`{"a":`+bigString+`}`), inv)
			return err
		},
		"no invoker": func() error { _, err := m.Start(context.Background(), "x", nil, nil); return err },
	} {
		if call() == nil {
			t.Errorf("%s: Start accepted it", name)
		}
	}
	// An empty input is {} as with StartExecution.
	res, x, _ := runMachine(t, mustLoad(t, `{"StartAt":"A","States":{"A":{"Type":"Succeed"}}}`), ``, nil)
	wantSucceeded(t, res, x, `{}`)
}

func TestStartIgnoresCancellationOfItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	m := mustLoad(t, defTimeoutDuringWait)
	x, err := m.Start(ctx, "detached", nil, handlers{}, WithClock(NewInstantClock(testEpoch)))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	res, err := x.Wait(wctx)
	if err != nil || res.Status != StatusTimedOut {
		t.Fatalf("got %+v, %v; want the execution to run on to its own end", res, err)
	}
}

var defRunaway = asl("runaway", `{
  "StartAt": "Again",
  "States": {
    "Again": {"Type": "Pass", "Next": "Loop"},
    "Loop": {"Type": "Choice", "Choices": [{"Variable": "$.stop", "IsPresent": true, "Next": "Done"}], "Default": "Again"},
    "Done": {"Type": "Succeed"}
  }
}`)

func TestHistoryQuotaEndsARunawayLoop(t *testing.T) {
	res, x, _ := run(t, defRunaway, `{}`, nil)
	wantFailed(t, res, x, ErrorRuntime)
	if n := len(x.History()); n != maxHistoryEvents+1 {
		t.Fatalf("%d events", n)
	}
}

func TestConcurrentExecutionsOnOneMachine(t *testing.T) {
	m := mustLoad(t, defParallel)
	inv := handlers{fnA: echo}
	const n = 32
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			x, err := m.Start(context.Background(), fmt.Sprintf("run-%d", i), []byte(fmt.Sprintf(`{"n": %d}`, i)), inv, WithClock(NewInstantClock(testEpoch)))
			if err != nil {
				errs <- err
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := x.Wait(ctx)
			if err != nil {
				errs <- err
				return
			}
			want := fmt.Sprintf(`{"n": %d, "both": {"first": {"n": %d}, "second": %d}}`, i, i, i)
			if res.Status != StatusSucceeded || !sameJSON(t, string(res.Output), want) {
				errs <- fmt.Errorf("run %d: %s %s", i, res.Status, res.Output)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestRealClockSleepHonoursItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := (realClock{}).Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on a cancelled context: %v", err)
	}
	if err := (realClock{}).Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("Sleep: %v", err)
	}
}
