// Package agents runs agent runs: a command-line agent (Claude Code, Codex,
// any command of [agents.<name>]) in a sandbox, as a durable job of the
// agent-run state machine (statemachine/agent-run.asl.json).
//
// The agent's sandbox is a direct sandbox (package direct) of the job's
// tenant: it gets SANDSTEP_URL and a SANDSTEP_TOKEN scoped to it, so the
// agent can start children, which end with it; the agent runs as a
// detached exec whose output is read by offset, so each phase is a short,
// stateless call that any Lambda can make. The model key never enters the
// sandbox: it is a host-scoped secret that the egress proxy puts into
// requests to the configured hosts.
//
// Phases (one handler, Handle, dispatching on Input.Phase):
//
//	provision  create the sandbox, write the prompt and files, run setup, start the agent
//	run        read the agent's output for one slice, turned into events
//	collect    keep /workspace/artifacts with the job, write the result
//	cleanup    collect what an unfinished run left, terminate the sandbox tree, close the job
package agents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/direct"
	"github.com/sandstep/sandstep/internal/service/engine"
	"github.com/sandstep/sandstep/internal/service/store"
)

// Request is an agent run's request as kept in Job.Request: normalized,
// defaults applied.
type Request struct {
	Agent          string            `json:"agent"`
	Prompt         string            `json:"prompt"`
	Files          map[string]string `json:"files,omitempty"`
	TimeoutSeconds int64             `json:"timeout_seconds"`
	// Budget bounds what the run may spend: only max_sandbox_seconds,
	// the time of its sandbox and children, which the run's slices can
	// see as it grows (the agent's tokens are known only from its final
	// result line, too late to stop it).
	Budget *store.JobBudget `json:"budget,omitempty"`
	// APIURL is the URL the run was submitted to, the children's API when
	// [sandboxes] api_url is not set.
	APIURL string `json:"api_url,omitempty"`
}

func sortedFiles(files map[string]string) []string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Limits of a request.
const (
	MaxPromptBytes = 256 << 10
	MaxFiles       = 64
	// MaxFilesBytes bounds the files' total: the request is kept in the
	// job record.
	MaxFilesBytes = 300 << 10
)

// Options configure Runs. Store and Direct are required.
type Options struct {
	Store  *store.Store
	Direct *direct.Service
	Agents config.AgentsConfig
	// Secret reads the agents' key_env references.
	Secret config.SecretLookup
	// Pricing prices a finished run's usage for its tenant's spending
	// ([quotas] max_cost_per_day and max_cost_per_month).
	Pricing config.PricingConfig
	// Slice is how long one run phase supervises the agent before the
	// state machine calls it again (default 60 s, well inside a Lambda's
	// 15 minutes).
	Slice time.Duration
	// Poll is how long one read of the output waits for more (default 1 s).
	Poll   time.Duration
	Logger *slog.Logger
	Now    func() time.Time
}

// Runs holds the phases. It keeps nothing between calls.
type Runs struct {
	o   Options
	log *slog.Logger
}

