package asl

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Step Functions does not lose an execution when a host dies; a host of this
// engine that must not either records each execution's checkpoints and,
// after a restart, resumes it with Machine.Resume from the last one. Only
// the top level is checkpointed: a Parallel or Map state that was running
// is resumed whole, every branch or iteration from its start.

// CheckpointKind says at which boundary a checkpoint was taken.
type CheckpointKind string

const (
	// CheckpointStarted: the execution is about to enter its StartAt
	// state. Start fails if the hook returns an error for it.
	CheckpointStarted CheckpointKind = "Started"
	// CheckpointEntered: a top-level state was entered.
	CheckpointEntered CheckpointKind = "StateEntered"
	// CheckpointRetry: a retry of the state was scheduled.
	CheckpointRetry CheckpointKind = "RetryScheduled"
	// CheckpointExited: a top-level state finished and the execution goes
	// on to the next one. The end of the execution is not a checkpoint:
	// Wait reports it.
	CheckpointExited CheckpointKind = "StateExited"
)

// ResumePoint is where an execution can be taken up again: the execution as
// it started (its context object) and the top-level state to run next, with
// that state's input and how far its retries got. A resumed Task runs again
// from its input, as Lambda's at-least-once delivery may run it twice
// anyway.
type ResumePoint struct {
	// Name, Input, StartTime and RoleARN restore $$.Execution.
	Name      string
	Input     json.RawMessage
	StartTime time.Time
	RoleARN   string
	// State is the top-level state to run, with StateInput as its input.
	State      string
	StateInput json.RawMessage
	// EnteredTime is when the state was entered ($$.State.EnteredTime; a
	// Wait state waits only what is left); zero means when it resumes.
	EnteredTime time.Time
	// RetryCounts holds, per retrier of the state's Retry, the attempts it
	// already used; RetryCount is $$.State.RetryCount.
	RetryCounts []int64
	RetryCount  int64
}

// Checkpoint is reported to the hook of WithCheckpoints.
type Checkpoint struct {
	Kind CheckpointKind
	// At is where a resume would take the execution up after this
	// checkpoint: the entered state itself, or the next state after an
	// exit.
	At ResumePoint
	// StateType is the type of At.State ("Task", "Choice"...): a host may
	// keep only the checkpoints before states that do work.
	StateType string
}

// WithCheckpoints has the execution call hook at every boundary of its top
// level, on the execution's goroutine, before it goes on. The hook's error
// for CheckpointStarted makes Start fail; for other kinds the execution goes
// on (a crash then resumes from an older checkpoint, re-running more).
func WithCheckpoints(hook func(Checkpoint) error) StartOption {
	return func(s *startConfig) { s.checkpoint = hook }
}

// ErrCannotResume is wrapped by Resume's errors: the resume point does not
// fit the machine (its state is missing, its retry counters do not match
// the state's Retry) or is not valid.
var ErrCannotResume = errors.New("asl: the execution cannot resume")

// EventExecutionResumed starts the history of a resumed execution; this
// engine's own, like StateRetryScheduled. Its details name the state the
// execution resumes at and that state's input.
const EventExecutionResumed EventType = "ExecutionResumed"

// Fingerprint identifies the machine's definition after substitution: a
// resume point taken under another fingerprint may not fit this machine.
func (m *Machine) Fingerprint() string { return m.fingerprint }

func fingerprint(text string) string {
	sum := sha256.Sum256([]byte(text))
	return hex.EncodeToString(sum[:])
}

// Resume takes up an execution at rp, as a new Execution of m with the
// same name, ARN and context object. It runs on its own goroutine, like
// Start; the machine's TimeoutSeconds counts from rp.StartTime, so an
// execution past it ends TIMED_OUT at once.
func (m *Machine) Resume(ctx context.Context, rp ResumePoint, inv Invoker, opts ...StartOption) (*Execution, error) {
	cfg := startConfig{clock: realClock{}, roleARN: rp.RoleARN}
	cfg.logger = defaultLogger()
	for _, o := range opts {
		o(&cfg)
	}
	if inv == nil {
		return nil, errors.New("asl: Resume needs an Invoker")
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrCannotResume, fmt.Sprintf(format, args...))
	}
	if err := checkExecutionName(rp.Name); err != nil {
		return nil, bad("%v", err)
	}
	if rp.StartTime.IsZero() {
		return nil, bad("the resume point has no start time")
	}
	st, ok := m.root.states[rp.State]
	if !ok {
		return nil, bad("state %q is not a top-level state of state machine %s", rp.State, m.name)
	}
	if n := len(rp.RetryCounts); n != 0 && n != len(st.retry) {
		return nil, bad("state %q has %d retriers, the resume point counts %d", rp.State, len(st.retry), n)
	}
	for _, c := range rp.RetryCounts {
		if c < 0 {
			return nil, bad("negative retry counter")
		}
	}
	rawInput := rp.Input
	if len(strings.TrimSpace(string(rawInput))) == 0 {
		rawInput = []byte("{}")
	}
	in, err := decodeJSON(rawInput)
	if err != nil {
		return nil, bad("execution input is not JSON: %v", err)
	}
	stateInput, err := decodeJSON(rp.StateInput)
	if err != nil {
		return nil, bad("the input of state %q is not JSON: %v", rp.State, err)
	}
	x := m.newExecution(ctx, rp.Name, rawInput, in, inv, cfg, rp.StartTime)
	th := &thread{}
	x.emit(th, EventExecutionResumed, rp.State, map[string]any{
		"name":         rp.State,
		"input":        string(rp.StateInput),
		"inputDetails": map[string]any{"truncated": false},
		"retryCount":   rp.RetryCount,
	})
	if m.timeout > 0 {
		x.deadline = rp.StartTime.Add(m.timeout)
		remaining := x.deadline.Sub(x.clock.Now())
		if remaining <= 0 {
			x.timeOut()
			return x, nil
		}
		x.mu.Lock()
		x.timer = time.AfterFunc(remaining, x.timeOut)
		x.mu.Unlock()
	}
	resume := &resumeState{entered: rp.EnteredTime, retryCount: rp.RetryCount, retryCounts: rp.RetryCounts}
	go x.runFrom(th, rp.State, stateInput, resume)
	return x, nil
}

// resumeState restores the first state a resumed execution runs.
type resumeState struct {
	entered     time.Time
	retryCount  int64
	retryCounts []int64
}

// checkpoint reports a boundary to the hook, if any. Only the Started
// checkpoint's error counts.
func (x *Execution) checkpoint(kind CheckpointKind, st *state, input any, entered time.Time, counts []int64, retryCount int64) error {
	if x.hook == nil {
		return nil
	}
	return x.hook(Checkpoint{
		Kind: kind,
		At: ResumePoint{
			Name:        x.name,
			Input:       x.rawInput,
			StartTime:   x.start,
			RoleARN:     x.roleARN,
			State:       st.name,
			StateInput:  json.RawMessage(mustJSON(input)),
			EnteredTime: entered,
			RetryCounts: counts,
			RetryCount:  retryCount,
		},
		StateType: string(st.typ),
	})
}
