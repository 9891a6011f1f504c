package asl

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"
)

// errCancelled ends a line of control whose context was cancelled: the
// execution was stopped or timed out, or a sibling branch or iteration
// failed. It is never reported.
var errCancelled = &failure{Error: "asl.Cancelled", terminal: true}

// maxDelay bounds a computed retry interval: nothing waits longer than a
// Standard workflow may run.
const maxDelay = 366 * 24 * time.Hour

func (x *Execution) runProgram(ctx context.Context, p *program, input any, th *thread) (any, *failure) {
	return x.runStates(ctx, p, p.startAt, input, th, nil)
}

// runStates runs p from the named state; resume, when set, restores that
// first state's visit. The top level reports its boundaries as checkpoints.
func (x *Execution) runStates(ctx context.Context, p *program, name string, input any, th *thread, resume *resumeState) (any, *failure) {
	root := p == x.m.root
	for {
		if ctx.Err() != nil {
			return nil, errCancelled
		}
		out, next, f := x.runState(ctx, p.states[name], input, th, root, resume)
		resume = nil
		if f != nil {
			return nil, f
		}
		if next == "" {
			return out, nil
		}
		if root {
			_ = x.checkpoint(CheckpointExited, p.states[next], out, time.Time{}, nil, 0)
		}
		input, name = out, next
	}
}

// stateRun is one visit of a state.
type stateRun struct {
	x          *Execution
	st         *state
	th         *thread
	root       bool // a top-level state: its boundaries are checkpoints
	input      any
	entered    time.Time
	enteredID  int64
	retryCount int64
	// retryCounts restores the retriers' counters of a resumed visit.
	retryCounts []int64
}

func (r *stateRun) contextObject(mapItem map[string]any) map[string]any {
	co := map[string]any{
		"Execution":    r.x.context["Execution"],
		"StateMachine": r.x.context["StateMachine"],
		"State": map[string]any{
			"Name":        r.st.name,
			"EnteredTime": formatTime(r.entered),
			"RetryCount":  r.retryCount,
		},
	}
	if mapItem != nil {
		co["Map"] = map[string]any{"Item": mapItem}
	}
	return co
}

func (x *Execution) runState(ctx context.Context, st *state, input any, th *thread, root bool, resume *resumeState) (any, string, *failure) {
	r := &stateRun{x: x, st: st, th: th, root: root, input: input, entered: x.clock.Now()}
	if resume != nil {
		if !resume.entered.IsZero() {
			r.entered = resume.entered
		}
		r.retryCount, r.retryCounts = resume.retryCount, resume.retryCounts
	}
	if !x.emit(th, enteredEvent(st.typ), st.name, map[string]any{
		"name":         st.name,
		"input":        mustJSON(input),
		"inputDetails": map[string]any{"truncated": false},
	}) {
		return nil, "", errCancelled
	}
	r.enteredID = th.prev
	if root {
		_ = x.checkpoint(CheckpointEntered, st, input, r.entered, r.retryCounts, r.retryCount)
	}
	var (
		out  any
		next string
		f    *failure
	)
	switch st.typ {
	case typePass:
		out, next, f = r.pass()
	case typeTask:
		out, next, f = r.task(ctx)
	case typeChoice:
		out, next, f = r.choice()
	case typeWait:
		out, next, f = r.wait(ctx)
	case typeSucceed:
		out, next, f = r.succeed()
	case typeFail:
		f = r.fail()
	case typeParallel:
		out, next, f = r.parallel(ctx)
	case typeMap:
		out, next, f = r.mapState(ctx)
	}
	if f != nil {
		if f.Error == ErrorRuntime && f.terminal && !f.located {
			f.Cause = fmt.Sprintf("An error occurred while executing the state '%s' (entered at the event id #%d). %s", st.name, r.enteredID, f.Cause)
			f.located = true
		}
		return nil, "", f
	}
	encoded, err := encodeJSON(out)
	if err != nil {
		return nil, "", runtimeFailure("the state's output does not encode as JSON: %v", err)
	}
	if len(encoded) > MaxPayloadBytes {
		return nil, "", sizeFailure(st.name, true)
	}
	if !x.emit(th, exitedEvent(st.typ), st.name, map[string]any{
		"name":          st.name,
		"output":        string(encoded),
		"outputDetails": map[string]any{"truncated": false},
	}) {
		return nil, "", errCancelled
	}
	return out, next, nil
}

