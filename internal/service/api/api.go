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
	"log/slog"
	"net/http"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/direct"
	"github.com/sandstep/sandstep/internal/service/docsearch"
	"github.com/sandstep/sandstep/internal/service/quota"
	"github.com/sandstep/sandstep/internal/service/sandboxes"
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
	// AgentExecutor runs the agent-run state machine; nil refuses agent
	// runs. Agents are the configured [agents.<name>].
	AgentExecutor Executor
	Agents        config.AgentsConfig
	// Provider answers GET /v1/providers; nil makes that route 503.
	Provider ProviderInfo
	// SandboxCounters are the lifecycle counts GET /v1/providers shows
	// (the caller's tenant's); nil means sandboxes.ProcessCounters(), what
	// every Manager of this process counts into.
	SandboxCounters *sandboxes.Counters
	// Deployment is this stack's id ([provider] deployment; the stack
	// name in AWS), shown by GET /v1/providers.
	Deployment string
	Auth       *Authenticator
	// Sessions serves /v1/sessions; nil (or not enabled) makes those
	// routes answer 404.
	Sessions *sessions.Service
	// Sandboxes serves /v1/sandboxes and the Sandy-compatible
	// /api/sandboxes; nil makes those routes answer 404.
	Sandboxes *direct.Service
	// PortProxy forwards requests to a sandbox's exposed port (package
	// portproxy); nil where the server cannot reach the provider's
	// forwarders (the API Lambda): a port with a URL of the provider's own
	// is then redirected to, others answer 501.
	PortProxy func(target, prefix string, onError func(http.ResponseWriter, *http.Request, error)) (http.Handler, error)
	// Docs runs search_docs and keeps code modules (the LLM tools, on
	// with Sessions); Tools describes them (tools.SettingsFrom).
	Docs  *docsearch.Service
	Tools tools.Settings
	// Quotas, when set, admit every new job (concurrent_jobs,
	// jobs_per_hour); nil allows everything.
	Quotas *quota.Enforcer
	// Pricing, when set, turns usage into cost on GET /v1/jobs/{id} and
	// GET /v1/usage; nil answers "cost": null.
	Pricing *config.PricingConfig
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

type server struct {
	opts Options
	log  *slog.Logger
	// patterns are the routes registered, in order: the spec's drift test
	// compares them with openapi.json and template.yaml.
	patterns []string
}

// New returns the API handler: the routes on a ServeMux, each wrapped in
// what it needs (a bounded body, a bearer token, a valid job id), and all
// of them in panic recovery and request logging. It panics when a
// required option is missing: that is a wiring mistake, found at startup.
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
	mux := http.NewServeMux()
	s.register(mux)
	return s.logRequests(s.recoverPanics(s.routeErrors(mux)))
}

// register puts every route on mux. Each is described in openapi.json and,
// for API Gateway, in template.yaml (TestOpenAPIDescribesEveryRoute).
func (s *server) register(mux *http.ServeMux) {
	// A GET route answers HEAD too; ServeMux sees to that.
	s.handle(mux, "GET /healthz", s.healthz, public)
	s.handle(mux, "POST /v1/jobs", s.submit)
	s.handle(mux, "GET /v1/jobs", s.listJobs)
	s.handle(mux, "GET /v1/jobs/{id}", s.status, jobRoute)
	s.handle(mux, "GET /v1/jobs/{id}/events", s.events, jobRoute)
	s.handle(mux, "POST /v1/jobs/{id}/cancel", s.cancel, jobRoute)
	s.handle(mux, "GET /v1/jobs/{id}/report", s.report, jobRoute)
	s.handle(mux, "GET /v1/jobs/{id}/artifacts", s.keptArtifacts, jobRoute)
	s.handle(mux, "GET /v1/jobs/{id}/artifacts/{path...}", s.jobArtifact, jobRoute)
	s.agentRoutes(mux)
	s.handle(mux, "GET /v1/providers", s.providers)
	s.handle(mux, "GET /v1/usage", s.usage)
	s.sessionRoutes(mux)
	s.sandboxRoutes(mux)
	s.toolRoutes(mux)
	s.consoleRoutes(mux)
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
	// Deployment is the id in the labels of everything this stack
	// creates at the provider; its reaper touches nothing else.
	Deployment string            `json:"deployment"`
	Active     providerInfoView  `json:"active"`
	Sandboxes  sandboxCountsView `json:"sandboxes"`
}

// sandboxCountsView is what the sandboxes of the caller's tenant went
// through in this process (sandboxes.Counters): on a machine, the whole
// stack; in AWS, this API instance's direct sandboxes only, the rest is
// in the log lines.
type sandboxCountsView struct {
	Scope         string    `json:"scope"`
	Since         time.Time `json:"since"`
	Created       int64     `json:"created"`
	Reused        int64     `json:"reused"`
	Failed        int64     `json:"failed"`
	Refused       int64     `json:"refused"`
	CleanedUp     int64     `json:"cleaned_up"`
	CleanupFailed int64     `json:"cleanup_failed"`
	Gone          int64     `json:"gone"`
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
	ListSnapshots      bool                    `json:"list_snapshots"`
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
	v := providerView{Deployment: s.opts.Deployment, Active: providerInfoView{
		Name: info.Name, Version: info.Version, APIVersion: info.APIVersion,
		Capabilities: capabilitiesView{
			Snapshots: caps.Snapshots, Volumes: caps.Volumes, NamedSandboxes: caps.NamedSandboxes,
			ListByLabels: caps.ListByLabels, ExecStreaming: caps.ExecStreaming, FileAPI: caps.FileAPI,
			PublicURL: caps.PublicURL, HostScopedSecrets: caps.HostScopedSecrets, ListSnapshots: caps.ListSnapshots, NetworkModes: nonNil(caps.NetworkModes),
			MaxLifetimeSeconds: int64(caps.MaxLifetime / time.Second), Regions: nonNil(caps.Regions),
			Limits: limitsView{Cgroups: caps.Limits.Cgroups, Volumes: caps.Limits.Volumes, Enforced: nonNil(caps.Limits.Enforced)},
		},
	}}
	v.Sandboxes = s.sandboxCounts(c.tenant)
	return writeJSON(w, http.StatusOK, v)
}

// sandboxCounts sums the counts of tenant's sandboxes. A process has one
// configured provider, so every count is the active provider's.
func (s *server) sandboxCounts(tenant string) sandboxCountsView {
	counters := s.opts.SandboxCounters
	if counters == nil {
		counters = sandboxes.ProcessCounters()
	}
	sum := sandboxes.Stats{}
	for _, st := range counters.Snapshot() {
		if st.Tenant == tenant {
			sum.Sum(st)
		}
	}
	return sandboxCountsView{Scope: "process", Since: counters.Since(), Created: sum.Created, Reused: sum.Reused, Failed: sum.Failed,
		Refused: sum.Refused, CleanedUp: sum.CleanedUp, CleanupFailed: sum.CleanupFailed, Gone: sum.Gone}
}

// nonNil makes an absent list an empty JSON array rather than null.
func nonNil[T any](v []T) []T {
	if v == nil {
		return []T{}
	}
	return v
}
