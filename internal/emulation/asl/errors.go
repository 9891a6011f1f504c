package asl

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"

	"github.com/aws/aws-lambda-go/lambda/messages"
)

// Error names the language reserves, as they appear in Retry and Catch.
const (
	ErrorALL                             = "States.ALL"
	ErrorTaskFailed                      = "States.TaskFailed"
	ErrorTimeout                         = "States.Timeout"
	ErrorRuntime                         = "States.Runtime"
	ErrorDataLimitExceeded               = "States.DataLimitExceeded"
	ErrorNoChoiceMatched                 = "States.NoChoiceMatched"
	ErrorExceedToleratedFailureThreshold = "States.ExceedToleratedFailureThreshold"
)

// DefinitionError is one problem Load found in a definition. Load reports all
// of them at once, joined with errors.Join.
type DefinitionError struct {
	// State is the state's name, empty for the top level of the definition.
	State string
	// Field is the offending field, empty when the problem is the state as a whole.
	Field string
	// Reason says what is wrong.
	Reason string
	// Unsupported is true for valid Amazon States Language that this engine
	// refuses because it does not implement it.
	Unsupported bool
}

func (e *DefinitionError) Error() string {
	var b strings.Builder
	if e.State != "" {
		fmt.Fprintf(&b, "state %q: ", e.State)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, "%s: ", e.Field)
	}
	if e.Unsupported {
		b.WriteString("not supported by the local engine: ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

// failure is an error raised while running a state. Terminal failures
// (States.Runtime and an oversized state input or output) skip Retry and
// Catch and end the execution.
type failure struct {
	Error    string
	Cause    string
	terminal bool
	// located marks a States.Runtime cause already prefixed with the state
	// it happened in, so an enclosing Parallel or Map does not prefix it again.
	located bool
}

func runtimeFailure(format string, args ...any) *failure {
	return &failure{Error: ErrorRuntime, Cause: fmt.Sprintf(format, args...), terminal: true}
}

// output is the error output a Catch hands to its Next state.
func (f *failure) output() map[string]any {
	return map[string]any{"Error": f.Error, "Cause": f.Cause}
}

// matchesError applies the language's matching rules to one ErrorEquals list.
// Terminal failures never get here.
func matchesError(errorEquals []string, name string) bool {
	for _, e := range errorEquals {
		switch {
		case e == name, e == ErrorALL:
			return true
		case e == ErrorTaskFailed && name != ErrorTimeout && !strings.HasPrefix(name, "States."):
			return true
		}
	}
	return false
}

// lambdaFailure names a handler's error the way aws-lambda-go reports it to
// the Lambda service (lambda/errors.go, lambdaErrorResponse), which is what
// Step Functions then matches on: a messages.InvokeResponse_Error value
// (not a pointer, and not a wrapped one: the runtime checks only the value
// it was given) supplies its own Type; any other error is named after its Go
// type with a pointer dereferenced (*main.JobCancelled -> "JobCancelled",
// errors.New -> "errorString", fmt.Errorf with %w -> "wrapError"). The cause
// is the error payload the function returned, as JSON text, as Step
// Functions passes it on.
func lambdaFailure(err error) *failure {
	var resp messages.InvokeResponse_Error
	if v, ok := err.(messages.InvokeResponse_Error); ok {
		resp = v
	} else {
		resp = messages.InvokeResponse_Error{Message: err.Error(), Type: goTypeName(err)}
	}
	return &failure{Error: resp.Type, Cause: errorPayload(resp)}
}

// panicFailure names a recovered panic as aws-lambda-go's
// lambdaPanicResponse does, stack trace included.
func panicFailure(v any, stack []uintptr) *failure {
	if ive, ok := v.(messages.InvokeResponse_Error); ok {
		return &failure{Error: ive.Type, Cause: errorPayload(ive)}
	}
	resp := messages.InvokeResponse_Error{
		Message:    fmt.Sprintf("%v", v),
		Type:       goTypeName(v),
		StackTrace: stackFrames(stack),
	}
	return &failure{Error: resp.Type, Cause: errorPayload(resp)}
}

func goTypeName(v any) string {
	t := reflect.TypeOf(v)
	if t == nil {
		return ""
	}
	if t.Kind() == reflect.Pointer {
		return t.Elem().Name()
	}
	return t.Name()
}

func errorPayload(resp messages.InvokeResponse_Error) string {
	b, err := json.Marshal(resp)
	if err != nil {
		b, _ = json.Marshal(messages.InvokeResponse_Error{Type: "Runtime.SerializationError", Message: err.Error()})
	}
	return string(b)
}

// stackFrames formats frames like aws-lambda-go's formatFrame: the path
// relative to the module root and the function name without its package.
func stackFrames(pcs []uintptr) []*messages.InvokeResponse_Error_StackFrame {
	var out []*messages.InvokeResponse_Error_StackFrame
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		label := f.Function
		file := f.File
		i := len(file)
		for n, g := 0, strings.Count(label, "/")+2; n < g; n++ {
			if i = strings.LastIndex(file[:i], "/"); i < 0 {
				break
			}
		}
		file = file[i+1:]
		label = label[strings.LastIndex(label, "/")+1:]
		label = label[strings.Index(label, ".")+1:]
		out = append(out, &messages.InvokeResponse_Error_StackFrame{Path: file, Line: int32(f.Line), Label: label})
		if !more {
			break
		}
	}
	return out
}

// ErrNotRunning is returned by Stop for an execution that already ended.
var ErrNotRunning = errors.New("asl: execution is not running")
