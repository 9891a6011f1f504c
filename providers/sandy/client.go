package sandy

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sandstep/sandstep/internal/service/version"
	"github.com/sandstep/sandstep/providers"
)

// client speaks Sandy's HTTP API: bearer authentication, retries with
// exponential backoff and jitter on what the contract calls transient
// (network errors, 408, 429, 5xx, bodies saying "Upstream error"), never on
// other 4xx, and errors that carry a provider code. The API key goes into
// the Authorization header and nowhere else; every message built from an
// answer is scrubbed of it, in case a proxy echoes the request.
type client struct {
	base       string
	key        string
	hc         *http.Client
	retries    int
	baseDelay  time.Duration
	reqTimeout time.Duration
	log        *slog.Logger
}

// maxBackoff caps the wait between two attempts.
const maxBackoff = 30 * time.Second

// maxBody caps an answer held in memory: file reads through the API are
// only attempted below it.
const maxBody = 64 << 20

// call is one logical request; its retries share an X-Request-Id.
type call struct {
	op     string // the provider operation, for errors ("create", "exec", ...)
	method string
	path   string // below the base URL, already escaped
	query  url.Values
	body   any // JSON-encoded; nil sends no body
	// timeout bounds one attempt; 0 means the request_timeout setting.
	timeout time.Duration
	// noRetry makes a failed attempt final: the caller has a better way
	// out than asking again.
	noRetry bool
	// check looks at a 2xx answer; an error it returns is retried like a
	// transient failure when retryable(err) holds.
	check func(answer) error
}

// answer is a 2xx response.
type answer struct {
	status int
	body   []byte
	ctype  string
}

// apiError is a non-2xx answer from Sandy.
type apiError struct {
	Status     int
	Method     string
	Path       string
	Detail     string // the answer's detail, scrubbed and shortened
	retryAfter time.Duration
}

func (e *apiError) Error() string {
	msg := fmt.Sprintf("Sandy answered %d %s to %s %s", e.Status, http.StatusText(e.Status), e.Method, e.Path)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// transient reports whether the contract calls this answer worth another
// try.
func (e *apiError) transient() bool {
	return e.Status == http.StatusRequestTimeout || e.Status == http.StatusTooManyRequests ||
		e.Status >= 500 || strings.Contains(e.Detail, "Upstream error")
}

// code maps the status to a provider code.
func (e *apiError) code() providers.Code {
	switch {
	case e.Status == http.StatusNotFound:
		return providers.NotFound
	case e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden:
		return providers.PermissionDenied
	case e.Status == http.StatusTooManyRequests:
		return providers.ResourceExhausted
	case e.transient():
		return providers.Unavailable
	case e.Status == http.StatusBadRequest || e.Status == http.StatusUnprocessableEntity || e.Status == http.StatusRequestEntityTooLarge:
		return providers.InvalidArgument
	case e.Status == http.StatusConflict:
		return providers.FailedPrecondition
	}
	return providers.Unknown
}

// transportError is a request that got no answer.
type transportError struct{ msg string }

func (e *transportError) Error() string { return e.msg }

// retryError is a 2xx answer that check found transient.
type retryError struct{ msg string }

func (e *retryError) Error() string { return e.msg }

func retryable(err error) bool {
	var ae *apiError
	var te *transportError
	var re *retryError
	return errors.As(err, &te) || errors.As(err, &re) || (errors.As(err, &ae) && ae.transient())
}

// do sends c, retrying what is transient, and returns the 2xx answer. Its
// errors carry a provider code; a cancelled or expired ctx comes back as
// ctx's own error, so that the host sees a cancellation as one.
func (c *client) do(ctx context.Context, r call) (answer, error) {
	var payload []byte
	if r.body != nil {
		b, err := json.Marshal(r.body)
		if err != nil {
			return answer{}, providers.Wrap(providers.Internal, r.op, err)
		}
		payload = b
	}
	rid := requestID()
	var last error
	var wait time.Duration
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			c.log.Debug("retrying a Sandy request", "op", r.op, "method", r.method, "path", r.path, "attempt", attempt+1, "after", wait.Round(time.Millisecond), "error", last.Error())
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return answer{}, fmt.Errorf("%s: %s %s: %w (last failure: %v)", r.op, r.method, r.path, ctx.Err(), last)
			case <-t.C:
			}
		}
		a, err := c.once(ctx, r, payload, rid)
		if err == nil && r.check != nil {
			err = r.check(a)
		}
		if err == nil {
			return a, nil
		}
		if ctx.Err() != nil {
			return answer{}, fmt.Errorf("%s: %s %s: %w", r.op, r.method, r.path, ctx.Err())
		}
		last = err
		if r.noRetry || attempt >= c.retries || !retryable(err) {
			return answer{}, c.codeError(r.op, err)
		}
		wait = c.backoff(attempt+1, err)
	}
}