// sizeFailure is States.DataLimitExceeded. An oversized task result is a
// task failure that Retry and Catch see (States.ALL included, as the
// service behaves); an oversized state input or output ends the execution.
func sizeFailure(name string, terminal bool) *failure {
	return &failure{
		Error:    ErrorDataLimitExceeded,
		Cause:    fmt.Sprintf("The state/task '%s' returned a result with a size exceeding the maximum number of bytes service limit.", name),
		terminal: terminal,
	}
}

func checkSize(name string, v any) *failure {
	b, err := encodeJSON(v)
	if err != nil {
		return runtimeFailure("the value does not encode as JSON: %v", err)
	}
	if len(b) > MaxPayloadBytes {
		return sizeFailure(name, true)
	}
	return nil
}

func applyInputPath(op optPath, input, co any) (any, *failure) {
	switch {
	case op.isNull:
		return map[string]any{}, nil
	case op.p == nil:
		return input, nil
	}
	v, ok := op.p.get(input, co)
	if !ok {
		return nil, runtimeFailure("Invalid path '%s' : No results for path: %s", op.p.src, op.p.bracketString())
	}
	return v, nil
}

func applyResultPath(op optPath, input, result any) (any, *failure) {
	switch {
	case op.isNull:
		return input, nil
	case op.p == nil:
		return result, nil
	}
	out, err := op.p.set(input, result)
	if err != nil {
		return nil, runtimeFailure("Unable to apply ReferencePath %s to input %s", op.p.src, mustJSON(input))
	}
	return out, nil
}

// finishResult applies ResultSelector, ResultPath and OutputPath to a
// successful result.
func (r *stateRun) finishResult(result any, co map[string]any) (any, *failure) {
	var f *failure
	if r.st.resultSelector != nil {
		if result, f = r.st.resultSelector.eval(result, co); f != nil {
			return nil, f
		}
	}
	out, f := applyResultPath(r.st.resultPath, r.input, result)
	if f != nil {
		return nil, f
	}
	return applyInputPath(r.st.outputPath, out, co)
}

// caught builds the output a catcher hands on: the error output placed in
// the state's input at the catcher's ResultPath. OutputPath does not apply.
func (r *stateRun) caught(c *catcher, f *failure) (any, string, *failure) {
	out, rf := applyResultPath(c.resultPath, r.input, f.output())
	if rf != nil {
		return nil, "", rf
	}
	return out, c.next, nil
}

func (r *stateRun) pass() (any, string, *failure) {
	co := r.contextObject(nil)
	eff, f := applyInputPath(r.st.inputPath, r.input, co)
	if f != nil {
		return nil, "", f
	}
	if r.st.parameters != nil {
		if eff, f = r.st.parameters.eval(eff, co); f != nil {
			return nil, "", f
		}
	}
	result := eff
	if r.st.hasResult {
		result = r.st.result
	}
	out, f := applyResultPath(r.st.resultPath, r.input, result)
	if f != nil {
		return nil, "", f
	}
	out, f = applyInputPath(r.st.outputPath, out, co)
	return out, r.st.next, f
}

func (r *stateRun) succeed() (any, string, *failure) {
	co := r.contextObject(nil)
	eff, f := applyInputPath(r.st.inputPath, r.input, co)
	if f != nil {
		return nil, "", f
	}
	out, f := applyInputPath(r.st.outputPath, eff, co)
	return out, "", f
}

