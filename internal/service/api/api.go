// Package api is sandstep's HTTP API v1: one http.Handler, served by
// net/http on a developer's machine and, through LambdaHandler, by the API
// Lambda behind API Gateway. There is no second implementation of any route.
//
// Every answer is JSON (except Server-Sent Events and the markdown form of a
// report); every error is {"error":{"code","message","field"}} with a 4xx or
// 5xx status. Callers authenticate with a bearer token that decides their
// tenant; a job of another tenant does not exist for them (404).
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/docsearch"
	"github.com/sandstep/sandstep/internal/service/ids"
	"github.com/sandstep/sandstep/internal/service/sessions"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/service/tools"
	"github.com/sandstep/sandstep/providers"
)

// Executor runs the deep-research state machine: Step Functions in AWS, the
// local engine on one machine.
type Executor interface {
	// Start begins the deep-research execution of the job whose key (see
	// package ids) is jobKey, named after it; starting an already started
	// execution returns its id without error.
	Start(ctx context.Context, jobKey string, input []byte) (executionID string, err error)
	// Cancel is called after a cancel was recorded; it stops the execution
	// after a grace period unless it ended. It must not hold the request for
	// that grace period. executionID is "" when the job's execution id was
	// never recorded; the execution name is the job's key.
	Cancel(ctx context.Context, jobKey, executionID string) error
}

// ProviderInfo describes the active sandbox provider.
type ProviderInfo interface {
	Info(ctx context.Context) (providers.Info, error)
}

// Options configure the handler. Store, Executor and Auth are required.
type Options struct {
	Store    *store.Store
	Executor Executor
	// Provider answers GET /v1/providers; nil makes that route 503.
	Provider ProviderInfo
	Auth     *Authenticator
	// Sessions serves /v1/sessions; nil (or not enabled) makes those
	// routes answer 404.
	Sessions *sessions.Service
	// Docs runs search_docs and keeps code modules (the LLM tools, on
	// with Sessions); Tools describes them (tools.SettingsFrom).
	Docs  *docsearch.Service
	Tools tools.Settings
	// Logger gets one line per request; nil means slog.Default().
	Logger *slog.Logger
	// Streaming allows Server-Sent Events on the events route. Leave it off
	// where responses are buffered whole (Lambda behind API Gateway).
	Streaming bool
	// Server holds the [server] bounds the handler applies itself: body
	// sizes and the body-read deadline on every route, the write deadline,
	// heartbeat and maximum life of a stream (after which the client
	// reconnects with Last-Event-ID). A zero field takes config's default.
	Server config.ServerConfig
	// PollInterval is how often a stream looks for new events (default
	// 500ms).
	PollInterval time.Duration
	// Now is the clock for generated job ids (default time.Now).
	Now func() time.Time
}

const defaultPollInterval = 500 * time.Millisecond

// handler serves one route. An *Error it returns is written as it is; any
// other error is logged and answered with a 500 that does not show it.
type handlerFunc func(w http.ResponseWriter, r *http.Request, c *call) error

// call is what one request learns along the way, for its log line.
type call struct {
	tenant string
	jobID  string // the client's
	jobKey string // the internal key, which the phases log
	cause  error  // logged, never sent
}

type route struct {
	segments []string // "{id}" matches any one segment
	methods  map[string]handlerFunc
	public   bool // no token needed
	// maxBody bounds the request body; bodyKey names its config key, and
	// bodyField the field a body too large is blamed on, if any.
	maxBody   int64
	bodyKey   string
	bodyField string
}

type server struct {
	opts   Options
	log    *slog.Logger
	routes []route
}

