package localexec_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/emulation/asl"
	"github.com/sandstep/sandstep/internal/emulation/localexec"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
)

func TestMain(m *testing.M) { os.Exit(testddb.RunTests(m)) }

// definition has the shape that matters: two working states with a Choice
// between them, a Catch into a cleanup Task, a loop.
const definition = `{
  "StartAt": "Prepare",
  "TimeoutSeconds": 3600,
  "States": {
    "Prepare": {"Type": "Task", "Resource": "${Prepare}", "Parameters": {"job_id.$": "$.job_id"}, "ResultPath": "$.prepare",
      "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "CleanupAfterError"}], "Next": "Ready"},
    "Ready": {"Type": "Choice", "Choices": [{"Variable": "$.prepare.ok", "BooleanEquals": true, "Next": "Work"}], "Default": "CleanupAfterError"},
    "Work": {"Type": "Task", "Resource": "${Work}", "Parameters": {"job_id.$": "$.job_id", "round.$": "$.prepare.round"},
      "ResultPath": "$.work", "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "CleanupAfterError"}], "Next": "Cleanup"},
    "Cleanup": {"Type": "Task", "Resource": "${Cleanup}", "Parameters": {"job_id.$": "$.job_id", "outcome": "succeeded"}, "ResultPath": "$.cleanup", "End": true},
    "CleanupAfterError": {"Type": "Task", "Resource": "${Cleanup}", "Parameters": {"job_id.$": "$.job_id", "outcome": "failed"}, "ResultPath": "$.cleanup", "Next": "Failed"},
    "Failed": {"Type": "Fail", "Error": "JobFailed"}
  }
}`

type jobIn struct {
	JobID string `json:"job_id"`
	Round int    `json:"round"`
}

type cleanupIn struct {
	JobID   string `json:"job_id"`
	Outcome string `json:"outcome"`
	Detail  *struct {
		Name   string `json:"name"`
		Status string `json:"status"`
		Error  string `json:"error"`
		Cause  string `json:"cause"`
	} `json:"detail"`
}

// phases are the test's handlers. Work blocks while hold is set, which
// stands for a process that dies in the middle of the task.
type phases struct {
	mu       sync.Mutex
	work     []jobIn
	cleanups []cleanupIn
	hold     chan struct{} // Work waits on it when set
	inWork   chan string
}

func newPhases() *phases { return &phases{inWork: make(chan string, 16)} }

func (p *phases) functions() localexec.Functions {
	return localexec.Functions{
		"Prepare": func(_ context.Context, in jobIn) (map[string]any, error) {
			return map[string]any{"ok": true, "round": 3}, nil
		},
		"Work": func(ctx context.Context, in jobIn) (string, error) {
			p.mu.Lock()
			p.work = append(p.work, in)
			hold := p.hold
			p.mu.Unlock()
			p.inWork <- in.JobID
			if hold != nil {
				select {
				case <-hold:
				case <-ctx.Done():
					return "", ctx.Err()
				}
			}
			return "worked", nil
		},
		"Cleanup": func(_ context.Context, in cleanupIn) (map[string]any, error) {
			p.mu.Lock()
			p.cleanups = append(p.cleanups, in)
			p.mu.Unlock()
			return map[string]any{"status": "done"}, nil
		},
	}
}

func (p *phases) calls() ([]jobIn, []cleanupIn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]jobIn(nil), p.work...), append([]cleanupIn(nil), p.cleanups...)
}