// backoff is the wait before attempt n+1 (n >= 1): exponential from the
// base delay, with jitter over its upper half, and at least what a
// Retry-After header asked for.
func (c *client) backoff(n int, err error) time.Duration {
	d := c.baseDelay << min(n-1, 20)
	if d <= 0 || d > maxBackoff {
		d = maxBackoff
	}
	d = d/2 + rand.N(d/2+1)
	var ae *apiError
	if errors.As(err, &ae) && ae.retryAfter > d {
		d = min(ae.retryAfter, maxBackoff)
	}
	return d
}

func (c *client) codeError(op string, err error) error {
	code := providers.Unavailable
	var ae *apiError
	var re *retryError
	switch {
	case errors.As(err, &ae):
		code = ae.code()
	case errors.As(err, &re):
		code = providers.Unavailable
	}
	var pe *providers.Error
	if errors.As(err, &pe) {
		return err
	}
	return providers.Wrap(code, op, err)
}

func (c *client) once(ctx context.Context, r call, payload []byte, rid string) (answer, error) {
	timeout := r.timeout
	if timeout <= 0 {
		timeout = c.reqTimeout
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u := c.base + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(actx, r.method, u, body)
	if err != nil {
		return answer{}, providers.Wrap(providers.Internal, r.op, errors.New(c.scrub(err.Error())))
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("X-Request-Id", rid)
	req.Header.Set("User-Agent", "sandstep-provider-sandy/"+version.Version)
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return answer{}, &transportError{msg: c.scrub(fmt.Sprintf("%s %s: %v", r.method, r.path, unwrapURLError(err)))}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return answer{}, &transportError{msg: c.scrub(fmt.Sprintf("%s %s: reading the answer: %v", r.method, r.path, err))}
	}
	if resp.StatusCode/100 == 2 {
		if len(b) > maxBody {
			return answer{}, providers.Errorf(providers.Internal, r.op, "%s %s: the answer is larger than %d bytes", r.method, r.path, maxBody)
		}
		return answer{status: resp.StatusCode, body: b, ctype: resp.Header.Get("Content-Type")}, nil
	}
	ae := &apiError{Status: resp.StatusCode, Method: r.method, Path: r.path, Detail: c.scrub(detailOf(b))}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		ae.retryAfter = time.Duration(s) * time.Second
	}
	return answer{}, ae
}

// unwrapURLError drops the URL net/http puts in front of a transport
// error: the call already names method and path.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// scrub removes the API key from s. Nothing should ever put it there; this
// is for answers that echo the request.
func (c *client) scrub(s string) string {
	if c.key == "" {
		return s
	}
	return strings.ReplaceAll(s, c.key, "[redacted]")
}

// detailOf makes an error answer readable: FastAPI's {"detail": ...} when it
// is there, else the body, shortened and on one line. Of a validation error
// only where and what are kept: its "input" echoes what was sent, which may
// be a sandbox's secrets.
func detailOf(b []byte) string {
	var m struct {
		Detail json.RawMessage `json:"detail"`
	}
	s := string(b)
	if json.Unmarshal(b, &m) == nil && len(m.Detail) > 0 {
		var text string
		var items []struct {
			Loc []any  `json:"loc"`
			Msg string `json:"msg"`
		}
		switch {
		case json.Unmarshal(m.Detail, &text) == nil:
			s = text
		case json.Unmarshal(m.Detail, &items) == nil:
			parts := make([]string, len(items))
			for i, it := range items {
				parts[i] = fmt.Sprintf("%v: %s", it.Loc, it.Msg)
			}
			s = strings.Join(parts, "; ")
		default:
			s = "(an error detail that is not text)"
		}
	}
	s = strings.Join(strings.Fields(s), " ")
	const max = 300
	if len(s) > max {
		s = s[:max] + "..."
	}
	return s
}

