package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandstep/sandstep/internal/service/agents"
	"github.com/sandstep/sandstep/internal/service/ids"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/service/usage"
)

// agentRoutes are the agent runs: a job of type agent, on the agent-run
// state machine, with the job routes' machinery (idempotent job_id,
// events, cancel) and a result and artifacts of its own.
func (s *server) agentRoutes(mux *http.ServeMux) {
	s.handle(mux, "POST /v1/agent-runs", s.submitAgentRun)
	s.handle(mux, "GET /v1/agent-runs/{id}", s.agentRun, jobRoute)
	s.handle(mux, "GET /v1/agent-runs/{id}/events", s.agentEvents, jobRoute)
	s.handle(mux, "POST /v1/agent-runs/{id}/cancel", s.cancel, jobRoute)
	s.handle(mux, "GET /v1/agent-runs/{id}/result", s.agentResult, jobRoute)
	s.handle(mux, "GET /v1/agent-runs/{id}/artifacts", s.keptArtifacts, jobRoute)
	s.handle(mux, "GET /v1/agent-runs/{id}/artifacts/{path...}", s.agentArtifact, jobRoute)
}

type agentRunBody struct {
	Agent          *string           `json:"agent"`
	Prompt         *string           `json:"prompt"`
	Files          map[string]string `json:"files"`
	TimeoutSeconds *int64            `json:"timeout_seconds"`
	JobID          *string           `json:"job_id"`
	// Budget: only max_sandbox_seconds (agentBudget).
	Budget *budgetBody `json:"budget"`
}

// agentBudget checks an agent run's budget. Only max_sandbox_seconds can
// stop an agent in time: its sandboxes' time grows in the ledger as it
// runs, while its model tokens (and so most of its cost) are known only
// from the result line it prints at its end.
func agentBudget(b *budgetBody) (*store.JobBudget, error) {
	switch {
	case b == nil:
		return nil, nil
	case b.MaxTokens != nil:
		return nil, invalid("budget.max_tokens", "budget.max_tokens is not accepted for agent runs: an agent's tokens are known only from its final result, too late to stop it; use budget.max_sandbox_seconds (and the agent's own limits, such as Claude Code's --max-turns)")
	case b.MaxCost != nil:
		return nil, invalid("budget.max_cost", "budget.max_cost is not accepted for agent runs: an agent's model cost is known only from its final result, too late to stop it; use budget.max_sandbox_seconds")
	case b.MaxSandboxSeconds == nil:
		return nil, invalid("budget", "budget must set max_sandbox_seconds")
	case *b.MaxSandboxSeconds <= 0:
		return nil, invalid("budget.max_sandbox_seconds", "budget.max_sandbox_seconds must be greater than 0")
	}
	return &store.JobBudget{MaxSandboxSeconds: *b.MaxSandboxSeconds}, nil
}

func agentLinks(id string) links {
	self := "/v1/agent-runs/" + id
	return links{Self: self, Events: self + "/events", Report: self + "/result", Cancel: self + "/cancel", Artifacts: self + "/artifacts"}
}

// linksOf are a job's links by its type.
func linksOf(j store.Job) links {
	if j.Type == store.JobTypeAgent {
		return agentLinks(j.ClientID)
	}
	return jobLinks(j.ClientID)
}

// checkWorkspacePath says what is wrong with a path of files: relative to
// /workspace, and staying there.
func checkWorkspacePath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) || len(p) > 1024 || path.Clean(p) != p || p == "." || p == ".." || strings.HasPrefix(p, "../") {
		return fmt.Errorf("%q must be a clean path relative to /workspace", p)
	}
	return nil
}

