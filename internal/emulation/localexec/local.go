// Package localexec runs deep-research executions on this machine: the ASL
// interpreter (internal/emulation/asl) runs statemachine/deep-research.asl.json
// and calls the phase handlers in-process, where AWS runs the same definition
// on Step Functions (internal/service/engine). The API sees one Executor
// interface; only the local stack links this package, so no Lambda carries
// the interpreter.
package localexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambda/messages"

	"github.com/sandstep/sandstep/internal/emulation/asl"
	"github.com/sandstep/sandstep/internal/service/store"
)

// LocalARN is the function ARN the local engine gives a template function.
func LocalARN(logicalID string) string {
	return "arn:aws:lambda:local:000000000000:function:" + logicalID
}

// Functions maps a template function's logical id (DiscoverFunction) to its
// handler, a function aws-lambda-go accepts (func(ctx, In) (Out, error)).
type Functions map[string]any

// Invoker calls handlers exactly as the Lambda runtime does: through
// aws-lambda-go's reflection wrapper, so JSON decoding and error naming are
// the same in both hosts.
type Invoker struct {
	handlers map[string]lambda.Handler
}

// NewInvoker wraps fns.
func NewInvoker(fns Functions) *Invoker {
	inv := &Invoker{handlers: make(map[string]lambda.Handler, len(fns))}
	for id, fn := range fns {
		inv.handlers[LocalARN(id)] = lambda.NewHandler(fn)
	}
	return inv
}

// Invoke implements asl.Invoker.
func (inv *Invoker) Invoke(ctx context.Context, arn string, payload []byte) ([]byte, error) {
	h, ok := inv.handlers[arn]
	if !ok {
		return nil, messages.InvokeResponse_Error{Type: "Lambda.ResourceNotFoundException", Message: "no local handler for " + arn}
	}
	return h.Invoke(ctx, payload)
}

// Has reports whether the invoker serves arn.
func (inv *Invoker) Has(arn string) bool { _, ok := inv.handlers[arn]; return ok }

// LocalOptions configure a Local executor.
type LocalOptions struct {
	// Definition is the state machine definition (ASL JSON).
	Definition []byte
	// Substitutions maps each ${Placeholder} of the definition to the
	// logical id of the template function it stands for, as the template's
	// DefinitionSubstitutions do with !GetAtt X.Arn.
	Substitutions map[string]string
	Name          string
	// Invoker runs the Task states. Tests may wrap it to inject faults.
	Invoker asl.Invoker
	// StatusChangeFunction is the logical id of the function that the
	// template's EventBridge rule invokes when an execution ends ABORTED,
	// TIMED_OUT or FAILED; the local engine invokes it the same way.
	StatusChangeFunction string
	// CancelGrace is how long a cancelled job may take to stop on its own
	// before its execution is stopped. Default 30 s.
	CancelGrace time.Duration
	// Store, when set, keeps a checkpoint of every execution at each state
	// that does work, so that Recover in a new process resumes what this
	// one left running (see durable.go). Nil keeps executions in memory.
	Store *store.Store
	// Siblings names the other state machines whose executions other
	// Local executors of this process checkpoint to the same store:
	// Recover leaves their records to them.
	Siblings []string
	Clock    asl.Clock
	Logger   *slog.Logger
}

// Local runs executions in this process.
type Local struct {
	opts    LocalOptions
	machine *asl.Machine
	log     *slog.Logger

	mu     sync.Mutex
	execs  map[string]*asl.Execution
	closed bool
	wg     sync.WaitGroup
}

// NewLocal loads the definition; every placeholder must map to a function
// the invoker serves, so a template and a handler table that disagree fail
// here, not in the middle of a job.
func NewLocal(opts LocalOptions) (*Local, error) {
	subs := make(map[string]string, len(opts.Substitutions))
	for ph, id := range opts.Substitutions {
		arn := LocalARN(id)
		if inv, ok := opts.Invoker.(interface{ Has(string) bool }); ok && !inv.Has(arn) {
			return nil, fmt.Errorf("state machine placeholder ${%s}: no local handler for function %s", ph, id)
		}
		subs[ph] = arn
	}
	if opts.Name == "" {
		opts.Name = "DeepResearchStateMachine"
	}
	m, err := asl.Load(opts.Definition, asl.LoadOptions{Substitutions: subs, Name: opts.Name})
	if err != nil {
		return nil, err
	}
	if opts.CancelGrace <= 0 {
		opts.CancelGrace = 30 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Local{opts: opts, machine: m, log: log, execs: map[string]*asl.Execution{}}, nil
}

// ErrClosed is returned by Start after Shutdown.
var ErrClosed = errors.New("engine is shut down")

// Start begins the execution named jobID; a second call for the same job
// returns the first execution's ARN.
func (l *Local) Start(ctx context.Context, jobID string, input []byte) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return "", ErrClosed
	}
	if x, ok := l.execs[jobID]; ok {
		return x.ARN(), nil
	}
	j := l.newJournal(jobID, store.ExecutionRecord{})
	x, err := l.machine.Start(context.WithoutCancel(ctx), jobID, input, l.opts.Invoker, l.startOptions(jobID, j)...)
	if err != nil {
		return "", err
	}
	l.track(x, j)
	return x.ARN(), nil
}

