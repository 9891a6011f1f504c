package deno

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sandstep/sandstep/internal/service/version"
	"github.com/sandstep/sandstep/providers"
)

// client speaks Deno's REST APIs: the console and the regional one.
type client struct {
	console, sandbox string // origins
	token, org       string
	hc               *http.Client
	timeout          time.Duration
}

// apiError is a non-2xx answer: Deno's {"code","message"} body.
type apiError struct {
	Status  int
	Code    string
	Message string
	TraceID string
}

func (e *apiError) Error() string {
	msg := fmt.Sprintf("Deno answered %d", e.Status)
	if e.Code != "" {
		msg += " " + e.Code
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	if e.TraceID != "" {
		msg += " (trace " + e.TraceID + ")"
	}
	return msg
}

// codeFor maps an HTTP status of Deno's to the provider codes.
func codeFor(status int) providers.Code {
	switch {
	case status == http.StatusNotFound || status == http.StatusGone:
		return providers.NotFound
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return providers.PermissionDenied
	case status == http.StatusConflict:
		return providers.FailedPrecondition
	case status == http.StatusTooManyRequests:
		return providers.ResourceExhausted
	case status >= 500:
		return providers.Unavailable
	case status >= 400:
		return providers.InvalidArgument
	}
	return providers.Internal
}

func (c *client) headers(h http.Header) {
	h.Set("Authorization", "Bearer "+c.token)
	if c.org != "" {
		h.Set("X-Deno-Org", c.org)
	}
	h.Set("User-Agent", "sandstep-provider-deno/"+version.Version)
}

// do sends one request to origin+path with body as JSON (nil: none) and
// decodes a 2xx answer into out (nil: discarded). Transient failures (5xx,
// transport) are retried a few times: Deno's control plane has them.
func (c *client) do(ctx context.Context, op, method, origin, path string, body, out any) error {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return providers.Wrap(providers.Internal, op, err)
		}
	}
	var last error
	for attempt := range 4 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return providers.Wrap(providers.DeadlineExceeded, op, fmt.Errorf("%w (last failure: %v)", ctx.Err(), last))
			case <-time.After(time.Duration(attempt*attempt) * 200 * time.Millisecond):
			}
		}
		last = c.once(ctx, op, method, origin+path, payload, out)
		if last == nil || providers.CodeOf(last) != providers.Unavailable || ctx.Err() != nil {
			return last
		}
	}
	return last
}

func (c *client) once(ctx context.Context, op, method, url string, payload []byte, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return providers.Wrap(providers.Internal, op, err)
	}
	c.headers(req.Header)
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return providers.Wrap(providers.DeadlineExceeded, op, err)
		}
		return providers.Wrap(providers.Unavailable, op, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return providers.Wrap(providers.Unavailable, op, err)
	}
	if resp.StatusCode/100 != 2 {
		e := errorFrom(resp.StatusCode, resp.Header, b)
		return providers.Wrap(codeFor(resp.StatusCode), op, e)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return providers.Wrap(providers.Internal, op, fmt.Errorf("Deno's answer is not what the contract says: %w", err))
	}
	return nil
}

// errorFrom reads Deno's error body; one that is not JSON is kept short.
func errorFrom(status int, h http.Header, body []byte) *apiError {
	e := &apiError{Status: status, TraceID: h.Get("x-deno-trace-id")}
	var b struct{ Code, Message string }
	if json.Unmarshal(body, &b) == nil && (b.Code != "" || b.Message != "") {
		e.Code, e.Message = b.Code, b.Message
	} else {
		e.Code = "INVALID_RESPONSE_BODY"
		e.Message = clip(strings.TrimSpace(string(body)))
	}
	return e
}

func clip(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}

// isCode reports whether err is Deno's answer with this status.
func isStatus(err error, status int) bool {
	var e *apiError
	return errors.As(err, &e) && e.Status == status
}

// doLink GETs a console list page into out and returns the next page's
// cursor from the Link header ("" on the last page).
func (c *client) doLink(ctx context.Context, op, rawURL string, out *json.RawMessage) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return "", providers.Wrap(providers.Internal, op, err)
	}
	c.headers(req.Header)
	resp, err := c.hc.Do(req)
	if err != nil {
		return "", providers.Wrap(providers.Unavailable, op, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return "", providers.Wrap(providers.Unavailable, op, err)
	}
	if resp.StatusCode/100 != 2 {
		e := errorFrom(resp.StatusCode, resp.Header, b)
		return "", providers.Wrap(codeFor(resp.StatusCode), op, e)
	}
	*out = b
	return nextCursor(resp.Header.Get("Link")), nil
}

// nextCursor takes the cursor of the rel="next" link.
func nextCursor(link string) string {
	for part := range strings.SplitSeq(link, ",") {
		target, params, ok := strings.Cut(part, ";")
		if !ok || !strings.Contains(params, `rel="next"`) {
			continue
		}
		u, err := url.Parse(strings.Trim(strings.TrimSpace(target), "<>"))
		if err == nil {
			return u.Query().Get("cursor")
		}
	}
	return ""
}