func (r *stateRun) fail() *failure {
	resolve := func(field string, d *dynamicString) (string, *failure) {
		co := r.contextObject(nil)
		var v any
		if d.call != nil {
			var err error
			if v, err = evalIntrinsic(d.call, r.input, co); err != nil {
				return "", runtimeFailure("The function '%s' for the field '%s' failed: %v", d.call.name, field, err)
			}
		} else {
			var ok bool
			if v, ok = d.path.get(r.input, co); !ok {
				return "", runtimeFailure("The JSONPath '%s' specified for the field '%s' could not be found in the input '%s'", d.src, field, mustJSON(r.input))
			}
		}
		s, ok := v.(string)
		if !ok {
			return "", runtimeFailure("The value of the field '%s' must be a string, got %s", field, mustJSON(v))
		}
		return s, nil
	}
	out := &failure{}
	switch {
	case r.st.errorName != nil:
		out.Error = *r.st.errorName
	case r.st.errorValue != nil:
		s, f := resolve("ErrorPath", r.st.errorValue)
		if f != nil {
			return f
		}
		out.Error = s
	}
	switch {
	case r.st.cause != nil:
		out.Cause = *r.st.cause
	case r.st.causeValue != nil:
		s, f := resolve("CausePath", r.st.causeValue)
		if f != nil {
			return f
		}
		out.Cause = s
	}
	return out
}

func (r *stateRun) choice() (any, string, *failure) {
	co := r.contextObject(nil)
	eff, f := applyInputPath(r.st.inputPath, r.input, co)
	if f != nil {
		return nil, "", f
	}
	next := ""
	for _, rule := range r.st.choices {
		ok, f := rule.eval(eff, co)
		if f != nil {
			return nil, "", f
		}
		if ok {
			next = rule.next
			break
		}
	}
	if next == "" {
		if r.st.defaultNext == "" {
			return nil, "", &failure{Error: ErrorNoChoiceMatched, Cause: fmt.Sprintf("No choice rule of state '%s' matched its input and it has no Default.", r.st.name)}
		}
		next = r.st.defaultNext
	}
	out, f := applyInputPath(r.st.outputPath, eff, co)
	return out, next, f
}

func (r *stateRun) wait(ctx context.Context) (any, string, *failure) {
	co := r.contextObject(nil)
	eff, f := applyInputPath(r.st.inputPath, r.input, co)
	if f != nil {
		return nil, "", f
	}
	var d time.Duration
	switch st := r.st; {
	case st.seconds != nil:
		d = time.Duration(*st.seconds) * time.Second
	case st.secondsPath != nil:
		v, ok := st.secondsPath.get(eff, co)
		if !ok {
			return nil, "", runtimeFailure("The SecondsPath parameter does not reference an input value: %s", st.secondsPath.src)
		}
		n, ok := toInteger(v)
		if !ok {
			return nil, "", runtimeFailure("The SecondsPath parameter cannot be parsed as a long value: %s == %s", st.secondsPath.src, mustJSON(v))
		}
		if n < 0 {
			return nil, "", runtimeFailure("The SecondsPath parameter references a negative value: %s == %d", st.secondsPath.src, n)
		}
		if n > maxSeconds {
			return nil, "", runtimeFailure("Wait state delay is too long.")
		}
		d = time.Duration(n) * time.Second
	case st.timestamp != nil:
		d = st.timestamp.Sub(r.x.clock.Now())
	case st.timestampPath != nil:
		v, ok := st.timestampPath.get(eff, co)
		if !ok {
			return nil, "", runtimeFailure("The TimestampPath parameter does not reference an input value: %s", st.timestampPath.src)
		}
		s, _ := v.(string)
		t, ok := parseTimestamp(s)
		if !ok {
			return nil, "", runtimeFailure("The TimestampPath parameter does not reference a valid ISO-8601 extended offset date-time format string: %s == %s", st.timestampPath.src, formatValue(v))
		}
		d = t.Sub(r.x.clock.Now())
	}
	if st := r.st; st.seconds != nil || st.secondsPath != nil {
		// A resumed Wait waits only what is left since it was entered.
		d -= r.x.clock.Now().Sub(r.entered)
	}
	if d > 0 && !r.x.sleep(ctx, d) {
		return nil, "", errCancelled
	}
	out, f := applyInputPath(r.st.outputPath, eff, co)
	return out, r.st.next, f
}

