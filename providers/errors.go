package providers

import (
	"context"
	"errors"
	"fmt"
)

// Code classifies an error so that the host can decide what to do about it
// (retry, treat as gone, report to the user) without parsing messages. Codes
// survive the plugin boundary; messages are for people.
type Code int

const (
	Unknown            Code = iota
	NotFound                // the sandbox, file, snapshot or volume does not exist (or is gone)
	AlreadyExists           // a live sandbox already has this name
	Unsupported             // the provider lacks the capability
	ResourceExhausted       // quota, rate limit or capacity; retry later, not now
	Unavailable             // transient: the backend or transport failed; retry with backoff
	InvalidArgument         // the request is wrong; retrying will not help
	DeadlineExceeded        // the context deadline passed before the call finished
	PermissionDenied        // credentials are missing or refused
	FailedPrecondition      // the object is in the wrong state (e.g. a volume in use)
	Internal                // a bug or an unexpected backend answer
)

var codeNames = [...]string{
	Unknown:            "Unknown",
	NotFound:           "NotFound",
	AlreadyExists:      "AlreadyExists",
	Unsupported:        "Unsupported",
	ResourceExhausted:  "ResourceExhausted",
	Unavailable:        "Unavailable",
	InvalidArgument:    "InvalidArgument",
	DeadlineExceeded:   "DeadlineExceeded",
	PermissionDenied:   "PermissionDenied",
	FailedPrecondition: "FailedPrecondition",
	Internal:           "Internal",
}

func (c Code) String() string {
	if c >= 0 && int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("Code(%d)", int(c))
}

// Error is a provider error with a code. Op names the failed operation
// ("create", "exec", ...).
type Error struct {
	Code    Code
	Op      string
	Message string
	Err     error
}

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" && e.Err != nil {
		msg = e.Err.Error()
	} else if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if e.Op != "" {
		return fmt.Sprintf("%s: %s: %s", e.Op, e.Code, msg)
	}
	return fmt.Sprintf("%s: %s", e.Code, msg)
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrNotFound) and friends match any *Error with the
// same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Op == "" && t.Message == "" && t.Err == nil && t.Code == e.Code
}

// Sentinels for errors.Is.
var (
	ErrNotFound           = &Error{Code: NotFound}
	ErrAlreadyExists      = &Error{Code: AlreadyExists}
	ErrUnsupported        = &Error{Code: Unsupported}
	ErrResourceExhausted  = &Error{Code: ResourceExhausted}
	ErrUnavailable        = &Error{Code: Unavailable}
	ErrInvalidArgument    = &Error{Code: InvalidArgument}
	ErrDeadlineExceeded   = &Error{Code: DeadlineExceeded}
	ErrPermissionDenied   = &Error{Code: PermissionDenied}
	ErrFailedPrecondition = &Error{Code: FailedPrecondition}
)

// Errorf returns an *Error with the given code.
func Errorf(code Code, op, format string, args ...any) error {
	return &Error{Code: code, Op: op, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns err with a code attached, keeping it for errors.Is/As.
// A nil err stays nil.
func Wrap(code Code, op string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Code: code, Op: op, Err: err}
}

// CodeOf returns the code of the first *Error in err's chain. A context error
// maps to DeadlineExceeded; anything else is Unknown.
func CodeOf(err error) Code {
	if err == nil {
		return Unknown
	}
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return DeadlineExceeded
	}
	return Unknown
}

// IsNotFound reports whether err means the object is gone.
func IsNotFound(err error) bool { return CodeOf(err) == NotFound }

// IsUnsupported reports whether err means the provider lacks a capability.
func IsUnsupported(err error) bool { return CodeOf(err) == Unsupported }
