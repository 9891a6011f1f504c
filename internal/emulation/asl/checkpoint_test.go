package asl

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda/messages"
)

var defDurable = asl("durable", `{
  "StartAt": "First",
  "TimeoutSeconds": 3600,
  "States": {
    "First": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:a",
      "Parameters": {"n.$": "$.n", "started.$": "$$.Execution.StartTime", "name.$": "$$.Execution.Name"},
      "ResultPath": "$.first", "Next": "Check"},
    "Check": {"Type": "Choice", "Choices": [{"Variable": "$.first.ok", "BooleanEquals": true, "Next": "Second"}], "Default": "Failed"},
    "Second": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:b",
      "Parameters": {"n.$": "$.n", "attempt.$": "$$.State.RetryCount", "entered.$": "$$.State.EnteredTime", "input.$": "$$.Execution.Input"},
      "Retry": [{"ErrorEquals": ["Lambda.ServiceException"], "IntervalSeconds": 1, "MaxAttempts": 3, "BackoffRate": 2}],
      "ResultPath": "$.second", "Next": "Fan"},
    "Fan": {"Type": "Parallel", "ResultPath": "$.fan", "Next": "Done", "Branches": [
      {"StartAt": "Inner", "States": {"Inner": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:c", "End": true}}}
    ]},
    "Done": {"Type": "Succeed"},
    "Failed": {"Type": "Fail", "Error": "NotOK"}
  }
}`)

// checkpoints collects what an execution reports.
type checkpoints struct {
	mu  sync.Mutex
	got []Checkpoint
	err error // returned for Started
}

func (c *checkpoints) hook(cp Checkpoint) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, cp)
	if cp.Kind == CheckpointStarted {
		return c.err
	}
	return nil
}

func (c *checkpoints) all() []Checkpoint {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

func (c *checkpoints) last(kind CheckpointKind) Checkpoint {
	all := c.all()
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].Kind == kind {
			return all[i]
		}
	}
	return Checkpoint{}
}

