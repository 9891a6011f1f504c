package sessions

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sandstep/sandstep/internal/service/store"
)

// Runs and session events are kept by the store (in the sessions table);
// here they have the shapes the API shows.

// RunStatus is where a run is.
type RunStatus = store.RunStatus

const (
	RunRunning   = store.RunRunning
	RunSucceeded = store.RunSucceeded
	RunFailed    = store.RunFailed
)

// Run is one run of code in a session.
type Run struct {
	ID        string
	Tenant    string
	SessionID string
	Status    RunStatus
	Language  string
	// Stateful runs in the session's long-lived interpreter.
	Stateful   bool
	Timeout    time.Duration
	CreatedAt  time.Time
	FinishedAt time.Time
	// Code is kept only while a run waits for a remote executor.
	Code string
	// Result is set once the run ended.
	Result *Result
}

// Result is how a run ended, as the API shows it. Stdout, Stderr, Error
// and Result are redacted of every dependency secret.
type Result struct {
	Success bool `json:"success"`
	// Result is the JSON value of the code's last expression, null when
	// there is none.
	Result     json.RawMessage `json:"result"`
	Error      *string         `json:"error"`
	Stdout     string          `json:"stdout"`
	Stderr     string          `json:"stderr"`
	ExitCode   int             `json:"exit_code"`
	DurationMS int64           `json:"duration_ms"`
	TimedOut   bool            `json:"timed_out,omitempty"`
	// OOM: the code was killed because the sandbox ran out of memory.
	OOM             bool `json:"oom,omitempty"`
	StdoutTruncated bool `json:"stdout_truncated,omitempty"`
	StderrTruncated bool `json:"stderr_truncated,omitempty"`
	ResultTruncated bool `json:"result_truncated,omitempty"`
	// Interpreter is there for a stateful run that reached its
	// interpreter.
	Interpreter *Interpreter `json:"interpreter,omitempty"`
}

// Event is something that happened to a session that its client should
// know of without asking: a sandbox started or closed, the session is
// about to expire, it expired.
type Event struct {
	Seq  int64           `json:"seq"`
	Type string          `json:"type"`
	At   time.Time       `json:"at"`
	Data json.RawMessage `json:"data,omitempty"`
}

// Event types.
const (
	EventCreated        = "session.created"
	EventSandboxStarted = "sandbox.started"
	EventSandboxClosed  = "sandbox.closed"
	EventExpiring       = "session.expiring"
	EventExpired        = "session.expired"
	EventDeleted        = "session.deleted"
)

// event is one event to append.
type event struct {
	typ  string
	data any
	// final: the session is gone, so its events expire after the
	// retention; revive: it starts (again), so they no longer do.
	final, revive bool
	// once, when set, writes the event only if the last event written
	// with a once value had another one.
	once string
}

// runRecord is run as the store keeps it.
func runRecord(run Run) (store.SessionRun, error) {
	rec := store.SessionRun{
		ID: run.ID, Tenant: run.Tenant, SessionID: run.SessionID, Status: run.Status, Language: run.Language,
		Stateful: run.Stateful, Timeout: run.Timeout, CreatedAt: run.CreatedAt, FinishedAt: run.FinishedAt, Code: run.Code,
	}
	if run.Result != nil {
		b, err := json.Marshal(run.Result)
		if err != nil {
			return rec, fmt.Errorf("encode run %s: %w", run.ID, err)
		}
		rec.Result = b
	}
	return rec, nil
}

// putPending records a run that has not ended, unless its record exists
// (the run may have ended first). It reports whether it wrote.
func (s *Service) putPending(ctx context.Context, key string, run Run) (bool, error) {
	rec, err := runRecord(run)
	if err != nil {
		return false, err
	}
	return s.st.PutPendingRun(ctx, key, rec)
}

// putFinished records a run's end, replacing its pending record and
// dropping the code.
func (s *Service) putFinished(ctx context.Context, key string, run Run) error {
	run.Code = ""
	rec, err := runRecord(run)
	if err != nil {
		return err
	}
	return s.st.PutFinishedRun(ctx, key, rec)
}

// getRun reads a run; store.ErrNotFound when there is none.
func (s *Service) getRun(ctx context.Context, key, runID string) (Run, error) {
	rec, err := s.st.GetSessionRun(ctx, key, runID)
	if err != nil {
		return Run{}, err
	}
	run := Run{
		ID: rec.ID, Tenant: rec.Tenant, SessionID: rec.SessionID, Status: rec.Status, Language: rec.Language, Stateful: rec.Stateful,
		Timeout: rec.Timeout, CreatedAt: rec.CreatedAt, FinishedAt: rec.FinishedAt, Code: rec.Code,
	}
	if len(rec.Result) > 0 {
		run.Result = &Result{}
		if err := json.Unmarshal(rec.Result, run.Result); err != nil {
			return Run{}, fmt.Errorf("decode run %s: %w", runID, err)
		}
	}
	return run, nil
}

// appendEvent adds an event to a session's list. It reports whether it
// wrote (see event.once).
func (s *Service) appendEvent(ctx context.Context, key string, at time.Time, e event) (bool, error) {
	ne := store.NewSessionEvent{Type: e.typ, Final: e.final, Revive: e.revive, Once: e.once}
	if e.data != nil {
		b, err := json.Marshal(e.data)
		if err != nil {
			return false, fmt.Errorf("encode event %s: %w", e.typ, err)
		}
		ne.Data = b
	}
	return s.st.AppendSessionEvent(ctx, key, at, ne)
}

// events returns a session's events with seq > after, oldest first.
func (s *Service) events(ctx context.Context, key string, after int64) ([]Event, error) {
	recs, err := s.st.SessionEvents(ctx, key, after)
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	evs := make([]Event, len(recs))
	for i, r := range recs {
		evs[i] = Event{Seq: r.Seq, Type: r.Type, At: r.At, Data: r.Data}
	}
	return evs, nil
}
