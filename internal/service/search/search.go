// Package search finds the sources of a deep-research job: web search
// backends (SearxNG, Serper and the keyless Wikipedia search API) behind one
// interface, and Discover, which runs a query and its related queries over
// them with fallbacks, then deduplicates, ranks and numbers the results.
package search

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandstep/sandstep/internal/service/version"
)

// Backend is one web search service.
type Backend interface {
	// Name is the backend's name in config and errors: "wikipedia",
	// "searxng" or "serper".
	Name() string
	// Search returns at most limit results for query, best first.
	Search(ctx context.Context, query string, limit int) ([]Result, error)
}

// Result is one search hit.
type Result struct {
	URL     string
	Title   string
	Snippet string
	// Engine is the backend that found it.
	Engine string
	// Rank is the 1-based position in the backend's answer.
	Rank int
}

// UserAgent is sent with every request: Wikimedia's policy asks API clients
// to name themselves and a way to reach their authors.
func UserAgent() string {
	return "sandstep/" + version.Version + " (+https://github.com/sandstep/sandstep)"
}

// HTTP is how a backend talks to its API. The zero value is usable.
type HTTP struct {
	// Client sends the requests; nil means http.DefaultClient. Timeouts
	// come from Timeout, not from the client.
	Client *http.Client
	// Timeout bounds one search: every attempt, every wait between them
	// and every body read. A backend that never answers costs it once per
	// query, not once per attempt. Default 20 s.
	Timeout time.Duration
	// Attempts is how often a request is sent when it meets a 429, a 5xx
	// or a connection error, within Timeout. Default 3.
	Attempts int
	// Backoff is the wait before the first retry; it doubles with each
	// retry, up to 8 times Backoff. A Retry-After header within that bound
	// is honoured. Default 500 ms.
	Backoff time.Duration
	// UserAgent defaults to UserAgent().
	UserAgent string
}

const maxResponseBytes = 8 << 20

func (h HTTP) withDefaults() HTTP {
	if h.Client == nil {
		h.Client = http.DefaultClient
	}
	if h.Timeout <= 0 {
		h.Timeout = 20 * time.Second
	}
	if h.Attempts <= 0 {
		h.Attempts = 3
	}
	if h.Backoff <= 0 {
		h.Backoff = 500 * time.Millisecond
	}
	if h.UserAgent == "" {
		h.UserAgent = UserAgent()
	}
	return h
}

// Error is a failed search. Its text names the backend and never holds an
// API key.
type Error struct {
	Backend string
	// Status is the HTTP status of the last answer; 0 when there was none
	// (connection error, timeout, undecodable answer).
	Status int
	// Attempts is how many requests were sent.
	Attempts int
	// Detail is what the backend said, shortened, or the cause.
	Detail string
	err    error
	// retryAfter is the Retry-After header of the answer.
	retryAfter string
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "search: %s: ", e.Backend)
	if e.Status != 0 {
		fmt.Fprintf(&b, "HTTP %d %s", e.Status, http.StatusText(e.Status))
		if e.Detail != "" {
			b.WriteString(": " + e.Detail)
		}
	} else {
		b.WriteString(e.Detail)
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (after %d attempts)", e.Attempts)
	}
	return b.String()
}

// Unwrap returns the cause (a context error, for one) when it carries no
// secret.
func (e *Error) Unwrap() error { return e.err }

// Permanent reports whether asking the same backend again cannot help: it
// refused the request itself (a 4xx other than 408 and 429: a bad key, no
// credits, the JSON format turned off).
func (e *Error) Permanent() bool {
	return e.Status >= 400 && e.Status < 500 && e.Status != http.StatusRequestTimeout && e.Status != http.StatusTooManyRequests
}

