package asl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode"
)

// Invoker runs a Lambda function for a Task state. The host maps function
// ARNs (a Lambda ARN Resource, or the FunctionName of an
// arn:aws:states:::lambda:invoke task with ":"+Qualifier appended when one
// is given) to in-process handlers.
//
// A successful call returns the function's JSON response (aws-lambda-go
// handlers encode "no value" as null); anything else, an empty response
// included, is a States.Runtime error. An error is named
// for Retry and Catch as aws-lambda-go names it for Step Functions: return a
// messages.InvokeResponse_Error value to choose the name (Type) and message
// yourself, for instance Type "Lambda.ServiceException" to mimic a service
// failure; any other error is named after its Go type. ctx is cancelled when
// the task times out or the execution is stopped; a call that ignores it is
// abandoned, as Step Functions abandons a running Lambda. A panic is
// recovered and reported as aws-lambda-go reports one: named after the type
// of the panic value, with the stack trace in the cause.
type Invoker interface {
	Invoke(ctx context.Context, functionARN string, payload []byte) ([]byte, error)
}

// Clock is where an execution reads the time and waits: Wait states, Retry
// intervals, timestamps in the history and the context object, and the
// execution's TimeoutSeconds as seen by those waits.
type Clock interface {
	Now() time.Time
	// Sleep waits for d or until ctx is done, returning ctx's error then.
	Sleep(ctx context.Context, d time.Duration) error
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// InstantClock is a Clock for tests: Sleep returns at once, moving the
// clock's time forward by the requested duration, and records it.
type InstantClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

// NewInstantClock returns an InstantClock reading start.
func NewInstantClock(start time.Time) *InstantClock { return &InstantClock{now: start} }

// Now returns the clock's time.
func (c *InstantClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Sleep records d and advances the clock by it without waiting.
func (c *InstantClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(d)
	return nil
}

// Sleeps returns the durations requested so far, in order.
func (c *InstantClock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// Status is an execution's status, as Step Functions names it.
type Status string

const (
	StatusRunning   Status = "RUNNING"
	StatusSucceeded Status = "SUCCEEDED"
	StatusFailed    Status = "FAILED"
	StatusTimedOut  Status = "TIMED_OUT"
	StatusAborted   Status = "ABORTED"
)

// Result is how an execution ended.
type Result struct {
	Status Status
	// Output is the execution's output when it SUCCEEDED.
	Output json.RawMessage
	// Error and Cause explain a FAILED, TIMED_OUT or ABORTED execution.
	Error string
	Cause string
	// StartDate and StopDate are read from the execution's Clock.
	StartDate time.Time
	StopDate  time.Time
}

// StartOption configures one execution.
type StartOption func(*startConfig)

type startConfig struct {
	clock      Clock
	roleARN    string
	logger     *slog.Logger
	checkpoint func(Checkpoint) error
}

func defaultLogger() *slog.Logger { return slog.Default() }

// WithClock makes the execution read time and wait through c.
func WithClock(c Clock) StartOption { return func(s *startConfig) { s.clock = c } }

// WithRoleARN sets $$.Execution.RoleArn.
func WithRoleARN(arn string) StartOption { return func(s *startConfig) { s.roleARN = arn } }

// WithLogger receives the execution's history events at debug level and
// recovered handler panics at warn level. Default: slog.Default().
func WithLogger(l *slog.Logger) StartOption { return func(s *startConfig) { s.logger = l } }

// maxHistoryEvents is the Standard workflow's history quota; reaching it
// fails the execution, which also bounds a runaway Choice loop.
const maxHistoryEvents = 25000

// Execution is one run of a Machine. Its methods are safe for concurrent use.
type Execution struct {
	m        *Machine
	inv      Invoker
	clock    Clock
	log      *slog.Logger
	name     string
	arn      string
	input    any
	rawInput json.RawMessage
	roleARN  string
	start    time.Time
	context  map[string]any // $$.Execution and $$.StateMachine, fixed for the run
	hook     func(Checkpoint) error

	ctx      context.Context
	cancel   context.CancelFunc
	deadline time.Time // on clock; zero without TimeoutSeconds
	timer    *time.Timer
	done     chan struct{}

	mu     sync.Mutex
	events []HistoryEvent
	result Result
}

// Start begins an execution named name (its ARN ends in it; the service's
// naming rules apply) with input (JSON; empty means {}). It returns at once;
// the execution runs on its own goroutine, and Parallel branches and Map
// iterations on theirs. ctx only supplies values: cancelling it does not
// stop the execution; Stop does.
func (m *Machine) Start(ctx context.Context, name string, input []byte, inv Invoker, opts ...StartOption) (*Execution, error) {
	cfg := startConfig{clock: realClock{}, logger: defaultLogger()}
	for _, o := range opts {
		o(&cfg)
	}
	if inv == nil {
		return nil, errors.New("asl: Start needs an Invoker")
	}
	if err := checkExecutionName(name); err != nil {
		return nil, err
	}
	if len(strings.TrimSpace(string(input))) == 0 {
		input = []byte("{}")
	}
	if len(input) > MaxPayloadBytes {
		return nil, fmt.Errorf("asl: execution input has %d bytes, more than the %d allowed", len(input), MaxPayloadBytes)
	}
	in, err := decodeJSON(input)
	if err != nil {
		return nil, fmt.Errorf("asl: execution input is not JSON: %w", err)
	}
	x := m.newExecution(ctx, name, input, in, inv, cfg, cfg.clock.Now())
	start := m.root.states[m.root.startAt]
	if err := x.checkpoint(CheckpointStarted, start, in, x.start, nil, 0); err != nil {
		x.cancel()
		return nil, fmt.Errorf("asl: start %s: %w", name, err)
	}
	th := &thread{}
	x.emit(th, EventExecutionStarted, "", map[string]any{
		"input":        string(input),
		"inputDetails": map[string]any{"truncated": false},
		"roleArn":      cfg.roleARN,
	})
	if m.timeout > 0 {
		x.deadline = x.start.Add(m.timeout)
		x.mu.Lock()
		x.timer = time.AfterFunc(m.timeout, x.timeOut)
		x.mu.Unlock()
	}
	go x.run(th)
	return x, nil
}

// ExecutionARN returns the ARN of the machine's execution named name.
func (m *Machine) ExecutionARN(name string) string {
	return strings.Replace(m.arn, ":stateMachine:", ":execution:", 1) + ":" + name
}

// newExecution builds a running execution that started at start.
func (m *Machine) newExecution(ctx context.Context, name string, raw json.RawMessage, in any, inv Invoker, cfg startConfig, start time.Time) *Execution {
	x := &Execution{
		m:        m,
		inv:      inv,
		clock:    cfg.clock,
		log:      cfg.logger,
		name:     name,
		arn:      m.ExecutionARN(name),
		input:    in,
		rawInput: raw,
		roleARN:  cfg.roleARN,
		start:    start,
		hook:     cfg.checkpoint,
		done:     make(chan struct{}),
	}
	x.result = Result{Status: StatusRunning, StartDate: start}
	x.context = map[string]any{
		"Execution": map[string]any{
			"Id":           x.arn,
			"Name":         name,
			"Input":        in,
			"StartTime":    formatTime(start),
			"RoleArn":      cfg.roleARN,
			"RedriveCount": int64(0),
		},
		"StateMachine": map[string]any{"Id": m.arn, "Name": m.name},
	}
	x.ctx, x.cancel = context.WithCancel(context.WithoutCancel(ctx))
	return x
}

// checkExecutionName applies StartExecution's rules: 1 to 80 characters,
// none of them whitespace, control characters or <>{}[]?*"#%\^|~`$&,;:/.
func checkExecutionName(name string) error {
	if n := len([]rune(name)); n == 0 || n > 80 {
		return fmt.Errorf("asl: execution name %q must have 1 to 80 characters", name)
	}
	for _, r := range name {
		if unicode.IsSpace(r) || unicode.IsControl(r) || strings.ContainsRune("<>{}[]?*\"#%\\^|~`$&,;:/", r) {
			return fmt.Errorf("asl: execution name %q contains %q, which is not allowed", name, r)
		}
	}
	return nil
}

func formatTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// ARN returns the execution's ARN ($$.Execution.Id).
func (x *Execution) ARN() string { return x.arn }

// Name returns the execution's name.
func (x *Execution) Name() string { return x.name }

// Done is closed when the execution ends.
func (x *Execution) Done() <-chan struct{} { return x.done }

// Status returns the current status.
func (x *Execution) Status() Status {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.result.Status
}

// Wait blocks until the execution ends or ctx is done.
func (x *Execution) Wait(ctx context.Context) (Result, error) {
	select {
	case <-x.done:
		x.mu.Lock()
		defer x.mu.Unlock()
		return x.result, nil
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

// Stop aborts a running execution, as StopExecution does: the status becomes
// ABORTED at once with the given error and cause (both optional), and the
// context of every running task is cancelled. It returns ErrNotRunning if
// the execution had already ended.
func (x *Execution) Stop(errName, cause string) error {
	if !x.finish(StatusAborted, nil, errName, cause) {
		return ErrNotRunning
	}
	return nil
}

// History returns the events so far, oldest first.
func (x *Execution) History() []HistoryEvent {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]HistoryEvent(nil), x.events...)
}

func (x *Execution) timeOut() {
	x.finish(StatusTimedOut, nil, ErrorTimeout, "The execution ran longer than the state machine's TimeoutSeconds.")
}

// finish records the outcome once; later outcomes (a task finishing after
// Stop, say) are ignored. Running work is cancelled.
func (x *Execution) finish(status Status, output []byte, errName, cause string) bool {
	x.mu.Lock()
	if x.result.Status != StatusRunning {
		x.mu.Unlock()
		return false
	}
	var typ EventType
	var details map[string]any
	switch status {
	case StatusSucceeded:
		typ = EventExecutionSucceeded
		details = map[string]any{"output": string(output), "outputDetails": map[string]any{"truncated": false}}
	case StatusFailed:
		typ = EventExecutionFailed
	case StatusTimedOut:
		typ = EventExecutionTimedOut
	case StatusAborted:
		typ = EventExecutionAborted
	}
	if status != StatusSucceeded {
		details = map[string]any{"error": errName, "cause": cause}
	}
	prev := int64(0)
	if n := len(x.events); n > 0 {
		prev = x.events[n-1].ID
	}
	x.appendLocked(prev, typ, "", details)
	x.result.Status = status
	x.result.Output = output
	x.result.Error = errName
	x.result.Cause = cause
	x.result.StopDate = x.clock.Now()
	close(x.done)
	timer := x.timer
	x.mu.Unlock()
	if timer != nil {
		timer.Stop()
	}
	x.cancel()
	x.log.Debug("asl: execution ended", "execution", x.arn, "status", status, "error", errName)
	return true
}

func (x *Execution) run(th *thread) {
	x.runFrom(th, x.m.root.startAt, x.input, nil)
}

// runFrom runs the top level from the named state and records the outcome.
func (x *Execution) runFrom(th *thread, name string, input any, resume *resumeState) {
	out, f := x.runStates(x.ctx, x.m.root, name, input, th, resume)
	switch {
	case f == errCancelled:
	case f != nil:
		x.finish(StatusFailed, nil, f.Error, f.Cause)
	default:
		b, err := encodeJSON(out)
		if err != nil {
			x.finish(StatusFailed, nil, ErrorRuntime, err.Error())
			return
		}
		x.finish(StatusSucceeded, b, "", "")
	}
}

// sleep waits on the execution's clock. A wait that would outlast the
// execution's TimeoutSeconds ends it TIMED_OUT at the deadline instead, so
// a test clock sees the same outcome as real time.
func (x *Execution) sleep(ctx context.Context, d time.Duration) bool {
	if !x.deadline.IsZero() {
		if remaining := x.deadline.Sub(x.clock.Now()); d >= remaining {
			if remaining > 0 && x.clock.Sleep(ctx, remaining) != nil {
				return false
			}
			x.timeOut()
			return false
		}
	}
	return x.clock.Sleep(ctx, d) == nil
}