func (s *server) decodeAgentRun(r *http.Request) (agentRunBody, agents.Request, error) {
	var body agentRunBody
	dec := json.NewDecoder(r.Body) // bounded by the route's guard
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return body, agents.Request{}, decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return body, agents.Request{}, invalid("", "the request body holds more than one JSON value")
	}
	var req agents.Request
	switch {
	case body.Agent == nil || *body.Agent == "":
		return body, req, invalid("agent", "agent is required: one of %s", strings.Join(s.opts.Agents.Names(), ", "))
	case body.Prompt == nil || strings.TrimSpace(*body.Prompt) == "":
		return body, req, invalid("prompt", "prompt is required and must not be blank")
	case len(*body.Prompt) > agents.MaxPromptBytes:
		return body, req, invalid("prompt", "prompt is %d bytes; the limit is %d", len(*body.Prompt), agents.MaxPromptBytes)
	case !utf8.ValidString(*body.Prompt):
		return body, req, invalid("prompt", "prompt must be UTF-8 text")
	case len(body.Files) > agents.MaxFiles:
		return body, req, invalid("files", "files has %d entries; the limit is %d", len(body.Files), agents.MaxFiles)
	case body.JobID != nil && !ids.Valid(*body.JobID):
		return body, req, invalid("job_id", "job_id must be 1 to %d characters of A-Z, a-z, 0-9, '.', '_' and '-' (and not \".\" or \"..\")", MaxJobIDLen)
	}
	ag, ok := s.opts.Agents[*body.Agent]
	if !ok || s.opts.AgentExecutor == nil {
		names := s.opts.Agents.Names()
		if len(names) == 0 {
			return body, req, invalid("agent", "agent %q is not configured: this server has no [agents.<name>] in its config", *body.Agent)
		}
		return body, req, invalid("agent", "agent %q is not configured; one of %s", *body.Agent, strings.Join(names, ", "))
	}
	for p := range body.Files {
		if err := checkWorkspacePath(p); err != nil {
			return body, req, invalid("files", "files: %v", err)
		}
	}
	timeout := ag.Timeout.D()
	if body.TimeoutSeconds != nil {
		timeout = time.Duration(*body.TimeoutSeconds) * time.Second
		if *body.TimeoutSeconds < 1 || timeout > ag.MaxTimeout.D() {
			return body, req, invalid("timeout_seconds", "timeout_seconds must be from 1 to %d for agent %q", int64(ag.MaxTimeout.D()/time.Second), *body.Agent)
		}
	}
	budget, err := agentBudget(body.Budget)
	if err != nil {
		return body, req, err
	}
	req = agents.Request{Agent: *body.Agent, Prompt: *body.Prompt, Files: body.Files, TimeoutSeconds: int64(timeout / time.Second), Budget: budget}
	return body, req, nil
}

// submitAgentRun is POST /v1/agent-runs: a job like POST /v1/jobs (quotas,
// an idempotent job_id, 202 when created), on the agent-run machine.
func (s *server) submitAgentRun(w http.ResponseWriter, r *http.Request, c *call) error {
	body, req, err := s.decodeAgentRun(r)
	if err != nil {
		return err
	}
	// The hash is of the request itself; where it was sent from is not
	// part of its identity.
	raw, err := json.Marshal(req)
	if err != nil {
		return err
	}
	hash := requestHash(raw)
	req.APIURL = s.apiURL(r)
	if raw, err = json.Marshal(req); err != nil {
		return err
	}
	id := ids.New(s.opts.Now())
	if body.JobID != nil {
		id = *body.JobID
	}
	return s.createJob(w, r, c, id, store.JobTypeAgent, raw, hash)
}

type agentRunView struct {
	JobID           string       `json:"job_id"`
	Agent           string       `json:"agent"`
	Status          store.Status `json:"status"`
	Error           *string      `json:"error"`
	SandboxID       *string      `json:"sandbox_id"`
	TimeoutSeconds  int64        `json:"timeout_seconds"`
	CancelRequested bool         `json:"cancel_requested"`
	CreatedAt       string       `json:"created_at"`
	UpdatedAt       string       `json:"updated_at"`
	FinishedAt      *string      `json:"finished_at"`
	Links           links        `json:"links"`
	// Budget is the request's (only max_sandbox_seconds), null without
	// one; Fallbacks holds budget_exhausted once it stopped the agent.
	Budget    *store.JobBudget `json:"budget"`
	Fallbacks []string         `json:"fallbacks"`
	// Usage is what the run used so far (its sandboxes' time, bytes out
	// and execs once they are terminated); Cost its cost at [pricing],
	// null without it.
	Usage usage.View  `json:"usage"`
	Cost  *usage.Cost `json:"cost"`
}