// do sends the request built by newReq, retrying 429s, 5xx and connection
// errors with backoff, and returns the body of a 2xx answer. secret, if not
// empty, is scrubbed from every error text.
func (h HTTP) do(ctx context.Context, backend, secret string, newReq func(context.Context) (*http.Request, error)) ([]byte, error) {
	h = h.withDefaults()
	fail := func(status, attempts int, detail string, cause error) *Error {
		if secret != "" {
			detail = strings.ReplaceAll(detail, secret, "[redacted]")
		}
		return &Error{Backend: backend, Status: status, Attempts: attempts, Detail: detail, err: cause}
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
	// gaveUp says why the search stopped early: the caller's context ended,
	// or the backend used up its Timeout.
	gaveUp := func() (string, error) {
		if err := parent.Err(); err != nil {
			return err.Error(), err
		}
		return fmt.Sprintf("no answer within %s", h.Timeout), context.DeadlineExceeded
	}
	var last *Error
	for attempt := 1; attempt <= h.Attempts; attempt++ {
		if attempt > 1 {
			wait := min(h.Backoff<<(attempt-2), 8*h.Backoff)
			if ra := retryAfter(last); ra > 0 && ra <= 8*h.Backoff {
				wait = ra
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				why, cause := gaveUp()
				return nil, fail(last.Status, attempt-1, last.Detail+"; gave up: "+why, cause)
			case <-t.C:
			}
		}
		body, status, header, err := h.once(ctx, newReq)
		switch {
		case err != nil && ctx.Err() != nil:
			why, cause := gaveUp()
			if last != nil {
				return nil, fail(last.Status, attempt, last.Detail+"; then "+why, cause)
			}
			return nil, fail(0, attempt, why, cause)
		case err != nil:
			// No cause kept: transport errors quote the request URL.
			last = fail(0, attempt, err.Error(), nil)
			continue
		case status >= 200 && status < 300:
			return body, nil
		}
		last = fail(status, attempt, detail(body), nil)
		last.retryAfter = header.Get("Retry-After")
		if status != http.StatusTooManyRequests && status < 500 {
			return nil, last
		}
	}
	return nil, last
}

func (h HTTP) once(ctx context.Context, newReq func(context.Context) (*http.Request, error)) ([]byte, int, http.Header, error) {
	req, err := newReq(ctx)
	if err != nil {
		return nil, 0, nil, err
	}
	req.Header.Set("User-Agent", h.UserAgent)
	req.Header.Set("Accept", "application/json")
	resp, err := h.Client.Do(req)
	if err != nil {
		return nil, 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return nil, 0, nil, fmt.Errorf("reading the answer: %w", err)
	}
	if len(body) > maxResponseBytes {
		return nil, 0, nil, fmt.Errorf("answer larger than %d bytes", maxResponseBytes)
	}
	return body, resp.StatusCode, resp.Header, nil
}

// retryAfter reads a Retry-After header given in seconds (the form rate
// limiters use); 0 when absent or a date.
func retryAfter(e *Error) time.Duration {
	if e == nil || e.retryAfter == "" {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(e.retryAfter))
	if err != nil || n < 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}

// detail picks the message out of an error body: a JSON "message", "error"
// or "error.info" field, or else the start of the text.
func detail(body []byte) string {
	var v struct {
		Message string          `json:"message"`
		Error   json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &v) == nil {
		if v.Message != "" {
			return shorten(v.Message, 200)
		}
		var s string
		if json.Unmarshal(v.Error, &s) == nil && s != "" {
			return shorten(s, 200)
		}
		var o struct{ Info, Message string }
		if json.Unmarshal(v.Error, &o) == nil && (o.Info != "" || o.Message != "") {
			return shorten(o.Info+o.Message, 200)
		}
	}
	return shorten(string(bytes.ToValidUTF8(body, nil)), 200)
}

// shorten collapses white space and cuts s to at most n bytes on a rune
// boundary.
func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// decode unmarshals a 2xx body into v, as an *Error naming the backend.
func decode(backend string, body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return &Error{Backend: backend, Detail: "undecodable answer: " + err.Error() + ": " + shorten(string(bytes.ToValidUTF8(body, nil)), 120)}
	}
	return nil
}

var errNoLimit = errors.New("limit must be at least 1")
