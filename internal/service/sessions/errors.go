package sessions

import (
	"errors"
	"fmt"
	"time"
)

// Kind classifies an error for the caller (the API turns it into a
// status).
type Kind int

const (
	// KindInvalid: the request is wrong (Field names what).
	KindInvalid Kind = iota + 1
	// KindTooLarge: a value is over its limit (Field names it).
	KindTooLarge
	// KindNotFound: no such session or run for this tenant.
	KindNotFound
	// KindGone: the session was deleted, with its files.
	KindGone
	// KindConflict: the session is busy or being deleted; retry later.
	KindConflict
	// KindDisabled: sessions are not enabled on this server.
	KindDisabled
	// KindUnavailable: the sandbox provider or the store failed; retry.
	KindUnavailable
)

// Error is an error a client should see. Message never holds a secret.
type Error struct {
	Kind    Kind
	Field   string
	Message string
	// Err is the cause, for logs (redacted like Message).
	Err error
	// RetryAfter, when set, is when asking again can help (a failed
	// dependency build is remembered this long).
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the Kind of err, 0 when it is not an *Error.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return 0
}

func invalid(field, format string, args ...any) *Error {
	return &Error{Kind: KindInvalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

// ErrDisabled answers every session request when [sessions] is off.
var ErrDisabled = &Error{Kind: KindDisabled, Message: "sessions are not enabled on this server ([sessions] enabled = false in its config.toml)"}

func notFound(id string) *Error {
	return &Error{Kind: KindNotFound, Message: fmt.Sprintf("session %q not found", id)}
}