// retryCatch runs attempt under the state's Retry and Catch. It returns the
// result, or the failure with the catcher that takes it (nil when none
// does). Each retrier counts its own attempts for this visit of the state.
func (r *stateRun) retryCatch(ctx context.Context, attempt func() (any, *failure)) (any, *catcher, *failure) {
	counts := make([]int64, len(r.st.retry))
	copy(counts, r.retryCounts)
	for {
		res, f := attempt()
		if f == nil {
			return res, nil, nil
		}
		if f.terminal {
			return nil, nil, f
		}
		if i := firstRetrier(r.st.retry, f.Error); i >= 0 && counts[i] < r.st.retry[i].maxAttempts {
			delay := r.st.retry[i].delay(counts[i])
			counts[i]++
			r.retryCount++
			if !r.x.emit(r.th, EventStateRetryScheduled, r.st.name, map[string]any{
				"name":         r.st.name,
				"error":        f.Error,
				"cause":        f.Cause,
				"retrier":      int64(i),
				"attempt":      r.retryCount,
				"delaySeconds": delay.Seconds(),
			}) {
				return nil, nil, errCancelled
			}
			if r.root {
				_ = r.x.checkpoint(CheckpointRetry, r.st, r.input, r.entered, slices.Clone(counts), r.retryCount)
			}
			if !r.x.sleep(ctx, delay) {
				return nil, nil, errCancelled
			}
			continue
		}
		for _, c := range r.st.catch {
			if matchesError(c.errorEquals, f.Error) {
				return nil, c, f
			}
		}
		return nil, nil, f
	}
}

// firstRetrier finds the retrier that handles an error: the first whose
// ErrorEquals matches, even if its attempts are used up.
func firstRetrier(retriers []*retrier, name string) int {
	for i, rt := range retriers {
		if matchesError(rt.errorEquals, name) {
			return i
		}
	}
	return -1
}

// delay is IntervalSeconds × BackoffRate^n, capped at MaxDelaySeconds, and
// with JitterStrategy FULL a uniformly random fraction of that.
func (rt *retrier) delay(n int64) time.Duration {
	d := rt.interval * math.Pow(rt.backoffRate, float64(n))
	if rt.maxDelay > 0 && d > rt.maxDelay {
		d = rt.maxDelay
	}
	if d > maxDelay.Seconds() || math.IsInf(d, 0) {
		d = maxDelay.Seconds()
	}
	if rt.fullJitter {
		d *= rand.Float64()
	}
	return time.Duration(d * float64(time.Second))
}

func (r *stateRun) task(ctx context.Context) (any, string, *failure) {
	timeout := time.Duration(r.st.timeoutSeconds) * time.Second
	if p := r.st.timeoutPath; p != nil {
		v, ok := p.get(r.input, r.contextObject(nil))
		if !ok {
			return nil, "", runtimeFailure("Invalid path '%s' : No results for path: %s", p.src, p.bracketString())
		}
		n, ok := toInteger(v)
		if !ok || n <= 0 || n > maxSeconds {
			return nil, "", runtimeFailure("The TimeoutSecondsPath field refers to value %s which is not a positive integer: %s", mustJSON(v), p.src)
		}
		timeout = time.Duration(n) * time.Second
	}
	res, c, f := r.retryCatch(ctx, func() (any, *failure) {
		// Parameters are built for every attempt, so $$.State.RetryCount
		// tells the function which attempt it is.
		in, f := r.effectiveInput()
		if f != nil {
			return nil, f
		}
		return r.invoke(ctx, in, timeout)
	})
	if c != nil {
		return r.caught(c, f)
	}
	if f != nil {
		return nil, "", f
	}
	out, f := r.finishResult(res, r.contextObject(nil))
	return out, r.st.next, f
}

