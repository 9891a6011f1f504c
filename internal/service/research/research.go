// Package research holds the phases of the deep-research job: one plain Go
// function per state of statemachine/deep-research.asl.json. Each Lambda in
// functions/ wraps one of them with aws-lambda-go, and the local engine calls
// the very same functions through the same aws-lambda-go handler, so there is
// no local version of any phase.
//
// Phases keep their payloads small (ids and flags); everything bulky lives in
// the store. Every phase may be run twice for one call (Lambda delivers at
// least once, and the state machine retries service errors), so each one is
// idempotent: the sandbox is found again through the ledger instead of being
// created twice, and events carry idempotency keys.
package research

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/report"
	"github.com/sandstep/sandstep/internal/service/sandboxes"
	"github.com/sandstep/sandstep/internal/service/search"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/providers"
)

// Phases are the deep-research phases with what they need. The zero values of
// the optional fields are sensible defaults.
type Phases struct {
	Store *store.Store
	// Provider runs commands and moves files in the job's sandbox;
	// Sandboxes, over the same provider, creates and terminates it.
	Provider  providers.Provider
	Sandboxes *sandboxes.Manager
	Config    *config.Config
	Logger    *slog.Logger
	// CancelPoll is how often a running phase re-reads its job to notice a
	// cancel request. Default 2 s.
	CancelPoll time.Duration
	// WarmupAttempts and WarmupBackoff bound the sandbox warmup (exec true
	// until it answers). Defaults 5 and 500 ms, doubling, with jitter.
	WarmupAttempts int
	WarmupBackoff  time.Duration

	// Search are the web search backends, in the configured order.
	Search []search.Backend
	// LLM writes the report; nil means an extractive report.
	LLM *report.Client
	// CrawlerBinary is the crawler on the host, uploaded to sandboxes
	// that do not mount it.
	CrawlerBinary string
	// CrawlSlice bounds one Crawl call's supervision (default 10 min, and
	// never past the Lambda's deadline); PollInterval is how often it reads
	// the crawler's progress (default 500 ms).
	CrawlSlice   time.Duration
	PollInterval time.Duration
}

// Input is what every phase receives from the state machine.
type Input struct {
	// JobID is the job's internal key (package ids), which names its store
	// record, execution and sandbox; never the client's id, which is unique
	// within its tenant only.
	JobID     string `json:"job_id"`
	SandboxID string `json:"sandbox_id,omitempty"`
}

// JobCancelled is returned by a phase that found its job cancelled. Step
// Functions names the error after the Go type (as aws-lambda-go reports it),
// so the state machine's Catch and the Cleanup phase see "JobCancelled".
type JobCancelled struct{ JobID string }

func (e *JobCancelled) Error() string { return "job " + e.JobID + " was cancelled" }

// BadInput is returned when a phase is invoked with input it cannot use; it
// is not retried (the same input would fail the same way).
type BadInput struct{ Message string }

func (e *BadInput) Error() string { return e.Message }

func (p *Phases) logger() *slog.Logger {
	if p.Logger != nil {
		return p.Logger
	}
	return slog.Default()
}

// EventData is the payload of a progress event: a stage (one of the step
// ids or "job"), its status and a human message, with optional progress.
type EventData struct {
	Stage   string `json:"stage"`
	Status  string `json:"status"`
	Message string `json:"message"`
	Current int    `json:"current,omitempty"`
	Total   int    `json:"total,omitempty"`
	URL     string `json:"url,omitempty"`
}

// run is one phase invocation on one job: it loads the job, refuses to work
// on a cancelled or finished one, and watches the job while the phase runs
// so that a cancel request stops the phase within CancelPoll.
type run struct {
	p      *Phases
	job    store.Job
	req    store.JobRequest
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelCauseFunc
	// use counts what the invocation uses; usageKey names its record (the
	// phase, and what tells its invocations apart: the crawl's offset).
	use      *usageMeter
	usageKey string
}

var errCancelRequested = errors.New("cancel requested")