// New returns the API handler. It panics when a required option is missing:
// that is a wiring mistake, found at startup.
func New(opts Options) http.Handler {
	if opts.Store == nil || opts.Executor == nil || opts.Auth == nil {
		panic("api.New: Store, Executor and Auth are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = defaultPollInterval
	}
	opts.Server = limits(opts.Server)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &server{opts: opts, log: opts.Logger}
	s.routes = []route{
		{segments: []string{"healthz"}, public: true, methods: map[string]handlerFunc{http.MethodGet: s.healthz}},
		{segments: []string{"v1", "jobs"}, methods: map[string]handlerFunc{http.MethodPost: s.submit}},
		{segments: []string{"v1", "jobs", "{id}"}, methods: map[string]handlerFunc{http.MethodGet: s.status}},
		{segments: []string{"v1", "jobs", "{id}", "events"}, methods: map[string]handlerFunc{http.MethodGet: s.events}},
		{segments: []string{"v1", "jobs", "{id}", "cancel"}, methods: map[string]handlerFunc{http.MethodPost: s.cancel}},
		{segments: []string{"v1", "jobs", "{id}", "report"}, methods: map[string]handlerFunc{http.MethodGet: s.report}},
		{segments: []string{"v1", "providers"}, methods: map[string]handlerFunc{http.MethodGet: s.providers}},
	}
	s.routes = append(s.routes, s.sessionRoutes()...)
	s.routes = append(s.routes, s.toolRoutes()...)
	for i := range s.routes {
		if rt := &s.routes[i]; rt.bodyKey == "" {
			rt.maxBody, rt.bodyKey = int64(opts.Server.MaxBodyBytes), "max_body_bytes"
		}
	}
	return s
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &recorder{ResponseWriter: w, req: r}
	c := &call{}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			c.cause = fmt.Errorf("panic: %v", v)
			if !rec.wroteHeader {
				writeError(rec, &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error"})
			}
		}
		rec.dropUnreadBody()
		s.logRequest(r, rec, c, time.Since(start))
	}()
	if err := s.dispatch(rec, r, c); err != nil {
		var e *Error
		if !errors.As(err, &e) {
			c.cause = err
			e = &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error"}
		}
		if rec.wroteHeader {
			// A stream already under way cannot turn into an error
			// response; the log has it.
			if c.cause == nil {
				c.cause = err
			}
			return
		}
		writeError(rec, e)
	}
}

func (s *server) dispatch(w *recorder, r *http.Request, c *call) error {
	rt, id, ok := s.match(r.URL.Path)
	if !ok {
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "no such route: " + r.URL.Path}
	}
	method := r.Method
	if method == http.MethodHead {
		method = http.MethodGet
	}
	h, ok := rt.methods[method]
	if !ok {
		allow := make([]string, 0, len(rt.methods)+1)
		for m := range rt.methods {
			allow = append(allow, m)
			if m == http.MethodGet {
				allow = append(allow, http.MethodHead)
			}
		}
		slices.Sort(allow)
		w.Header().Set("Allow", strings.Join(allow, ", "))
		return &Error{Status: http.StatusMethodNotAllowed, Code: CodeMethodNotAllowed,
			Message: fmt.Sprintf("%s is not allowed here; allowed: %s", r.Method, strings.Join(allow, ", "))}
	}
	// Before authentication: a body too large is refused unread, and the
	// body of a request without a token is never waited for.
	if err := s.guardBody(w, r, rt); err != nil {
		return err
	}
	if !rt.public {
		if err := s.authenticate(w, r, c); err != nil {
			return err
		}
	}
	if id != "" {
		if !ids.Valid(id) {
			return jobNotFound(id)
		}
		r.SetPathValue("id", id)
		c.jobID = id
	}
	return h(w, r, c)
}

// match finds the route of path and the job id in it, if any.
func (s *server) match(path string) (route, string, bool) {
	segs := strings.Split(strings.TrimPrefix(path, "/"), "/")
	for _, rt := range s.routes {
		if len(rt.segments) != len(segs) {
			continue
		}
		id, ok := "", true
		for i, want := range rt.segments {
			switch {
			case want == "{id}" && segs[i] != "":
				id = segs[i]
			case strings.HasPrefix(want, "{") && segs[i] != "":
			case want != segs[i]:
				ok = false
			}
		}
		if ok {
			return rt, id, true
		}
	}
	return route{}, "", false
}

// authenticate sets c.tenant from the bearer token. The token appears in no
// answer and no log line.
func (s *server) authenticate(w http.ResponseWriter, r *http.Request, c *call) error {
	header := r.Header.Get("Authorization")
	if header == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sandstep"`)
		return &Error{Status: http.StatusUnauthorized, Code: CodeUnauthenticated, Message: "missing bearer token (Authorization: Bearer <token>)"}
	}
	token, ok := bearerToken(header)
	tenant := ""
	if ok {
		tenant, ok = s.opts.Auth.Tenant(token)
	}
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sandstep", error="invalid_token"`)
		return &Error{Status: http.StatusUnauthorized, Code: CodeUnauthenticated, Message: "invalid bearer token"}
	}
	c.tenant = tenant
	return nil
}

