package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sandstep/sandstep/internal/service/store"
)

// Error codes of the API's error responses.
const (
	CodeInvalidArgument  = "invalid_argument"
	CodeUnauthenticated  = "unauthenticated"
	CodeForbidden        = "forbidden" // a sandbox's token outside its scope
	CodeNotFound         = "not_found"
	CodeConflict         = "conflict"
	CodePayloadTooLarge  = "payload_too_large"
	CodeRequestTimeout   = "request_timeout" // the body did not arrive in time
	CodeMethodNotAllowed = "method_not_allowed"
	CodeUnavailable      = "unavailable"
	CodeLimitExceeded    = "limit_exceeded" // a quota or per-parent limit; see Error.Limit
	CodeInternal         = "internal"
)

// Error is an error response: {"error":{...}} with Status.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field names the request field at fault, when exactly one is.
	Field string `json:"field,omitempty"`
	// JobID and JobStatus describe the job an error is about, where the
	// caller needs them: a job created whose execution did not start, a
	// job that already finished.
	JobID     string `json:"job_id,omitempty"`
	JobStatus string `json:"status,omitempty"`
	// Limit, Max and Scope name the limit behind a 429 (store.LimitError).
	Limit string `json:"limit,omitempty"`
	Max   int64  `json:"max,omitempty"`
	Scope string `json:"scope,omitempty"`
	// RetryAfter, in seconds, is sent as Retry-After when set.
	RetryAfter int `json:"-"`
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%d %s (%s): %s", e.Status, e.Code, e.Field, e.Message)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

func invalid(field, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalidArgument, Field: field, Message: fmt.Sprintf(format, args...)}
}

func jobNotFound(id string) *Error {
	return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: fmt.Sprintf("job %q not found", id)}
}

// limitError answers a limit that refused work: 429, naming it, with
// Retry-After (at least a second: a client must not spin).
func limitError(le *store.LimitError) *Error {
	retry := int((le.RetryAfter + time.Second - 1) / time.Second)
	if retry < 1 {
		retry = 1
	}
	return &Error{Status: http.StatusTooManyRequests, Code: CodeLimitExceeded, Limit: le.Limit, Max: le.Max, Scope: le.Scope,
		RetryAfter: retry, Message: fmt.Sprintf("the %s limit %s (%d) is reached; retry after %d s", le.Scope, le.Limit, le.Max, retry)}
}

func writeError(w http.ResponseWriter, e *Error) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	_ = writeJSON(w, e.Status, struct {
		Error *Error `json:"error"`
	}{e})
}

// writeJSON sends v as the whole response. HTML is not escaped: the API
// is not a web page, and escaping would turn a report's "&" into "\u0026".
func writeJSON(w http.ResponseWriter, status int, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, err := w.Write(buf.Bytes())
	return err
}