// effectiveInput applies InputPath and Parameters and checks the size of
// what a Task or Parallel state works on.
func (r *stateRun) effectiveInput() (any, *failure) {
	co := r.contextObject(nil)
	eff, f := applyInputPath(r.st.inputPath, r.input, co)
	if f != nil {
		return nil, f
	}
	if r.st.parameters != nil {
		if eff, f = r.st.parameters.eval(eff, co); f != nil {
			return nil, f
		}
	}
	if f := checkSize(r.st.name, eff); f != nil {
		return nil, f
	}
	return eff, nil
}

type taskEvents struct {
	scheduled, started, succeeded, failed, timedOut EventType
	base                                            map[string]any
}

func (e taskEvents) details(extra map[string]any) map[string]any {
	out := make(map[string]any, len(e.base)+len(extra))
	for k, v := range e.base {
		out[k] = v
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

// invoke runs one attempt of a Task state and records it in the history.
func (r *stateRun) invoke(ctx context.Context, taskInput any, timeout time.Duration) (any, *failure) {
	st := r.st
	fn, payload, resourceName := st.functionARN, taskInput, st.functionARN
	ev := taskEvents{
		scheduled: EventLambdaFunctionScheduled, started: EventLambdaFunctionStarted,
		succeeded: EventLambdaFunctionSucceeded, failed: EventLambdaFunctionFailed, timedOut: EventLambdaFunctionTimedOut,
	}
	scheduled := map[string]any{"resource": fn, "input": mustJSON(taskInput), "inputDetails": map[string]any{"truncated": false}}
	version := "$LATEST"
	if st.lambdaInvoke {
		params, _ := taskInput.(map[string]any)
		name, ok := params["FunctionName"].(string)
		if !ok || name == "" {
			return nil, runtimeFailure("The FunctionName of an arn:aws:states:::lambda:invoke task must be a non-empty string, got %s", mustJSON(params["FunctionName"]))
		}
		if q, has := params["Qualifier"]; has {
			qs, ok := q.(string)
			if !ok || qs == "" {
				return nil, runtimeFailure("The Qualifier of an arn:aws:states:::lambda:invoke task must be a non-empty string, got %s", mustJSON(q))
			}
			name += ":" + qs
			if _, err := strconv.ParseUint(qs, 10, 64); err == nil {
				version = qs
			}
		}
		fn, payload, resourceName = name, params["Payload"], "lambda"
		ev = taskEvents{
			scheduled: EventTaskScheduled, started: EventTaskStarted,
			succeeded: EventTaskSucceeded, failed: EventTaskFailed, timedOut: EventTaskTimedOut,
			base: map[string]any{"resourceType": "lambda", "resource": "invoke"},
		}
		scheduled = ev.details(map[string]any{"region": r.x.m.region, "parameters": mustJSON(taskInput)})
	}
	if timeout > 0 {
		scheduled["timeoutInSeconds"] = int64(timeout / time.Second)
	}
	if !r.x.emit(r.th, ev.scheduled, st.name, scheduled) {
		return nil, errCancelled
	}
	var startedDetails map[string]any
	if ev.base != nil {
		startedDetails = ev.details(nil)
	}
	if !r.x.emit(r.th, ev.started, st.name, startedDetails) {
		return nil, errCancelled
	}

	raw, f := r.call(ctx, fn, []byte(mustJSON(payload)), timeout)
	var result any
	if f == nil {
		result, f = r.taskResult(raw, resourceName, version)
	}
	switch {
	case f == errCancelled:
		return nil, f
	case f != nil && f.Error == ErrorTimeout:
		r.x.emit(r.th, ev.timedOut, st.name, ev.details(map[string]any{"error": f.Error, "cause": f.Cause}))
		return nil, f
	case f != nil:
		r.x.emit(r.th, ev.failed, st.name, ev.details(map[string]any{"error": f.Error, "cause": f.Cause}))
		return nil, f
	}
	if !r.x.emit(r.th, ev.succeeded, st.name, ev.details(map[string]any{
		"output":        mustJSON(result),
		"outputDetails": map[string]any{"truncated": false},
	})) {
		return nil, errCancelled
	}
	return result, nil
}

// taskResult turns a function's response into the task's result: the
// response itself for a Lambda ARN Resource, or the Invoke API's response
// with the function's output as Payload for arn:aws:states:::lambda:invoke.
func (r *stateRun) taskResult(raw []byte, resourceName, version string) (any, *failure) {
	if len(raw) > MaxPayloadBytes {
		return nil, sizeFailure(resourceName, false)
	}
	v, err := decodeJSON(raw)
	if err != nil {
		return nil, runtimeFailure("The Lambda function's response is not JSON: %v", err)
	}
	if !r.st.lambdaInvoke {
		return v, nil
	}
	requestID, _ := fnUUID(nil, nil)
	result := map[string]any{
		"ExecutedVersion": version,
		"Payload":         v,
		"SdkHttpMetadata": map[string]any{
			"HttpHeaders": map[string]any{
				"Connection":             "keep-alive",
				"Content-Length":         strconv.Itoa(len(raw)),
				"Content-Type":           "application/json",
				"Date":                   r.x.clock.Now().UTC().Format(http.TimeFormat),
				"X-Amz-Executed-Version": version,
				"x-amzn-RequestId":       requestID,
			},
			"HttpStatusCode": int64(200),
		},
		"SdkResponseMetadata": map[string]any{"RequestId": requestID},
		"StatusCode":          int64(200),
	}
	b, err := encodeJSON(result)
	if err != nil {
		return nil, runtimeFailure("the task result does not encode as JSON: %v", err)
	}
	if len(b) > MaxPayloadBytes {
		return nil, sizeFailure(resourceName, false)
	}
	return result, nil
}

// call runs the handler on its own goroutine so a timeout or Stop takes
// effect at once even if the handler ignores its context.
func (r *stateRun) call(ctx context.Context, fn string, payload []byte, timeout time.Duration) ([]byte, *failure) {
	tctx, cancel := context.WithCancel(ctx)
	if timeout > 0 {
		tctx, cancel = context.WithTimeout(ctx, timeout)
	}
	defer cancel()
	type reply struct {
		out []byte
		f   *failure
	}
	ch := make(chan reply, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				pcs := make([]uintptr, 32)
				n := runtime.Callers(3, pcs)
				r.x.log.Warn("asl: task handler panicked", "execution", r.x.arn, "state", r.st.name, "function", fn, "panic", fmt.Sprint(v))
				ch <- reply{f: panicFailure(v, pcs[:n])}
			}
		}()
		out, err := r.x.inv.Invoke(tctx, fn, payload)
		if err != nil {
			ch <- reply{f: lambdaFailure(err)}
			return
		}
		ch <- reply{out: out}
	}()
	timedOut := &failure{Error: ErrorTimeout}
	select {
	case rep := <-ch:
		switch {
		case ctx.Err() != nil:
			return nil, errCancelled
		case rep.f != nil && tctx.Err() != nil:
			return nil, timedOut
		}
		return rep.out, rep.f
	case <-tctx.Done():
		if ctx.Err() != nil {
			return nil, errCancelled
		}
		return nil, timedOut
	}
}

