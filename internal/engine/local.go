// Package engine starts and stops deep-research executions: on this machine
// with the local ASL engine running the phase handlers in-process, or on AWS
// with Step Functions. Both run statemachine/deep-research.asl.json; the API
// sees one Executor interface.
package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambda/messages"

	"github.com/sandstep/sandstep/internal/asl"
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
	Clock       asl.Clock
	Logger      *slog.Logger
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
	var opts []asl.StartOption
	if l.opts.Clock != nil {
		opts = append(opts, asl.WithClock(l.opts.Clock))
	}
	opts = append(opts, asl.WithLogger(l.log.With("job_id", jobID)))
	x, err := l.machine.Start(context.WithoutCancel(ctx), jobID, input, l.opts.Invoker, opts...)
	if err != nil {
		return "", err
	}
	l.execs[jobID] = x
	l.wg.Add(1)
	go l.watch(x)
	return x.ARN(), nil
}

// watch does for an ended execution what the template's status-change rule
// does in AWS: executions that no Catch finished get their cleanup.
func (l *Local) watch(x *asl.Execution) {
	defer l.wg.Done()
	res, _ := x.Wait(context.Background())
	l.log.Info("execution ended", "job_id", x.Name(), "status", res.Status, "error", res.Error)
	switch res.Status {
	case asl.StatusAborted, asl.StatusTimedOut, asl.StatusFailed:
	default:
		return
	}
	if l.opts.StatusChangeFunction == "" {
		return
	}
	ev, _ := json.Marshal(map[string]any{
		"version":     "0",
		"source":      "aws.states",
		"detail-type": "Step Functions Execution Status Change",
		"time":        res.StopDate.UTC().Format(time.RFC3339),
		"detail": map[string]any{
			"executionArn":    x.ARN(),
			"stateMachineArn": l.machine.ARN(),
			"name":            x.Name(),
			"status":          string(res.Status),
			"startDate":       res.StartDate.UnixMilli(),
			"stopDate":        res.StopDate.UnixMilli(),
			"error":           res.Error,
			"cause":           res.Cause,
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := l.opts.Invoker.Invoke(ctx, LocalARN(l.opts.StatusChangeFunction), ev); err != nil {
		l.log.Error("status-change cleanup failed", "job_id", x.Name(), "err", err)
	}
}

// Cancel stops the job's execution if it is still running after the grace
// period; phases normally end it sooner by failing with JobCancelled.
func (l *Local) Cancel(ctx context.Context, jobID, executionID string) error {
	l.mu.Lock()
	x, ok := l.execs[jobID]
	if !ok || l.closed {
		l.mu.Unlock()
		return nil
	}
	l.wg.Add(1)
	l.mu.Unlock()
	go func() {
		defer l.wg.Done()
		t := time.NewTimer(l.opts.CancelGrace)
		defer t.Stop()
		select {
		case <-x.Done():
		case <-t.C:
			l.log.Warn("cancelled job still running after grace period: stopping its execution", "job_id", jobID)
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

// SubstitutionTargets turns template DefinitionSubstitutions values of the
// form "XFunction.Arn" (from !GetAtt) into logical ids.
func SubstitutionTargets(subs map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(subs))
	for ph, v := range subs {
		id, ok := strings.CutSuffix(v, ".Arn")
		if !ok || id == "" {
			return nil, fmt.Errorf("substitution %s = %q: the local engine maps only !GetAtt <Function>.Arn", ph, v)
		}
		out[ph] = id
	}
	return out, nil
}