func TestCheckpointsAtEveryTopLevelBoundary(t *testing.T) {
	calls := 0
	flaky := func(_ context.Context, _ []byte) ([]byte, error) {
		calls++
		if calls == 1 {
			return nil, messages.InvokeResponse_Error{Type: "Lambda.ServiceException", Message: "try again"}
		}
		return []byte(`"b"`), nil
	}
	var cps checkpoints
	res, x, _ := run(t, defDurable, `{"n": 1}`, handlers{fnA: constant(`{"ok": true}`), fnB: flaky, fnC: constant(`"c"`)}, WithCheckpoints(cps.hook))
	wantSucceeded(t, res, x, `{"n":1,"first":{"ok":true},"second":"b","fan":["c"]}`)

	var got []string
	for _, cp := range cps.all() {
		got = append(got, string(cp.Kind)+" "+cp.At.State+" "+cp.StateType)
		if cp.At.Name != "exec-1" || !cp.At.StartTime.Equal(testEpoch) || !sameJSON(t, string(cp.At.Input), `{"n": 1}`) {
			t.Errorf("checkpoint %+v does not carry the execution", cp)
		}
	}
	want := []string{
		"Started First Task",
		"StateEntered First Task",
		"StateExited Check Choice",
		"StateEntered Check Choice",
		"StateExited Second Task",
		"StateEntered Second Task",
		"RetryScheduled Second Task",
		"StateExited Fan Parallel",
		"StateEntered Fan Parallel",
		"StateExited Done Succeed",
		"StateEntered Done Succeed",
	}
	// The Parallel's branch state Inner reports nothing: only the top
	// level is checkpointed.
	if !slices.Equal(got, want) {
		t.Fatalf("checkpoints:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	retry := cps.last(CheckpointRetry)
	if !slices.Equal(retry.At.RetryCounts, []int64{1}) || retry.At.RetryCount != 1 || !sameJSON(t, string(retry.At.StateInput), `{"n":1,"first":{"ok":true}}`) {
		t.Errorf("retry checkpoint %+v", retry.At)
	}
	exited := cps.all()[4]
	if !sameJSON(t, string(exited.At.StateInput), `{"n":1,"first":{"ok":true}}`) || !exited.At.EnteredTime.IsZero() {
		t.Errorf("exit checkpoint %+v: want the next state's input and no entered time", exited.At)
	}
}

func TestStartFailsWhenTheStartedCheckpointFails(t *testing.T) {
	cps := checkpoints{err: errors.New("store down")}
	called := false
	m := mustLoad(t, defDurable)
	_, err := m.Start(context.Background(), "exec-1", []byte(`{"n": 1}`), handlers{fnA: func(context.Context, []byte) ([]byte, error) {
		called = true
		return nil, nil
	}}, WithCheckpoints(cps.hook), WithLogger(slog.New(slog.DiscardHandler)))
	if err == nil || !strings.Contains(err.Error(), "store down") {
		t.Fatalf("Start: %v", err)
	}
	// The execution never began: no goroutine can run the task later.
	if called {
		t.Fatal("a task ran although the execution could not be recorded")
	}
}

// crashIn runs defDurable until the task at arn is invoked, then abandons
// the execution as a dead host would and returns the checkpoints so far.
func crashIn(t *testing.T, arn string, inv handlers) (*checkpoints, *InstantClock) {
	t.Helper()
	var cps checkpoints
	inside := make(chan struct{})
	blocked := handlers{}
	for k, v := range inv {
		blocked[k] = v
	}
	blocked[arn] = func(ctx context.Context, _ []byte) ([]byte, error) {
		close(inside)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	clock := NewInstantClock(testEpoch)
	m := mustLoad(t, defDurable)
	x, err := m.Start(context.Background(), "exec-1", []byte(`{"n": 7}`), blocked, WithClock(clock), WithCheckpoints(cps.hook), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-inside:
	case <-time.After(30 * time.Second):
		t.Fatalf("never reached %s; history:%s", arn, historyString(x))
	}
	_ = x.Stop("Crash", "the host died")
	return &cps, clock
}

func TestResumeRerunsTheTaskInFlightWithTheContextRestored(t *testing.T) {
	var firstCalls int
	inv := handlers{
		fnA: func(context.Context, []byte) ([]byte, error) { firstCalls++; return []byte(`{"ok": true}`), nil },
		fnC: constant(`"c"`),
	}
	cps, clock := crashIn(t, fnB, inv)
	at := cps.last(CheckpointEntered).At
	if at.State != "Second" {
		t.Fatalf("last entered checkpoint: %+v", at)
	}
	// The host comes back an hour minus a minute later.
	clock.Sleep(context.Background(), 59*time.Minute)
	var rec recorder
	inv[fnB] = rec.wrap(constant(`"b"`))
	m := mustLoad(t, defDurable)
	x, err := m.Resume(context.Background(), at, inv, WithClock(clock), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	if x.ARN() != "arn:aws:states:local:000000000000:execution:StateMachine:exec-1" {
		t.Errorf("ARN %s", x.ARN())
	}
	res, err := x.Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	wantSucceeded(t, res, x, `{"n":7,"first":{"ok":true},"second":"b","fan":["c"]}`)
	if firstCalls != 1 {
		t.Errorf("First ran %d times; a resume must not run completed states again", firstCalls)
	}
	got := rec.got()
	if len(got) != 1 || !sameJSON(t, got[0], `{"n":7,"attempt":0,"entered":"2024-03-01T12:00:00.000Z","input":{"n":7}}`) {
		t.Errorf("the resumed task got %v", got)
	}
	if !res.StartDate.Equal(testEpoch) {
		t.Errorf("start date %v, want the original %v", res.StartDate, testEpoch)
	}
	if h := x.History(); h[0].Type != EventExecutionResumed || h[0].StateName != "Second" {
		t.Errorf("history:%s", historyString(x))
	}
}

func TestResumeKeepsTheRetryCounters(t *testing.T) {
	fail := func(context.Context, []byte) ([]byte, error) {
		return nil, messages.InvokeResponse_Error{Type: "Lambda.ServiceException", Message: "down"}
	}
	// Two of the three retries are used up before the crash.
	var cps checkpoints
	calls := 0
	inv := handlers{fnA: constant(`{"ok": true}`), fnC: constant(`"c"`)}
	crashed := make(chan struct{})
	inv[fnB] = func(ctx context.Context, p []byte) ([]byte, error) {
		calls++
		if calls <= 2 {
			return fail(ctx, p)
		}
		close(crashed)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	clock := NewInstantClock(testEpoch)
	m := mustLoad(t, defDurable)
	x, err := m.Start(context.Background(), "exec-1", []byte(`{"n": 7}`), inv, WithClock(clock), WithCheckpoints(cps.hook), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	<-crashed
	_ = x.Stop("Crash", "")
	at := cps.last(CheckpointRetry).At
	if !slices.Equal(at.RetryCounts, []int64{2}) || at.RetryCount != 2 {
		t.Fatalf("retry checkpoint %+v", at)
	}
	var rec recorder
	inv[fnB] = rec.wrap(fail)
	x, err = m.Resume(context.Background(), at, inv, WithClock(clock), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	res, _ := x.Wait(context.Background())
	wantFailed(t, res, x, "Lambda.ServiceException")
	// One attempt is left after the resume's own: 3 retries in all.
	if n := len(rec.got()); n != 2 {
		t.Fatalf("%d attempts after the resume, want 2 (the resumed one and the last retry)", n)
	}
	if !strings.Contains(rec.got()[1], `"attempt":3`) {
		t.Errorf("last attempt: %s", rec.got()[1])
	}
}

var defDurableWait = asl("durable-wait", `{
  "StartAt": "Pause",
  "States": {"Pause": {"Type": "Wait", "Seconds": 600, "End": true}}
}`)

func TestResumedWaitWaitsWhatIsLeft(t *testing.T) {
	m := mustLoad(t, defDurableWait)
	clock := NewInstantClock(testEpoch.Add(4 * time.Minute))
	x, err := m.Resume(context.Background(), ResumePoint{
		Name: "w", StartTime: testEpoch, State: "Pause", StateInput: json.RawMessage(`{}`), EnteredTime: testEpoch,
	}, handlers{}, WithClock(clock), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	res, _ := x.Wait(context.Background())
	wantSucceeded(t, res, x, `{}`)
	if got := clock.Sleeps(); !slices.Equal(got, []time.Duration{6 * time.Minute}) {
		t.Fatalf("slept %v, want the 6 minutes left", got)
	}
}

func TestResumePastTheTimeoutTimesOut(t *testing.T) {
	m := mustLoad(t, defDurable)
	called := false
	clock := NewInstantClock(testEpoch.Add(2 * time.Hour))
	x, err := m.Resume(context.Background(), ResumePoint{
		Name: "late", StartTime: testEpoch, State: "Second", StateInput: json.RawMessage(`{"n": 1}`),
	}, handlers{fnB: func(context.Context, []byte) ([]byte, error) { called = true; return nil, nil }}, WithClock(clock), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	res, _ := x.Wait(context.Background())
	if res.Status != StatusTimedOut || called {
		t.Fatalf("status %s, task called %v; history:%s", res.Status, called, historyString(x))
	}
}

func TestResumeRefusesAPointThatDoesNotFit(t *testing.T) {
	m := mustLoad(t, defDurable)
	ok := ResumePoint{Name: "x", StartTime: testEpoch, State: "Second", StateInput: json.RawMessage(`{}`)}
	for name, mod := range map[string]func(*ResumePoint){
		"missing state":    func(rp *ResumePoint) { rp.State = "Gone" },
		"branch state":     func(rp *ResumePoint) { rp.State = "Inner" },
		"retry counters":   func(rp *ResumePoint) { rp.RetryCounts = []int64{1, 2} },
		"negative counter": func(rp *ResumePoint) { rp.RetryCounts = []int64{-1} },
		"state input":      func(rp *ResumePoint) { rp.StateInput = json.RawMessage(`{"broken`) },
		"execution input":  func(rp *ResumePoint) { rp.Input = json.RawMessage(`[1,`) },
		"no start time":    func(rp *ResumePoint) { rp.StartTime = time.Time{} },
		"invalid name":     func(rp *ResumePoint) { rp.Name = "a b" },
	} {
		rp := ok
		mod(&rp)
		if _, err := m.Resume(context.Background(), rp, handlers{}); !errors.Is(err, ErrCannotResume) {
			t.Errorf("%s: %v, want ErrCannotResume", name, err)
		}
	}
}

func TestFingerprintFollowsTheDefinition(t *testing.T) {
	a := mustLoad(t, defDurable)
	b := mustLoad(t, defDurable)
	c := mustLoad(t, strings.Replace(defDurable, `"MaxAttempts": 3`, `"MaxAttempts": 4`, 1))
	if a.Fingerprint() != b.Fingerprint() || a.Fingerprint() == c.Fingerprint() || len(a.Fingerprint()) != 64 {
		t.Fatalf("fingerprints %s %s %s", a.Fingerprint(), b.Fingerprint(), c.Fingerprint())
	}
}