func (l *Local) startOptions(jobID string, j *journal) []asl.StartOption {
	var opts []asl.StartOption
	if l.opts.Clock != nil {
		opts = append(opts, asl.WithClock(l.opts.Clock))
	}
	if j != nil {
		opts = append(opts, asl.WithCheckpoints(j.checkpoint))
	}
	return append(opts, asl.WithLogger(l.log.With("job_key", jobID)))
}

// track registers a started or resumed execution; the caller holds l.mu.
func (l *Local) track(x *asl.Execution, j *journal) {
	l.execs[x.Name()] = x
	l.wg.Add(1)
	go l.watch(x, j)
}

// watch does for an ended execution what the template's status-change rule
// does in AWS: executions that no Catch finished get their cleanup. Then
// the execution's checkpoint goes.
func (l *Local) watch(x *asl.Execution, j *journal) {
	defer l.wg.Done()
	res, _ := x.Wait(context.Background())
	l.log.Info("execution ended", "job_key", x.Name(), "status", res.Status, "error", res.Error)
	l.ended(j, x.Name(), res)
}

// statusChange invokes the status-change function with the event
// EventBridge sends for an execution that ended ABORTED, TIMED_OUT or
// FAILED (other statuses need nothing). It reports whether the function
// ran without error.
func (l *Local) statusChange(name string, res asl.Result) bool {
	switch res.Status {
	case asl.StatusAborted, asl.StatusTimedOut, asl.StatusFailed:
	default:
		return true
	}
	if l.opts.StatusChangeFunction == "" {
		return true
	}
	ev, _ := json.Marshal(map[string]any{
		"version":     "0",
		"source":      "aws.states",
		"detail-type": "Step Functions Execution Status Change",
		"time":        res.StopDate.UTC().Format(time.RFC3339),
		"detail": map[string]any{
			"executionArn":    l.machine.ExecutionARN(name),
			"stateMachineArn": l.machine.ARN(),
			"name":            name,
			"status":          string(res.Status),
			"startDate":       res.StartDate.UnixMilli(),
			"stopDate":        res.StopDate.UnixMilli(),
			"error":           res.Error,
			"cause":           res.Cause,
		},
	})
	// EventBridge invokes its target asynchronously, and Lambda retries a
	// failed asynchronous invocation twice; so does this.
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		_, err := l.opts.Invoker.Invoke(ctx, LocalARN(l.opts.StatusChangeFunction), ev)
		cancel()
		if err == nil {
			return true
		}
		if attempt == statusChangeRetries {
			l.log.Error("status-change cleanup failed", "job_key", name, "attempts", attempt+1, "err", err)
			return false
		}
		l.log.Warn("status-change cleanup failed; retrying", "job_key", name, "err", err)
		time.Sleep(statusChangeDelay << attempt)
	}
}

// statusChangeRetries and statusChangeDelay shape the retries of the
// status-change invocation (Lambda waits minutes between them; a local
// server need not).
const (
	statusChangeRetries = 2
	statusChangeDelay   = time.Second
)

// Cancel stops the job's execution if it is still running after the grace
// period; phases normally end it sooner by failing with JobCancelled. A job
// whose execution is not running here (it ended, or was lost with the
// process that ran it) gets its cleanup at once, as the status-change rule
// would run it: the job ends cancelled and its sandboxes are terminated.
func (l *Local) Cancel(ctx context.Context, jobID, executionID string) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	x, ok := l.execs[jobID]
	l.wg.Add(1)
	l.mu.Unlock()
	if !ok || x.Status() != asl.StatusRunning {
		go func() {
			defer l.wg.Done()
			l.cleanupGone(jobID, "the job was cancelled and its execution is not running")
		}()
		return nil
	}
	go func() {
		defer l.wg.Done()
		t := time.NewTimer(l.opts.CancelGrace)
		defer t.Stop()
		select {
		case <-x.Done():
		case <-t.C:
			l.log.Warn("cancelled job still running after grace period: stopping its execution", "job_key", jobID)
			_ = x.Stop("JobCancelled", "the job was cancelled and did not stop within the grace period")
		}
	}()
	return nil
}

// Execution returns the job's execution, for its status and history.
func (l *Local) Execution(jobID string) (*asl.Execution, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	x, ok := l.execs[jobID]
	return x, ok
}

// Shutdown stops every running execution (their cleanups then run, as the
// status-change rule would run them) and waits for all of it, bounded by ctx.
func (l *Local) Shutdown(ctx context.Context) error {
	l.mu.Lock()
	l.closed = true
	running := make([]*asl.Execution, 0, len(l.execs))
	for _, x := range l.execs {
		if x.Status() == asl.StatusRunning {
			running = append(running, x)
		}
	}
	l.mu.Unlock()
	for _, x := range running {
		_ = x.Stop("Shutdown", "the local server is shutting down")
	}
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("shutdown: %d executions still ending: %w", len(running), ctx.Err())
	}
}