func (s *server) agentRun(w http.ResponseWriter, r *http.Request, c *call) error {
	job, err := s.job(r, c)
	if err != nil {
		return err
	}
	var req agents.Request
	_ = json.Unmarshal(job.Request, &req)
	v := agentRunView{
		JobID: job.ClientID, Agent: req.Agent, Status: viewStatus(job), Error: optional(job.Error),
		SandboxID: optional(job.SandboxID), TimeoutSeconds: req.TimeoutSeconds, CancelRequested: job.CancelRequested,
		CreatedAt: formatTime(job.CreatedAt), UpdatedAt: formatTime(job.UpdatedAt), Links: agentLinks(job.ClientID),
		Budget: req.Budget, Fallbacks: nonNil(job.Fallbacks),
	}
	if !job.FinishedAt.IsZero() {
		f := formatTime(job.FinishedAt)
		v.FinishedAt = &f
	}
	u, err := s.jobUsage(r.Context(), job)
	if err != nil {
		return err
	}
	v.Usage, v.Cost = usage.ViewOf(u), s.cost(u)
	return writeJSON(w, http.StatusOK, v)
}

type agentResultView struct {
	JobID  string       `json:"job_id"`
	Status store.Status `json:"status"`
	// Complete: the agent ended on its own; otherwise (cancelled, out of
	// time, its sandbox lost) the answer is what it printed until then.
	Complete  bool                  `json:"complete"`
	Answer    string                `json:"answer"`
	ExitCode  *int                  `json:"exit_code"`
	TimedOut  bool                  `json:"timed_out"`
	IsError   bool                  `json:"is_error"`
	Artifacts []artifactView        `json:"artifacts"`
	Skipped   []agents.ArtifactInfo `json:"skipped"`
	// Usage and Cost are the run's, as GET /v1/agent-runs/{id} shows them.
	Usage usage.View  `json:"usage"`
	Cost  *usage.Cost `json:"cost"`
}

// agentResult is the final answer, exit status and artifacts: 404 until
// the run has collected them.
func (s *server) agentResult(w http.ResponseWriter, r *http.Request, c *call) error {
	job, err := s.job(r, c)
	if err != nil {
		return err
	}
	rep, err := s.opts.Store.GetReport(r.Context(), job.ID)
	if errors.Is(err, store.ErrNotFound) {
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, JobID: job.ClientID, JobStatus: string(viewStatus(job)),
			Message: fmt.Sprintf("agent run %q has no result yet (it is %s)", job.ClientID, viewStatus(job))}
	}
	if err != nil {
		return err
	}
	var res agents.Result
	if err := json.Unmarshal(rep.Details, &res); err != nil {
		return fmt.Errorf("agent run %s: result details: %w", job.ID, err)
	}
	v := agentResultView{JobID: job.ClientID, Status: viewStatus(job), Complete: rep.Complete, Answer: rep.Markdown,
		ExitCode: res.ExitCode, TimedOut: res.TimedOut, IsError: res.IsError, Artifacts: []artifactView{}, Skipped: res.Skipped}
	if v.Skipped == nil {
		v.Skipped = []agents.ArtifactInfo{}
	}
	for _, a := range res.Artifacts {
		v.Artifacts = append(v.Artifacts, artifactView{Path: a.Path, Size: a.Size, ContentType: a.ContentType,
			URL: artifactURL(agentLinks(job.ClientID).Self, a.Path)})
	}
	u, err := s.jobUsage(r.Context(), job)
	if err != nil {
		return err
	}
	v.Usage, v.Cost = usage.ViewOf(u), s.cost(u)
	return writeJSON(w, http.StatusOK, v)
}