func (r *stateRun) parallel(ctx context.Context) (any, string, *failure) {
	res, c, f := r.retryCatch(ctx, func() (any, *failure) {
		in, f := r.effectiveInput()
		if f != nil {
			return nil, f
		}
		return r.parallelAttempt(ctx, in)
	})
	if f != nil && !f.terminal {
		r.x.emit(r.th, EventParallelStateFailed, r.st.name, nil)
	}
	if c != nil {
		return r.caught(c, f)
	}
	if f != nil {
		return nil, "", f
	}
	out, f := r.finishResult(res, r.contextObject(nil))
	return out, r.st.next, f
}

// parallelAttempt runs every branch on its own goroutine. The first branch
// to fail cancels the others, and its error is the state's error.
func (r *stateRun) parallelAttempt(ctx context.Context, input any) (any, *failure) {
	if !r.x.emit(r.th, EventParallelStateStarted, r.st.name, nil) {
		return nil, errCancelled
	}
	startID := r.th.prev
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make([]any, len(r.st.branches))
	var (
		mu    sync.Mutex
		first *failure
		wg    sync.WaitGroup
	)
	for i, b := range r.st.branches {
		wg.Go(func() {
			out, f := r.x.runProgram(bctx, b, input, &thread{prev: startID})
			if f == nil {
				results[i] = out
				return
			}
			if f != errCancelled {
				mu.Lock()
				if first == nil || (f.terminal && !first.terminal) {
					first = f
				}
				mu.Unlock()
			}
			cancel()
		})
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	if ctx.Err() != nil {
		return nil, errCancelled
	}
	if !r.x.emit(r.th, EventParallelStateSucceeded, r.st.name, nil) {
		return nil, errCancelled
	}
	return results, nil
}

// tolerance is a Map state's ToleratedFailureCount and
// ToleratedFailurePercentage; negative means unset.
type tolerance struct {
	set   bool
	count int64
	pct   float64
}

func (t tolerance) exceeded(failed, total int) bool {
	if !t.set {
		return true
	}
	if t.count >= 0 && int64(failed) > t.count {
		return true
	}
	return t.pct >= 0 && float64(failed)*100/float64(total) > t.pct
}

func pathValueText(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return mustJSON(v)
}

func (r *stateRun) mapConfig(eff any, co map[string]any) (int, tolerance, *failure) {
	st := r.st
	limit := st.maxConcurrency
	if p := st.maxConcurrencyPath; p != nil {
		v, ok := p.get(eff, co)
		n, isInt := toInteger(v)
		if !ok || !isInt || n < 0 || n > math.MaxInt32 {
			return 0, tolerance{}, runtimeFailure("The MaxConcurrencyPath field refers to value \"%s\" which is not a valid integer: %s", pathValueText(v), p.src)
		}
		limit = n
	}
	if limit == 0 || limit > maxInlineParallel {
		limit = maxInlineParallel
	}
	tol := tolerance{set: st.hasToleratedFailureConfig, count: -1, pct: -1}
	if st.toleratedCount != nil {
		tol.count = *st.toleratedCount
	}
	if p := st.toleratedCountPath; p != nil {
		v, ok := p.get(eff, co)
		n, isInt := toInteger(v)
		if !ok || !isInt {
			return 0, tolerance{}, runtimeFailure("The ToleratedFailureCountPath field refers to value \"%s\" which is not a valid integer: %s", pathValueText(v), p.src)
		}
		if n < 0 {
			return 0, tolerance{}, runtimeFailure("ToleratedFailureCount cannot be negative.")
		}
		tol.count = n
	}
	if st.toleratedPercentage != nil {
		tol.pct = *st.toleratedPercentage
	}
	if p := st.toleratedPercentagePath; p != nil {
		v, ok := p.get(eff, co)
		pct, isNum := toFloat(v)
		if !ok || !isNum {
			return 0, tolerance{}, runtimeFailure("The ToleratedFailurePercentagePath field refers to value \"%s\" which is not a valid float: %s", pathValueText(v), p.src)
		}
		if pct < 0 || pct > 100 {
			return 0, tolerance{}, runtimeFailure("ToleratedFailurePercentage must be between 0 and 100.")
		}
		tol.pct = pct
	}
	return int(limit), tol, nil
}

func (r *stateRun) mapState(ctx context.Context) (any, string, *failure) {
	co := r.contextObject(nil)
	eff, f := applyInputPath(r.st.inputPath, r.input, co)
	if f != nil {
		return nil, "", f
	}
	items := eff
	if p := r.st.itemsPath; p != nil {
		v, ok := p.get(eff, co)
		if !ok {
			return nil, "", runtimeFailure("Invalid path '%s' : No results for path: %s", p.src, p.bracketString())
		}
		items = v
	}
	arr, ok := items.([]any)
	if !ok {
		return nil, "", runtimeFailure("Map state input must be an array but was: %s", mustJSON(items))
	}
	limit, tol, f := r.mapConfig(eff, co)
	if f != nil {
		return nil, "", f
	}
	res, c, f := r.retryCatch(ctx, func() (any, *failure) { return r.mapAttempt(ctx, eff, arr, limit, tol) })
	if f != nil && !f.terminal {
		r.x.emit(r.th, EventMapStateFailed, r.st.name, nil)
	}
	if c != nil {
		return r.caught(c, f)
	}
	if f != nil {
		return nil, "", f
	}
	out, f := r.finishResult(res, r.contextObject(nil))
	return out, r.st.next, f
}

// mapAttempt runs the item processor once per item, at most limit at a
// time. Without a tolerated-failure setting the first failing iteration
// cancels the rest and its error is the state's; with one, failed items
// leave their error output in the results until the threshold is exceeded.
func (r *stateRun) mapAttempt(ctx context.Context, eff any, items []any, limit int, tol tolerance) (any, *failure) {
	st := r.st
	if !r.x.emit(r.th, EventMapStateStarted, st.name, map[string]any{"length": int64(len(items))}) {
		return nil, errCancelled
	}
	startID := r.th.prev
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make([]any, len(items))
	sem := make(chan struct{}, limit)
	var (
		mu     sync.Mutex
		first  *failure
		failed int
		wg     sync.WaitGroup
	)
	record := func(f *failure) {
		mu.Lock()
		defer mu.Unlock()
		if first == nil || (f.terminal && !first.terminal) {
			first = f
		}
		cancel()
	}
loop:
	for i, item := range items {
		select {
		case sem <- struct{}{}:
		case <-mctx.Done():
			break loop
		}
		wg.Go(func() {
			defer func() { <-sem }()
			th := &thread{prev: startID}
			iter := map[string]any{"index": int64(i), "name": st.name}
			if !r.x.emit(th, EventMapIterationStarted, st.name, iter) {
				return
			}
			in := item
			if st.itemSelector != nil {
				var f *failure
				if in, f = st.itemSelector.eval(eff, r.contextObject(map[string]any{"Index": int64(i), "Value": item})); f != nil {
					record(f)
					return
				}
				if f := checkSize(st.name, in); f != nil {
					record(f)
					return
				}
			}
			out, f := r.x.runProgram(mctx, st.processor, in, th)
			switch {
			case f == errCancelled:
				return
			case f != nil:
				r.x.emit(th, EventMapIterationFailed, st.name, iter)
				mu.Lock()
				failed++
				exceeded := f.terminal || tol.exceeded(failed, len(items))
				if !exceeded {
					results[i] = f.output()
				}
				mu.Unlock()
				if exceeded {
					if tol.set && !f.terminal {
						f = &failure{Error: ErrorExceedToleratedFailureThreshold, Cause: "The specified tolerated failure threshold was exceeded"}
					}
					record(f)
				}
			default:
				results[i] = out
				r.x.emit(th, EventMapIterationSucceeded, st.name, iter)
			}
		})
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	if ctx.Err() != nil {
		return nil, errCancelled
	}
	if !r.x.emit(r.th, EventMapStateSucceeded, st.name, nil) {
		return nil, errCancelled
	}
	return results, nil
}
