package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/sandstep/sandstep/internal/service/direct"
	"github.com/sandstep/sandstep/internal/service/ids"
	"github.com/sandstep/sandstep/internal/service/store"
)

// The handler is layered, outermost first:
//
//	logRequests    one log line per request, whatever happened inside
//	recoverPanics  a panic becomes a JSON 500 (and the log line's error)
//	routeErrors    no route: JSON 404; a route without the method: JSON 405
//	ServeMux       the routes, each wrapped by handle in
//	  guardBody      the body's size and read deadline (before the token, so
//	                 that a request without one is never waited for)
//	  authenticate   the bearer token decides the tenant (not on public routes)
//	  jobRoute       a malformed {id} is a job not found
//	  answer         a route's error becomes its JSON answer

// handlerFunc serves one route. An *Error it returns is written as it is;
// any other error is logged and answered with a 500 that does not show it.
type handlerFunc func(w http.ResponseWriter, r *http.Request, c *call) error

// call is what one request learns along the way, for its log line. The
// logging middleware puts it in the request's context.
type call struct {
	rec    *recorder
	tenant string
	// parent is set for a sandbox's token: the sandbox whose children
	// the request may manage.
	parent string
	jobID  string // the client's
	jobKey string // the internal key, which the phases log
	cause  error  // logged, never sent
	stack  []byte // of a panic
}

type callKey struct{}

func callOf(r *http.Request) *call {
	if c, ok := r.Context().Value(callKey{}).(*call); ok {
		return c
	}
	// Every route runs under logRequests, which puts the call there; this
	// keeps a handler wired some other way from crashing on its absence.
	return &call{rec: &recorder{req: r}}
}

// route is how one route is served.
type route struct {
	public bool // no token needed
	jobID  bool // the path's {id} is a job id
	// sandboxScope lets a sandbox's own token (SANDSTEP_TOKEN) in; other
	// routes refuse it.
	sandboxScope bool
	// maxBody bounds the request body; bodyKey names its config key, and
	// bodyField the field a body too large is blamed on, if any.
	maxBody   int64
	bodyKey   string
	bodyField string
}

type routeOption func(*route)

func public(rt *route)   { rt.public = true }
func jobRoute(rt *route) { rt.jobID = true }

// runBodyLimit bounds the body by max_run_body_bytes rather than
// max_body_bytes, and blames field for a body too large.
func (s *server) runBodyLimit(field string) routeOption {
	return func(rt *route) {
		rt.maxBody, rt.bodyKey, rt.bodyField = int64(s.opts.Server.MaxRunBodyBytes), "max_run_body_bytes", field
	}
}

// handle registers h under pattern with what the route needs around it.
func (s *server) handle(mux *http.ServeMux, pattern string, h handlerFunc, opts ...routeOption) {
	rt := route{maxBody: int64(s.opts.Server.MaxBodyBytes), bodyKey: "max_body_bytes"}
	for _, o := range opts {
		o(&rt)
	}
	next := answer(h)
	if rt.jobID {
		next = validJobID(next)
	}
	if !rt.public {
		next = s.authenticate(next, rt.sandboxScope)
	}
	mux.Handle(pattern, s.guardBody(rt, next))
	s.patterns = append(s.patterns, pattern)
}

// answer runs a route and writes the error it returns.
func answer(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := callOf(r)
		if err := h(w, r, c); err != nil {
			fail(w, c, err)
		}
	})
}

// fail answers with err: an *Error as it is, anything else as a 500 whose
// cause only the log sees.
func fail(w http.ResponseWriter, c *call, err error) {
	e := answerOf(c, err)
	if c.rec.wroteHeader {
		// A stream already under way cannot turn into an error response;
		// the log has it.
		if c.cause == nil {
			c.cause = err
		}
		return
	}
	writeError(w, e)
}

// answerOf is the answer to err: an *Error as it is, a limit as its 429,
// anything else a 500 whose cause only the log sees.
func answerOf(c *call, err error) *Error {
	var e *Error
	var le *store.LimitError
	switch {
	case errors.As(err, &e):
	case errors.As(err, &le):
		e = limitError(le)
	default:
		c.cause = err
		e = &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error"}
	}
	return e
}