func (s *server) logRequest(r *http.Request, rec *recorder, c *call, d time.Duration) {
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	attrs := []slog.Attr{
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.Int("status", status),
		slog.Float64("duration_ms", float64(d.Microseconds())/1000),
		slog.Int64("bytes", rec.bytes),
	}
	if c.tenant != "" {
		attrs = append(attrs, slog.String("tenant", c.tenant))
	}
	if c.jobID != "" {
		attrs = append(attrs, slog.String("job_id", c.jobID))
	}
	if c.jobKey != "" {
		attrs = append(attrs, slog.String("job_key", c.jobKey))
	}
	level := slog.LevelInfo
	if c.cause != nil {
		attrs = append(attrs, slog.String("error", c.cause.Error()))
	}
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
	if rw.unread() {
		_ = http.NewResponseController(rw.ResponseWriter).SetReadDeadline(time.Now())
	}
}

// healthz answers whether the store answers, with the cheapest read there is:
// a job id the API never accepts, so it is never found.
func (s *server) healthz(w http.ResponseWriter, r *http.Request, c *call) error {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if _, err := s.opts.Store.GetJob(ctx, "#healthz"); err != nil && !errors.Is(err, store.ErrNotFound) {
		c.cause = err
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "the job store does not answer"}
	}
	return writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

type providerView struct {
	Active providerInfoView `json:"active"`
}

type providerInfoView struct {
	Name         string           `json:"name"`
	Version      string           `json:"version"`
	APIVersion   int              `json:"api_version"`
	Capabilities capabilitiesView `json:"capabilities"`
}

type capabilitiesView struct {
	Snapshots          bool                    `json:"snapshots"`
	Volumes            bool                    `json:"volumes"`
	NamedSandboxes     bool                    `json:"named_sandboxes"`
	ListByLabels       bool                    `json:"list_by_labels"`
	ExecStreaming      bool                    `json:"exec_streaming"`
	FileAPI            bool                    `json:"file_api"`
	PublicURL          bool                    `json:"public_url"`
	HostScopedSecrets  bool                    `json:"host_scoped_secrets"`
	NetworkModes       []providers.NetworkMode `json:"network_modes"`
	MaxLifetimeSeconds int64                   `json:"max_lifetime_seconds"`
	Regions            []string                `json:"regions"`
	Limits             limitsView              `json:"limits"`
}

// limitsView says how the provider enforces resource limits: the cgroup
// version ("v2", "v1", "none"; "" for hosted backends), how volume
// capacity holds, and which limits hold.
type limitsView struct {
	Cgroups  string   `json:"cgroups"`
	Volumes  string   `json:"volumes"`
	Enforced []string `json:"enforced"`
}

func (s *server) providers(w http.ResponseWriter, r *http.Request, c *call) error {
	if s.opts.Provider == nil {
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "no sandbox provider is configured"}
	}
	info, err := s.opts.Provider.Info(r.Context())
	if err != nil {
		c.cause = err
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "the sandbox provider does not answer"}
	}
	caps := info.Capabilities
	v := providerView{Active: providerInfoView{
		Name: info.Name, Version: info.Version, APIVersion: info.APIVersion,
		Capabilities: capabilitiesView{
			Snapshots: caps.Snapshots, Volumes: caps.Volumes, NamedSandboxes: caps.NamedSandboxes,
			ListByLabels: caps.ListByLabels, ExecStreaming: caps.ExecStreaming, FileAPI: caps.FileAPI,
			PublicURL: caps.PublicURL, HostScopedSecrets: caps.HostScopedSecrets, NetworkModes: nonNil(caps.NetworkModes),
			MaxLifetimeSeconds: int64(caps.MaxLifetime / time.Second), Regions: nonNil(caps.Regions),
			Limits: limitsView{Cgroups: caps.Limits.Cgroups, Volumes: caps.Limits.Volumes, Enforced: nonNil(caps.Limits.Enforced)},
		},
	}}
	return writeJSON(w, http.StatusOK, v)
}

// nonNil makes an absent list an empty JSON array rather than null.
func nonNil[T any](v []T) []T {
	if v == nil {
		return []T{}
	}
	return v
}
