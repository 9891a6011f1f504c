package asl

import (
	"encoding/json"
	"log/slog"
	"time"
)

// HistoryEvent is one entry of an execution's history, shaped like Step
// Functions' GetExecutionHistory events.
type HistoryEvent struct {
	ID         int64
	PreviousID int64
	Timestamp  time.Time
	Type       EventType
	// StateName is the state the event belongs to, empty for execution events.
	StateName string
	// Details is the event's details object as Step Functions names its
	// fields (for example {"name","input","inputDetails"} for a
	// StateEntered event); input and output are JSON text in a string.
	Details json.RawMessage
}

// EventType names a history event. All but StateRetryScheduled are Step
// Functions' own event types.
type EventType string

const (
	EventExecutionStarted   EventType = "ExecutionStarted"
	EventExecutionSucceeded EventType = "ExecutionSucceeded"
	EventExecutionFailed    EventType = "ExecutionFailed"
	EventExecutionAborted   EventType = "ExecutionAborted"
	EventExecutionTimedOut  EventType = "ExecutionTimedOut"

	EventPassStateEntered     EventType = "PassStateEntered"
	EventPassStateExited      EventType = "PassStateExited"
	EventTaskStateEntered     EventType = "TaskStateEntered"
	EventTaskStateExited      EventType = "TaskStateExited"
	EventChoiceStateEntered   EventType = "ChoiceStateEntered"
	EventChoiceStateExited    EventType = "ChoiceStateExited"
	EventWaitStateEntered     EventType = "WaitStateEntered"
	EventWaitStateExited      EventType = "WaitStateExited"
	EventSucceedStateEntered  EventType = "SucceedStateEntered"
	EventSucceedStateExited   EventType = "SucceedStateExited"
	EventFailStateEntered     EventType = "FailStateEntered"
	EventParallelStateEntered EventType = "ParallelStateEntered"
	EventParallelStateExited  EventType = "ParallelStateExited"
	EventMapStateEntered      EventType = "MapStateEntered"
	EventMapStateExited       EventType = "MapStateExited"

	EventParallelStateStarted   EventType = "ParallelStateStarted"
	EventParallelStateSucceeded EventType = "ParallelStateSucceeded"
	EventParallelStateFailed    EventType = "ParallelStateFailed"
	EventMapStateStarted        EventType = "MapStateStarted"
	EventMapStateSucceeded      EventType = "MapStateSucceeded"
	EventMapStateFailed         EventType = "MapStateFailed"
	EventMapIterationStarted    EventType = "MapIterationStarted"
	EventMapIterationSucceeded  EventType = "MapIterationSucceeded"
	EventMapIterationFailed     EventType = "MapIterationFailed"

	// Events of an arn:aws:states:::lambda:invoke task.
	EventTaskScheduled EventType = "TaskScheduled"
	EventTaskStarted   EventType = "TaskStarted"
	EventTaskSucceeded EventType = "TaskSucceeded"
	EventTaskFailed    EventType = "TaskFailed"
	EventTaskTimedOut  EventType = "TaskTimedOut"

	// Events of a task whose Resource is a Lambda function ARN.
	EventLambdaFunctionScheduled EventType = "LambdaFunctionScheduled"
	EventLambdaFunctionStarted   EventType = "LambdaFunctionStarted"
	EventLambdaFunctionSucceeded EventType = "LambdaFunctionSucceeded"
	EventLambdaFunctionFailed    EventType = "LambdaFunctionFailed"
	EventLambdaFunctionTimedOut  EventType = "LambdaFunctionTimedOut"

	// EventStateRetryScheduled is this engine's own: Step Functions shows a
	// retry only as the task being scheduled again. Its details name the
	// error retried, the retrier (its index in Retry), the attempt number and
	// the delay before it in seconds.
	EventStateRetryScheduled EventType = "StateRetryScheduled"
)

func enteredEvent(t stateType) EventType { return EventType(string(t) + "StateEntered") }
func exitedEvent(t stateType) EventType  { return EventType(string(t) + "StateExited") }

// thread follows one line of control (the execution, a Parallel branch, a
// Map iteration) so each event's PreviousID points at the event before it on
// the same line, as in Step Functions' histories.
type thread struct {
	prev int64
}

// emit appends an event unless the execution has already ended. It returns
// false when the history quota is reached, after failing the execution.
func (x *Execution) emit(th *thread, typ EventType, stateName string, details map[string]any) bool {
	x.mu.Lock()
	if x.result.Status != StatusRunning {
		x.mu.Unlock()
		return false
	}
	if len(x.events) >= maxHistoryEvents {
		x.mu.Unlock()
		x.finish(StatusFailed, nil, ErrorRuntime, "The execution reached the maximum number of history events (25000).")
		return false
	}
	ev := x.appendLocked(th.prev, typ, stateName, details)
	th.prev = ev.ID
	x.mu.Unlock()
	if x.log.Enabled(x.ctx, slog.LevelDebug) {
		x.log.Debug("asl: event", "execution", x.arn, "id", ev.ID, "type", string(typ), "state", stateName, "details", string(ev.Details))
	}
	return true
}

func (x *Execution) appendLocked(prev int64, typ EventType, stateName string, details map[string]any) HistoryEvent {
	ev := HistoryEvent{
		ID:         int64(len(x.events) + 1),
		PreviousID: prev,
		Timestamp:  x.clock.Now(),
		Type:       typ,
		StateName:  stateName,
	}
	if details != nil {
		ev.Details = json.RawMessage(mustJSON(details))
	}
	x.events = append(x.events, ev)
	return ev
}