func requestID() string {
	var b [8]byte
	_, _ = crand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// execAnswer is what Sandy's exec returns.
type execAnswer struct {
	Stdout   string
	Stderr   string
	ExitCode int
}

// warmupQuirk is the stderr of a Firecracker guest whose agent is not up
// yet: the exec did not run and may be repeated.
func warmupQuirk(a execAnswer) bool {
	return a.ExitCode != 0 && (strings.Contains(a.Stderr, "vsock handshake failed") || strings.Contains(a.Stderr, "agent not ready"))
}

// execTimeoutMargin is how much longer than the command's own timeout an
// exec request may take: Sandy answers only when the command has ended.
const execTimeoutMargin = 30 * time.Second

// exec runs command in a sandbox through Sandy's exec endpoint. timeoutMs
// is always sent: without it Sandy applies a short default of its own. A
// non-zero exit is an answer, except for the warmup quirk, which is retried
// when retryQuirk is set.
func (c *client) exec(ctx context.Context, op, id, command string, env map[string]string, timeout time.Duration, retryQuirk bool) (execAnswer, error) {
	var out execAnswer
	body := map[string]any{
		"command":   command,
		"cwd":       workspace,
		"timeoutMs": timeout.Milliseconds(),
	}
	if len(env) > 0 {
		body["env"] = env
	}
	_, err := c.do(ctx, call{
		op:      op,
		method:  http.MethodPost,
		path:    sandboxPath(id, "exec"),
		body:    body,
		timeout: timeout + execTimeoutMargin,
		check: func(a answer) error {
			var err error
			if out, err = parseExec(a.body); err != nil {
				return providers.Wrap(providers.Internal, op, err)
			}
			if warmupQuirk(out) {
				if !retryQuirk {
					return providers.Errorf(providers.Unavailable, op, "the sandbox is not ready for commands yet: %s", clip(out.Stderr))
				}
				return &retryError{msg: "the sandbox is not ready for commands yet: " + clip(out.Stderr)}
			}
			return nil
		},
	})
	return out, err
}

// parseExec reads an exec answer, in Sandy's camelCase or the snake_case
// some of its clients and fakes use.
func parseExec(b []byte) (execAnswer, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return execAnswer{}, fmt.Errorf("the exec answer is not a JSON object: %w", err)
	}
	var a execAnswer
	_ = json.Unmarshal(pick(m, "stdout", "output"), &a.Stdout)
	_ = json.Unmarshal(pick(m, "stderr"), &a.Stderr)
	raw := pick(m, "exitCode", "exit_code", "returncode", "returnCode")
	var code float64
	if raw == nil || json.Unmarshal(raw, &code) != nil {
		return execAnswer{}, fmt.Errorf("the exec answer carries no exit code: %s", clip(string(b)))
	}
	a.ExitCode = int(code)
	return a, nil
}

// pick returns the first of keys present in m and not null.
func pick(m map[string]json.RawMessage, keys ...string) json.RawMessage {
	for _, k := range keys {
		if v, ok := m[k]; ok && string(v) != "null" {
			return v
		}
	}
	return nil
}

// sandboxInfo is a sandbox as create and status describe it.
type sandboxInfo struct {
	ID        string
	URL       string
	Status    string
	CreatedAt time.Time
	TimeoutAt time.Time
}

func parseSandbox(b []byte) (sandboxInfo, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return sandboxInfo{}, fmt.Errorf("the sandbox answer is not a JSON object: %w", err)
	}
	var s sandboxInfo
	_ = json.Unmarshal(pick(m, "sandboxId", "sandbox_id", "id"), &s.ID)
	_ = json.Unmarshal(pick(m, "url", "public_url", "publicUrl"), &s.URL)
	_ = json.Unmarshal(pick(m, "status"), &s.Status)
	s.CreatedAt = parseTime(pick(m, "createdAt", "created_at"))
	s.TimeoutAt = parseTime(pick(m, "timeoutAt", "timeout_at", "expiresAt", "expires_at"))
	return s, nil
}

// parseTime reads ISO-8601 with or without a zone (Python's isoformat of a
// naive datetime has none; it is UTC), or Unix seconds or milliseconds.
func parseTime(raw json.RawMessage) time.Time {
	if raw == nil {
		return time.Time{}
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999"} {
			if t, err := time.Parse(layout, s); err == nil {
				return t
			}
		}
		return time.Time{}
	}
	var n float64
	if json.Unmarshal(raw, &n) == nil && n > 0 {
		if n > 1e12 {
			return time.UnixMilli(int64(n))
		}
		return time.Unix(int64(n), 0)
	}
	return time.Time{}
}

func sandboxPath(id string, parts ...string) string {
	p := "/api/sandboxes/" + url.PathEscape(id)
	for _, part := range parts {
		p += "/" + part
	}
	return p
}

// clip shortens s for a message.
func clip(s string) string {
	s = strings.TrimSpace(s)
	const max = 500
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}

// randDuration is a random duration in [0, max).
func randDuration(max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	return rand.N(max)
}