// begin starts a phase on in.JobID. The caller must call r.end.
func (p *Phases) begin(ctx context.Context, phase string, in Input) (*run, error) {
	if in.JobID == "" {
		return nil, &BadInput{Message: "job_id is missing from the phase input"}
	}
	job, err := p.Store.GetJob(ctx, in.JobID)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, &BadInput{Message: fmt.Sprintf("job %s does not exist", in.JobID)}
		}
		return nil, fmt.Errorf("%s: load job: %w", phase, err)
	}
	if job.CancelRequested || job.Status == store.StatusCancelled {
		return nil, &JobCancelled{JobID: job.ID}
	}
	if job.Status.Terminal() {
		return nil, &BadInput{Message: fmt.Sprintf("job %s already ended %s", job.ID, job.Status)}
	}
	var req store.JobRequest
	if err := json.Unmarshal(job.Request, &req); err != nil {
		return nil, &BadInput{Message: fmt.Sprintf("job %s: stored request: %v", job.ID, err)}
	}
	if job.Status == store.StatusQueued {
		job, err = p.Store.UpdateJob(ctx, job.ID, store.JobUpdate{IfStatus: []store.Status{store.StatusQueued}, Status: store.StatusRunning, Phase: &phase})
	} else if job.Phase != phase {
		job, err = p.Store.UpdateJob(ctx, job.ID, store.JobUpdate{IfStatus: []store.Status{store.StatusRunning}, Phase: &phase})
	}
	if err != nil {
		if job.CancelRequested {
			return nil, &JobCancelled{JobID: job.ID}
		}
		return nil, fmt.Errorf("%s: start: %w", phase, err)
	}
	r := &run{p: p, job: job, req: req, log: p.logger().With("job_key", job.ID, "tenant", job.Tenant, "job_id", job.ClientID, "phase", phase),
		use: &usageMeter{}, usageKey: phase}
	r.ctx, r.cancel = context.WithCancelCause(ctx)
	r.ctx = r.withMeter(r.ctx)
	go r.watch()
	return r, nil
}

// watch cancels the phase's context when the job's cancel is requested.
func (r *run) watch() {
	every := r.p.CancelPoll
	if every <= 0 {
		every = 2 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
			job, err := r.p.Store.GetJob(r.ctx, r.job.ID)
			if err == nil && job.CancelRequested {
				r.cancel(errCancelRequested)
				return
			}
		}
	}
}

// end stops the watcher and turns a failure caused by a cancel into
// JobCancelled, so the state machine takes the cancel path.
func (r *run) end(err error) error {
	cancelled := errors.Is(context.Cause(r.ctx), errCancelRequested)
	r.cancel(nil)
	// What the invocation spent counts however it ended; a record that
	// cannot be written fails the invocation, whose retry writes it.
	if uerr := r.recordUsage(); uerr != nil {
		r.log.Warn("record usage", "err", uerr)
		if err == nil {
			return fmt.Errorf("record usage: %w", uerr)
		}
	}
	if err == nil {
		return nil
	}
	var jc *JobCancelled
	if cancelled || errors.As(err, &jc) {
		return &JobCancelled{JobID: r.job.ID}
	}
	return err
}

// checkCancel returns JobCancelled once a cancel was noticed.
func (r *run) checkCancel() error {
	if errors.Is(context.Cause(r.ctx), errCancelRequested) {
		return &JobCancelled{JobID: r.job.ID}
	}
	return nil
}

// step records a step's state. It also notices a cancel request, since the
// store returns the job with it.
func (r *run) step(id store.StepID, state store.StepState, current, total int) error {
	job, err := r.p.Store.SetStep(r.ctx, r.job.ID, store.Step{ID: id, State: state, Current: current, Total: total})
	if err != nil && !errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("step %s: %w", id, err)
	}
	if err == nil && job.CancelRequested {
		r.cancel(errCancelRequested)
		return &JobCancelled{JobID: r.job.ID}
	}
	return nil
}

// event appends progress events. key makes each idempotent across retries of
// the phase; it is prefixed with the job's execution so that a resubmitted
// job id does not collide.
func (r *run) event(key string, d EventData) error {
	return r.events([]string{key}, []EventData{d})
}

func (r *run) events(keys []string, ds []EventData) error {
	evs := make([]store.Event, len(ds))
	for i, d := range ds {
		data, err := json.Marshal(d)
		if err != nil {
			return err
		}
		evs[i] = store.Event{Key: keys[i], Type: d.Stage, Data: data}
	}
	if _, err := r.p.Store.AppendEvents(r.ctx, r.job.ID, evs); err != nil {
		return fmt.Errorf("record events: %w", err)
	}
	return nil
}

// fallback records a degradation the job took, with an event saying why.
func (r *run) fallback(name, stage, why string) error {
	if _, err := r.p.Store.UpdateJob(r.ctx, r.job.ID, store.JobUpdate{AddFallbacks: []string{name}}); err != nil {
		return fmt.Errorf("record fallback %s: %w", name, err)
	}
	return r.event("fallback:"+name, EventData{Stage: stage, Status: "fallback", Message: why})
}