// logRequests writes one line per request: method, path, route, status,
// duration, bytes, the tenant and job once known, and the error behind a
// 5xx. It also ends the wait for a body the handler left unread.
func (s *server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w, req: r}
		c := &call{rec: rec}
		r = r.WithContext(context.WithValue(r.Context(), callKey{}, c))
		defer func() {
			rec.dropUnreadBody()
			s.logRequest(r, c, time.Since(start))
		}()
		next.ServeHTTP(rec, r)
	})
}

// recoverPanics turns a panic into a 500 (when nothing was sent yet) and
// hands the panic to the log line. http.ErrAbortHandler goes on up: it is
// how a handler asks net/http to drop the connection.
func (s *server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			c := callOf(r)
			c.cause, c.stack = fmt.Errorf("panic: %v", v), debug.Stack()
			if !c.rec.wroteHeader {
				writeError(w, &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error"})
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// routeErrors answers, in the API's JSON, what ServeMux would answer in
// text: 404 for a path no route has, 405 (with Allow) for a method the
// route does not serve.
func (s *server) routeErrors(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := callOf(r)
		r, ok := literalPath(r)
		if !ok {
			fail(w, c, noRoute(r))
			return
		}
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		// The mux's own answer, run against a probe, tells 404 from 405
		// and which methods the path allows.
		probe := &probeWriter{header: http.Header{}}
		h.ServeHTTP(probe, r)
		if probe.status != http.StatusMethodNotAllowed {
			fail(w, c, noRoute(r))
			return
		}
		allow := probe.header.Get("Allow")
		w.Header().Set("Allow", allow)
		fail(w, c, &Error{Status: http.StatusMethodNotAllowed, Code: CodeMethodNotAllowed,
			Message: fmt.Sprintf("%s is not allowed here; allowed: %s", r.Method, allow)})
	})
}

// literalPath keeps ServeMux from cleaning the path, which it does by
// redirecting: in this API every segment is a name, and "." or ".." is an
// id to refuse as such (400 naming it, or a job not found), not a step up
// to another route. Such segments are handed to the mux escaped, so that
// it matches them as they are. A path with an empty segment ("//", a
// trailing "/") is no route's, except "/" itself.
func literalPath(r *http.Request) (*http.Request, bool) {
	p := r.URL.EscapedPath()
	if p == "/" {
		return r, true // the console
	}
	if !strings.HasPrefix(p, "/") {
		return r, false
	}
	segs := strings.Split(p[1:], "/")
	tail := ""
	if len(segs) > 5 && segs[0] == "v1" && segs[1] == "sandboxes" && segs[3] == "ports" {
		// The rest is the path of an app in the sandbox, as its client
		// wrote it, trailing "/" included: the proxy passes it on.
		tail = "/" + strings.Join(segs[5:], "/")
		segs = segs[:5]
	}
	dots := false
	for i, seg := range segs {
		switch seg {
		case "":
			return r, false
		case ".", "..":
			segs[i], dots = strings.Repeat("%2E", len(seg)), true
		}
	}
	if !dots {
		return r, true
	}
	u := *r.URL
	u.RawPath = "/" + strings.Join(segs, "/") + tail
	r = r.WithContext(r.Context())
	r.URL = &u
	return r, true
}

func noRoute(r *http.Request) *Error {
	return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "no such route: " + r.URL.Path}
}

// probeWriter records a status and headers and drops the body.
type probeWriter struct {
	header http.Header
	status int
}

func (p *probeWriter) Header() http.Header         { return p.header }
func (p *probeWriter) Write(b []byte) (int, error) { return len(b), nil }
func (p *probeWriter) WriteHeader(code int)        { p.status = code }

// authenticate lets a request on only with a bearer token of a known
// tenant, which it records in the call. The token appears in no answer and
// no log line.
func (s *server) authenticate(next http.Handler, sandboxScope bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := callOf(r)
		header := r.Header.Get("Authorization")
		if header == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sandstep"`)
			fail(w, c, &Error{Status: http.StatusUnauthorized, Code: CodeUnauthenticated, Message: "missing bearer token (Authorization: Bearer <token>)"})
			return
		}
		token, ok := bearerToken(header)
		var caller direct.Caller
		if ok {
			caller, ok = s.tokenCaller(r, token)
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sandstep", error="invalid_token"`)
			fail(w, c, &Error{Status: http.StatusUnauthorized, Code: CodeUnauthenticated, Message: "invalid bearer token"})
			return
		}
		if caller.Parent != "" && !sandboxScope {
			fail(w, c, &Error{Status: http.StatusForbidden, Code: CodeForbidden, Message: "a sandbox's token may only manage that sandbox's children (the /v1/sandboxes routes)"})
			return
		}
		c.tenant, c.parent = caller.Tenant, caller.Parent
		next.ServeHTTP(w, r)
	})
}