// New returns Runs.
func New(o Options) *Runs {
	if o.Store == nil || o.Direct == nil {
		panic("agents.New: Store and Direct are required")
	}
	if o.Slice <= 0 {
		o.Slice = time.Minute
	}
	if o.Poll <= 0 {
		o.Poll = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Secret == nil {
		o.Secret = func(r config.SecretRef) (string, error) { return "", fmt.Errorf("%s: no secret lookup configured", r) }
	}
	return &Runs{o: o, log: o.Logger}
}

// Agents is the configured agents.
func (r *Runs) Agents() config.AgentsConfig { return r.o.Agents }

// Phases of Input.Phase.
const (
	PhaseProvision = "provision"
	PhaseRun       = "run"
	PhaseCollect   = "collect"
	PhaseCleanup   = "cleanup"
)

// Input is what the state machine passes (and, for cleanup, the
// EventBridge execution status change event, which has no phase).
type Input struct {
	Phase     string `json:"phase"`
	JobID     string `json:"job_id"`
	SandboxID string `json:"sandbox_id,omitempty"`
	ExecID    string `json:"exec_id,omitempty"`
	Offset    int64  `json:"offset"`
	// Slice counts the run slices: the key of a slice's usage record,
	// its own even when the offset did not move.
	Slice   int                `json:"slice"`
	Outcome string             `json:"outcome,omitempty"`
	Error   *engine.StateError `json:"error,omitempty"`

	DetailType string               `json:"detail-type,omitempty"`
	Detail     *engine.StatusChange `json:"detail,omitempty"`
}

// Output is a phase's result: the state machine carries it as $.run.
type Output struct {
	SandboxID string `json:"sandbox_id,omitempty"`
	ExecID    string `json:"exec_id,omitempty"`
	Offset    int64  `json:"offset"`
	Slice     int    `json:"slice"`
	Done      bool   `json:"done"`
	ExitCode  int    `json:"exit_code"`
	TimedOut  bool   `json:"timed_out"`
	Status    string `json:"status,omitempty"`
}

// Errors the state machine sees by name (aws-lambda-go names an error by
// its type).
type (
	// JobCancelled: the job was cancelled; the Catch takes it to cleanup.
	JobCancelled struct{ JobID string }
	// AgentFailed: the agent exited non-zero or ran out of time.
	AgentFailed struct{ Message string }
	// BadInput is an input no retry can fix.
	BadInput struct{ Message string }
)

func (e *JobCancelled) Error() string { return "job " + e.JobID + " was cancelled" }
func (e *AgentFailed) Error() string  { return e.Message }
func (e *BadInput) Error() string     { return e.Message }

// Handle runs the phase the input names.
func (r *Runs) Handle(ctx context.Context, in Input) (Output, error) {
	if in.Phase == "" && in.Detail != nil {
		in.Phase, in.JobID = PhaseCleanup, in.Detail.Name
	}
	if in.JobID == "" {
		return Output{}, &BadInput{Message: "agent run phase: job_id is missing"}
	}
	job, err := r.o.Store.GetJob(ctx, in.JobID)
	if errors.Is(err, store.ErrNotFound) {
		return Output{}, &BadInput{Message: "job " + in.JobID + " does not exist"}
	}
	if err != nil {
		return Output{}, err
	}
	if job.Type != store.JobTypeAgent {
		return Output{}, &BadInput{Message: "job " + in.JobID + " is not an agent run"}
	}
	var req Request
	if err := json.Unmarshal(job.Request, &req); err != nil {
		return Output{}, &BadInput{Message: "job " + in.JobID + ": request: " + err.Error()}
	}
	c := &call{r: r, job: job, req: req, caller: direct.Caller{Tenant: job.Tenant},
		log: r.log.With("job_key", job.ID, "tenant", job.Tenant, "job_id", job.ClientID, "phase", in.Phase)}
	switch in.Phase {
	case PhaseProvision:
		return c.provision(ctx)
	case PhaseRun:
		return c.run(ctx, in)
	case PhaseCollect:
		return c.collect(ctx, in)
	case PhaseCleanup:
		return c.cleanup(ctx, in)
	}
	return Output{}, &BadInput{Message: fmt.Sprintf("agent run phase %q is not one of provision, run, collect, cleanup", in.Phase)}
}

// call is one phase invocation on one job.
type call struct {
	r      *Runs
	job    store.Job
	req    Request
	caller direct.Caller
	log    *slog.Logger
}

// event appends one event; key makes it idempotent across retries.
func (c *call) event(ctx context.Context, key, typ string, data map[string]any) error {
	data["type"] = typ
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	_, err = c.r.o.Store.AppendEvents(ctx, c.job.ID, []store.Event{{Key: key, Type: typ, Data: b, At: c.r.o.Now()}})
	return err
}

// cancelled re-reads the job: a cancel request stops every phase but
// cleanup.
func (c *call) cancelled(ctx context.Context) error {
	job, err := c.r.o.Store.GetJob(ctx, c.job.ID)
	if err != nil {
		return err
	}
	c.job = job
	if job.CancelRequested || job.Status == store.StatusCancelled {
		return &JobCancelled{JobID: job.ID}
	}
	return nil
}