func newLocal(t *testing.T, st *store.Store, p *phases, def string) *localexec.Local {
	t.Helper()
	l, err := localexec.NewLocal(localexec.LocalOptions{
		Definition:           []byte(def),
		Substitutions:        map[string]string{"Prepare": "Prepare", "Work": "Work", "Cleanup": "Cleanup"},
		Name:                 "TestMachine",
		Invoker:              localexec.NewInvoker(p.functions()),
		StatusChangeFunction: "Cleanup",
		CancelGrace:          time.Minute,
		Store:                st,
		Logger:               slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func wait(t *testing.T, l *localexec.Local, name string) asl.Result {
	t.Helper()
	x, ok := l.Execution(name)
	if !ok {
		t.Fatalf("no execution %s", name)
	}
	res, err := x.Wait(ctxFor(t))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

// crashed starts job in a first engine and leaves it inside Work, as a
// process that dies there would: its goroutine stays blocked for the rest
// of the test and writes nothing more.
func crashed(t *testing.T, st *store.Store, job string) *phases {
	t.Helper()
	p := newPhases()
	p.hold = make(chan struct{})
	l := newLocal(t, st, p, definition)
	if _, err := l.Start(ctxFor(t), job, []byte(`{"job_id":"`+job+`"}`)); err != nil {
		t.Fatal(err)
	}
	<-p.inWork
	return p
}

func TestRecoverResumesTheStateInFlight(t *testing.T) {
	env := testddb.ForTests(t)
	st := store.New(env.Client, env.Prefix)
	ctx := ctxFor(t)
	crashed(t, st, "job-1")
	rec, err := st.GetExecution(ctx, "job-1")
	if err != nil {
		t.Fatal(err)
	}
	// The checkpoint is at Work, the state in flight: Ready (a Choice)
	// left none of its own.
	if rec.State != "Work" || rec.Status != store.ExecutionRunning || !strings.Contains(string(rec.StateInput), `"round":3`) {
		t.Fatalf("checkpoint %+v", rec)
	}

	p := newPhases()
	l := newLocal(t, st, p, definition)
	n, err := l.Recover(ctx)
	if err != nil || n != (localexec.Recovered{Resumed: 1}) {
		t.Fatalf("Recover: %+v, %v", n, err)
	}
	res := wait(t, l, "job-1")
	if res.Status != asl.StatusSucceeded || !res.StartDate.Equal(rec.StartTime) {
		t.Fatalf("resumed execution: %+v (started %v)", res, rec.StartTime)
	}
	// Shutdown waits for the bookkeeping after the end.
	if err := l.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	work, cleanups := p.calls()
	if len(work) != 1 || work[0] != (jobIn{JobID: "job-1", Round: 3}) || len(cleanups) != 1 || cleanups[0].Outcome != "succeeded" {
		t.Fatalf("after the resume: work %+v, cleanups %+v", work, cleanups)
	}
	if _, err := st.GetExecution(ctx, "job-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the record of an ended execution: %v", err)
	}
	// A second Recover finds nothing to do.
	if n, err := newLocal(t, st, newPhases(), definition).Recover(ctx); err != nil || n != (localexec.Recovered{}) {
		t.Fatalf("second Recover: %+v, %v", n, err)
	}
}

func TestRecoverFailsWhatCannotResume(t *testing.T) {
	env := testddb.ForTests(t)
	st := store.New(env.Client, env.Prefix)
	ctx := ctxFor(t)
	crashed(t, st, "job-changed")
	p := newPhases()
	changed := strings.Replace(definition, `"TimeoutSeconds": 3600`, `"TimeoutSeconds": 7200`, 1)
	l := newLocal(t, st, p, changed)
	n, err := l.Recover(ctx)
	if err != nil || n != (localexec.Recovered{Failed: 1}) {
		t.Fatalf("Recover: %+v, %v", n, err)
	}
	work, cleanups := p.calls()
	if len(work) != 0 || len(cleanups) != 1 || cleanups[0].Detail == nil {
		t.Fatalf("work %+v, cleanups %+v", work, cleanups)
	}
	d := cleanups[0].Detail
	if d.Name != "job-changed" || d.Status != "FAILED" || d.Error != localexec.ErrorResumeFailed || !strings.Contains(d.Cause, "definition changed") {
		t.Fatalf("status change %+v", d)
	}
	if _, err := st.GetExecution(ctx, "job-changed"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("record after the failed resume: %v", err)
	}
}

func TestRecoverRunsACleanupThatACrashInterrupted(t *testing.T) {
	env := testddb.ForTests(t)
	st := store.New(env.Client, env.Prefix)
	ctx := ctxFor(t)
	// An execution that ended aborted, whose cleanup never ran.
	rec, err := st.PutExecution(ctx, store.ExecutionRecord{
		Name: "job-aborted", StateMachine: "TestMachine", State: "Work", StateInput: []byte(`{}`), Input: []byte(`{}`),
		StartTime: time.Now(), Status: store.ExecutionRunning,
	})
	if err != nil {
		t.Fatal(err)
	}
	rec.Status, rec.Error, rec.StopTime = "ABORTED", "Shutdown", time.Now()
	if _, err := st.PutExecution(ctx, rec); err != nil {
		t.Fatal(err)
	}
	p := newPhases()
	n, err := newLocal(t, st, p, definition).Recover(ctx)
	if err != nil || n != (localexec.Recovered{Cleaned: 1}) {
		t.Fatalf("Recover: %+v, %v", n, err)
	}
	_, cleanups := p.calls()
	if len(cleanups) != 1 || cleanups[0].Detail.Status != "ABORTED" || cleanups[0].Detail.Error != "Shutdown" {
		t.Fatalf("cleanups %+v", cleanups)
	}
	if list, _ := st.ListExecutions(ctx); len(list) != 0 {
		t.Fatalf("records left: %+v", list)
	}
}

func TestCancelOfAJobWithoutAnExecutionRunsItsCleanup(t *testing.T) {
	env := testddb.ForTests(t)
	st := store.New(env.Client, env.Prefix)
	p := newPhases()
	l := newLocal(t, st, p, definition)
	if err := l.Cancel(ctxFor(t), "job-lost", ""); err != nil {
		t.Fatal(err)
	}
	if err := l.Shutdown(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	_, cleanups := p.calls()
	if len(cleanups) != 1 || cleanups[0].Detail == nil || cleanups[0].Detail.Name != "job-lost" || cleanups[0].Detail.Error != localexec.ErrorExecutionGone {
		t.Fatalf("cleanups %+v", cleanups)
	}
}

func TestShutdownLeavesNoRecords(t *testing.T) {
	env := testddb.ForTests(t)
	st := store.New(env.Client, env.Prefix)
	ctx := ctxFor(t)
	p := newPhases()
	p.hold = make(chan struct{})
	l := newLocal(t, st, p, definition)
	for _, id := range []string{"a", "b"} {
		if _, err := l.Start(ctx, id, []byte(`{"job_id":"`+id+`"}`)); err != nil {
			t.Fatal(err)
		}
		<-p.inWork
	}
	running, _ := l.Running(ctx)
	if len(running) != 2 {
		t.Fatalf("running %v", running)
	}
	if err := l.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if list, err := st.ListExecutions(ctx); err != nil || len(list) != 0 {
		t.Fatalf("records after shutdown: %+v, %v", list, err)
	}
	_, cleanups := p.calls()
	if len(cleanups) != 2 {
		t.Fatalf("cleanups %+v", cleanups)
	}
}

func TestStartFailsWithoutItsRecord(t *testing.T) {
	env := testddb.ForTests(t)
	st := store.New(env.Client, env.Prefix)
	ctx := ctxFor(t)
	// Another process's record of the same name.
	if _, err := st.PutExecution(ctx, store.ExecutionRecord{Name: "taken", State: "Work", Status: store.ExecutionRunning, StartTime: time.Now(), StateInput: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	p := newPhases()
	l := newLocal(t, st, p, definition)
	if _, err := l.Start(ctx, "taken", []byte(`{"job_id":"taken"}`)); err == nil || !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Start: %v", err)
	}
	if _, ok := l.Execution("taken"); ok {
		t.Fatal("an execution runs without its record")
	}
}