// tokenCaller resolves a bearer token: a tenant's, or a sandbox's own
// (direct.TokenPrefix), which acts for the sandbox's tenant on its
// children only.
func (s *server) tokenCaller(r *http.Request, token string) (direct.Caller, bool) {
	if strings.HasPrefix(token, direct.TokenPrefix) {
		if s.opts.Sandboxes == nil {
			return direct.Caller{}, false
		}
		return s.opts.Sandboxes.Authenticate(r.Context(), token)
	}
	tenant, ok := s.opts.Auth.Tenant(token)
	return direct.Caller{Tenant: tenant}, ok
}

// validJobID answers a path whose {id} can be no job's id as a job not
// found, and records the id for the log line.
func validJobID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := callOf(r)
		id := r.PathValue("id")
		if !ids.Valid(id) {
			fail(w, c, jobNotFound(id))
			return
		}
		c.jobID = id
		next.ServeHTTP(w, r)
	})
}

func (s *server) logRequest(r *http.Request, c *call, d time.Duration) {
	rec := c.rec
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	attrs := []slog.Attr{
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
	}
	if r.Pattern != "" {
		attrs = append(attrs, slog.String("route", r.Pattern))
	}
	attrs = append(attrs,
		slog.Int("status", status),
		slog.Float64("duration_ms", float64(d.Microseconds())/1000),
		slog.Int64("bytes", rec.bytes),
	)
	if c.tenant != "" {
		attrs = append(attrs, slog.String("tenant", c.tenant))
	}
	if c.jobID != "" {
		attrs = append(attrs, slog.String("job_id", c.jobID))
	}
	if c.jobKey != "" {
		attrs = append(attrs, slog.String("job_key", c.jobKey))
	}
	if c.cause != nil {
		attrs = append(attrs, slog.String("error", c.cause.Error()))
	}
	if c.stack != nil {
		attrs = append(attrs, slog.String("stack", string(c.stack)))
	}
	level := slog.LevelInfo
	if status >= 500 {
		level = slog.LevelError
	}
	s.log.LogAttrs(r.Context(), level, "http request", attrs...)
}

// recorder remembers the status and size of a response for the log line.
// Unwrap lets http.ResponseController reach the real writer's Flush and
// deadlines.
type recorder struct {
	http.ResponseWriter
	req         *http.Request
	body        *body // nil until the route's guard ran
	status      int
	bytes       int64
	wroteHeader bool
}

func (rw *recorder) WriteHeader(code int) {
	if !rw.wroteHeader {
		rw.status, rw.wroteHeader = code, true
		// An answer given before the body was read whole closes the
		// connection: the server would otherwise wait for the rest of a
		// body no handler reads, as long as its client cares to send it.
		if rw.unread() {
			rw.Header().Set("Connection", "close")
		}
	}
	rw.ResponseWriter.WriteHeader(code)
}

func (rw *recorder) Write(b []byte) (int, error) {
	if !rw.wroteHeader {
		rw.WriteHeader(http.StatusOK)
	}
	n, err := rw.ResponseWriter.Write(b)
	rw.bytes += int64(n)
	return n, err
}

func (rw *recorder) Unwrap() http.ResponseWriter { return rw.ResponseWriter }

// unread reports whether the request's body was not read to its end.
func (rw *recorder) unread() bool {
	if rw.body == nil {
		return rw.req.ContentLength != 0
	}
	return !rw.body.complete()
}

// dropUnreadBody ends the wait for a body the handler left unread: once
// the handler returns, net/http would read on up to 256 KiB of it, as
// slowly as its client sends, before closing the connection.
func (rw *recorder) dropUnreadBody() {
	if rw.unread() && rw.ResponseWriter != nil {
		_ = http.NewResponseController(rw.ResponseWriter).SetReadDeadline(time.Now())
	}
}
