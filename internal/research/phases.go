package research

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandstep/sandstep/internal/store"
	"github.com/sandstep/sandstep/providers"
)

// DiscoverOutput tells the state machine what discovery found.
type DiscoverOutput struct {
	Sources   int  `json:"sources"`
	Summarize bool `json:"summarize"`
}

// Discover collects the job's sources: the seed URLs of the request. They are
// stored with their snippets, the last fallback of every later phase.
func (p *Phases) Discover(ctx context.Context, in Input) (DiscoverOutput, error) {
	r, err := p.begin(ctx, "discover", in)
	if err != nil {
		return DiscoverOutput{}, err
	}
	out, err := r.discover()
	return out, r.end(err)
}

func (r *run) discover() (DiscoverOutput, error) {
	if err := r.step(store.StepSearch, store.StepRunning, 0, 0); err != nil {
		return DiscoverOutput{}, err
	}
	sources := make([]store.Source, 0, len(r.req.SeedURLs))
	for i, u := range r.req.SeedURLs {
		sources = append(sources, store.Source{N: i + 1, URL: u, Title: u, Snippet: "Seed URL given with the request.", Origin: store.OriginSearch})
	}
	if len(sources) > 0 {
		if err := r.p.Store.PutSources(r.ctx, r.job.ID, sources); err != nil {
			return DiscoverOutput{}, fmt.Errorf("store sources: %w", err)
		}
	}
	if err := r.event("discover:done", EventData{Stage: string(store.StepSearch), Status: "complete", Message: fmt.Sprintf("%d sources found", len(sources)), Total: len(sources)}); err != nil {
		return DiscoverOutput{}, err
	}
	if err := r.step(store.StepSearch, store.StepComplete, len(sources), len(sources)); err != nil {
		return DiscoverOutput{}, err
	}
	return DiscoverOutput{Sources: len(sources)}, nil
}

// ProvisionOutput says whether the job has a sandbox; without one the state
// machine goes straight to the report, built from the search snippets.
type ProvisionOutput struct {
	OK        bool   `json:"ok"`
	SandboxID string `json:"sandbox_id,omitempty"`
	Fallback  string `json:"fallback,omitempty"`
}

// FallbackSnippets is recorded when the job runs without a sandbox.
const FallbackSnippets = "snippets"

// Provision creates the job's sandbox (named after the job, recorded in the
// ledger first), warms it up and checks for a browser.
func (p *Phases) Provision(ctx context.Context, in Input) (ProvisionOutput, error) {
	r, err := p.begin(ctx, "provision", in)
	if err != nil {
		return ProvisionOutput{}, err
	}
	out, err := r.provision()
	return out, r.end(err)
}

func (r *run) provision() (ProvisionOutput, error) {
	if err := r.step(store.StepSandbox, store.StepRunning, 0, 0); err != nil {
		return ProvisionOutput{}, err
	}
	cfg := r.p.Config
	sb, err := r.ensureSandbox(providers.CreateSpec{
		Name: r.job.ID,
		Labels: map[string]string{
			providers.LabelOwner:  "sandstep",
			providers.LabelTenant: r.job.Tenant,
			providers.LabelJob:    r.job.ID,
		},
		Network:  providers.NetworkPolicy{Mode: providers.NetworkAll},
		Lifetime: cfg.Sandbox.Lifetime.D(),
	})
	if err == nil {
		_, err = r.p.Store.UpdateJob(r.ctx, r.job.ID, store.JobUpdate{SandboxID: &sb.ID})
		if err == nil {
			err = r.event("provision:created", EventData{Stage: string(store.StepSandbox), Status: "complete", Message: "sandbox " + sb.ID + " created"})
		}
		if err == nil {
			err = r.step(store.StepSandbox, store.StepComplete, 0, 0)
		}
		if err == nil {
			if err = r.step(store.StepSetup, store.StepRunning, 0, 0); err == nil {
				err = r.warmup(sb.ID)
			}
		}
	}
	if err != nil {
		if cerr := r.checkCancel(); cerr != nil {
			return ProvisionOutput{}, cerr
		}
		var jc *JobCancelled
		if errors.As(err, &jc) {
			return ProvisionOutput{}, err
		}
		// No usable sandbox: the job goes on with the search snippets. The
		// sandbox, if one was made, is terminated by Cleanup.
		r.log.Warn("no sandbox, falling back to snippets", "err", err)
		if serr := r.step(store.StepSandbox, store.StepError, 0, 0); serr != nil {
			return ProvisionOutput{}, serr
		}
		if ferr := r.fallback(FallbackSnippets, string(store.StepSandbox), "no sandbox ("+err.Error()+"): the report is built from the search snippets"); ferr != nil {
			return ProvisionOutput{}, ferr
		}
		return ProvisionOutput{OK: false, Fallback: FallbackSnippets}, nil
	}
	if err := r.step(store.StepSetup, store.StepComplete, 0, 0); err != nil {
		return ProvisionOutput{}, err
	}
	if err := r.checkBrowser(sb.ID); err != nil {
		return ProvisionOutput{}, err
	}
	return ProvisionOutput{OK: true, SandboxID: sb.ID}, nil
}

// checkBrowser looks for a headless browser in the sandbox; without one the
// crawler fetches pages over plain HTTP.
func (r *run) checkBrowser(id string) error {
	if err := r.step(store.StepBrowser, store.StepRunning, 0, 0); err != nil {
		return err
	}
	var out bytes.Buffer
	res, err := r.p.Provider.Exec(r.ctx, id, providers.ExecRequest{
		Shell:   "command -v chromium || command -v chromium-browser || command -v google-chrome || true",
		Stdout:  &out,
		Timeout: 30 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("check browser: %w", err)
	}
	msg := "no browser in the sandbox: pages are fetched over HTTP"
	if path := strings.TrimSpace(out.String()); res.ExitCode == 0 && path != "" {
		msg = "browser found at " + path
	}
	if err := r.event("provision:browser", EventData{Stage: string(store.StepBrowser), Status: "complete", Message: msg}); err != nil {
		return err
	}
	return r.step(store.StepBrowser, store.StepComplete, 0, 0)
}

// CrawlOutput tells the state machine whether to call Crawl again.
type CrawlOutput struct {
	Done    bool `json:"done"`
	Sources int  `json:"sources"`
}

// Crawl hands the sources to the sandbox and runs a command there over them.
func (p *Phases) Crawl(ctx context.Context, in Input) (CrawlOutput, error) {
	r, err := p.begin(ctx, "crawl", in)
	if err != nil {
		return CrawlOutput{}, err
	}
	out, err := r.crawl(in.SandboxID)
	return out, r.end(err)
}

func (r *run) crawl(sandboxID string) (CrawlOutput, error) {
	if sandboxID == "" {
		return CrawlOutput{}, &BadInput{Message: "crawl needs sandbox_id"}
	}
	sources, err := r.p.Store.ListSources(r.ctx, r.job.ID)
	if err != nil {
		return CrawlOutput{}, fmt.Errorf("list sources: %w", err)
	}
	if err := r.step(store.StepCrawl, store.StepRunning, 0, len(sources)); err != nil {
		return CrawlOutput{}, err
	}
	var list strings.Builder
	for _, s := range sources {
		list.WriteString(s.URL + "\n")
	}
	if err := r.p.Provider.WriteFile(r.ctx, sandboxID, providers.WriteFileRequest{Path: "/workspace/sources.txt", Content: strings.NewReader(list.String())}); err != nil {
		return CrawlOutput{}, fmt.Errorf("deliver sources: %w", err)
	}
	var out bytes.Buffer
	res, err := r.p.Provider.Exec(r.ctx, sandboxID, providers.ExecRequest{Argv: []string{"wc", "-l", "/workspace/sources.txt"}, Stdout: &out, Timeout: time.Minute})
	if err != nil {
		return CrawlOutput{}, fmt.Errorf("crawl: %w", err)
	}
	if res.ExitCode != 0 {
		return CrawlOutput{}, fmt.Errorf("crawl: command exited %d", res.ExitCode)
	}
	if err := r.event("crawl:done", EventData{Stage: string(store.StepCrawl), Status: "complete", Message: "sandbox saw " + strings.TrimSpace(out.String()), Current: len(sources), Total: len(sources)}); err != nil {
		return CrawlOutput{}, err
	}
	if err := r.step(store.StepCrawl, store.StepComplete, len(sources), len(sources)); err != nil {
		return CrawlOutput{}, err
	}
	return CrawlOutput{Done: true, Sources: len(sources)}, nil
}

// SummarizeOutput says whether summaries were produced.
type SummarizeOutput struct {
	OK bool `json:"ok"`
}

// Summarize runs the summarizing step over the collected sources.
func (p *Phases) Summarize(ctx context.Context, in Input) (SummarizeOutput, error) {
	r, err := p.begin(ctx, "summarize", in)
	if err != nil {
		return SummarizeOutput{}, err
	}
	err = r.step(store.StepAnalysis, store.StepRunning, 0, 0)
	if err == nil {
		err = r.event("summarize:skipped", EventData{Stage: string(store.StepAnalysis), Status: "complete", Message: "no summarizing agent configured: the report uses the raw extracts"})
	}
	if err == nil {
		err = r.step(store.StepAnalysis, store.StepComplete, 0, 0)
	}
	return SummarizeOutput{}, r.end(err)
}

// ReportOutput describes the saved report.
type ReportOutput struct {
	Bytes   int `json:"bytes"`
	Sources int `json:"sources"`
}

// Report writes the job's report from its stored sources.
func (p *Phases) Report(ctx context.Context, in Input) (ReportOutput, error) {
	r, err := p.begin(ctx, "report", in)
	if err != nil {
		return ReportOutput{}, err
	}
	out, err := r.report()
	return out, r.end(err)
}

func (r *run) report() (ReportOutput, error) {
	if st := r.job.Step(store.StepAnalysis).State; st == store.StepPending {
		// Summaries were not asked for: the analysis is the raw extracts.
		if err := r.step(store.StepAnalysis, store.StepComplete, 0, 0); err != nil {
			return ReportOutput{}, err
		}
	}
	if err := r.step(store.StepFinalize, store.StepRunning, 0, 0); err != nil {
		return ReportOutput{}, err
	}
	sources, err := r.p.Store.ListSources(r.ctx, r.job.ID)
	if err != nil {
		return ReportOutput{}, fmt.Errorf("list sources: %w", err)
	}
	md := extractiveReport(r.req.Query, sources)
	if err := r.p.Store.PutReport(r.ctx, r.job.ID, md, true); err != nil {
		return ReportOutput{}, fmt.Errorf("save report: %w", err)
	}
	if err := r.event("report:done", EventData{Stage: string(store.StepFinalize), Status: "complete", Message: fmt.Sprintf("report written from %d sources", len(sources))}); err != nil {
		return ReportOutput{}, err
	}
	if err := r.step(store.StepFinalize, store.StepComplete, 0, 0); err != nil {
		return ReportOutput{}, err
	}
	return ReportOutput{Bytes: len(md), Sources: len(sources)}, nil
}

// extractiveReport builds the report's sections from the sources alone; every
// [n] refers to a stored source.
func extractiveReport(query string, sources []store.Source) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n## Executive summary\n\n", query)
	if len(sources) == 0 {
		b.WriteString("No sources were collected for this query.\n\n")
	} else {
		fmt.Fprintf(&b, "This report draws on %d collected sources.\n\n", len(sources))
	}
	b.WriteString("## Key findings\n\n")
	for _, s := range sources {
		text := s.Content
		if text == "" {
			text = s.Snippet
		}
		fmt.Fprintf(&b, "- %s [%d]\n", firstSentence(text), s.N)
	}
	b.WriteString("\n## Evidence and context\n\n")
	for _, s := range sources {
		fmt.Fprintf(&b, "- %s: %s [%d]\n", s.Title, firstSentence(s.Snippet), s.N)
	}
	b.WriteString("\n## Implications and trade-offs\n\nThe findings above are extracted from the sources without a language model; read the cited pages for context.\n\n")
	b.WriteString("## Open questions and next steps\n\n- Which of the sources is most authoritative for the question?\n\n## Sources\n\n")
	for _, s := range sources {
		fmt.Fprintf(&b, "%d. [%s](%s)\n", s.N, s.Title, s.URL)
	}
	return b.String()
}

func firstSentence(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if i := strings.IndexAny(s, ".!?"); i > 0 && i < 300 {
		return s[:i+1]
	}
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

// StateError is the {"Error","Cause"} object a Catch puts at its ResultPath.
type StateError struct {
	Error string `json:"Error"`
	Cause string `json:"Cause"`
}

// CleanupInput is either the state machine's input to Cleanup or the
// EventBridge "Step Functions Execution Status Change" event, which invokes
// Cleanup for executions that ended where no Catch runs (aborted, timed out).
type CleanupInput struct {
	JobID   string      `json:"job_id"`
	Outcome string      `json:"outcome"`
	Error   *StateError `json:"error,omitempty"`

	DetailType string        `json:"detail-type,omitempty"`
	Detail     *StatusChange `json:"detail,omitempty"`
}

// StatusChange is the detail of an execution status change event.
type StatusChange struct {
	ExecutionARN string `json:"executionArn"`
	Name         string `json:"name"`
	Status       string `json:"status"`
	Error        string `json:"error,omitempty"`
	Cause        string `json:"cause,omitempty"`
}

// CleanupOutput is the job's final status.
type CleanupOutput struct {
	Status     string `json:"status"`
	Terminated int    `json:"terminated"`
}

// Cleanup terminates the job's sandboxes and closes the job. It runs on
// success, from every Catch, and again from the status-change rule and the
// reaper, so it is idempotent: a second call terminates nothing new and
// keeps the status the first one set.
func (p *Phases) Cleanup(ctx context.Context, in CleanupInput) (CleanupOutput, error) {
	jobID := in.JobID
	if jobID == "" && in.Detail != nil {
		jobID = in.Detail.Name
	}
	if jobID == "" {
		return CleanupOutput{}, &BadInput{Message: "cleanup needs job_id or an execution status change event"}
	}
	log := p.logger().With("job_id", jobID, "phase", "cleanup")
	job, err := p.Store.GetJob(ctx, jobID)
	if errors.Is(err, store.ErrNotFound) {
		return CleanupOutput{}, &BadInput{Message: "job " + jobID + " does not exist"}
	}
	if err != nil {
		return CleanupOutput{}, fmt.Errorf("cleanup: load job: %w", err)
	}
	if !job.Status.Terminal() {
		if _, err := p.Store.SetStep(ctx, jobID, store.Step{ID: store.StepCleanup, State: store.StepRunning}); err != nil && !errors.Is(err, store.ErrConflict) {
			return CleanupOutput{}, fmt.Errorf("cleanup: %w", err)
		}
	}
	// Sandboxes first: whatever happens to the record, nothing keeps running.
	reason := "completed"
	if job.CancelRequested {
		reason = "cancelled"
	}
	n, err := p.terminateJobSandboxes(ctx, jobID, reason)
	if err != nil {
		return CleanupOutput{}, fmt.Errorf("cleanup: %w", err)
	}
	if job.Status.Terminal() {
		return CleanupOutput{Status: string(job.Status), Terminated: n}, nil
	}
	status, msg := finalStatus(job, in)
	// The store allows each final status only from the statuses that may
	// legally precede it.
	upd := store.JobUpdate{Status: status}
	if msg != "" {
		upd.Error = &msg
	}
	// Steps left running ended with the failure.
	if status != store.StatusSucceeded {
		for _, s := range job.Steps {
			if s.State == store.StepRunning && s.ID != store.StepCleanup {
				if _, err := p.Store.SetStep(ctx, jobID, store.Step{ID: s.ID, State: store.StepError, Current: s.Current, Total: s.Total}); err != nil && !errors.Is(err, store.ErrConflict) {
					return CleanupOutput{}, fmt.Errorf("cleanup: %w", err)
				}
			}
		}
	}
	if _, err := p.Store.SetStep(ctx, jobID, store.Step{ID: store.StepCleanup, State: store.StepComplete}); err != nil && !errors.Is(err, store.ErrConflict) {
		return CleanupOutput{}, fmt.Errorf("cleanup: %w", err)
	}
	data, _ := json.Marshal(EventData{Stage: "job", Status: string(status), Message: finishMessage(status, msg)})
	if _, err := p.Store.AppendEvents(ctx, jobID, []store.Event{{Key: "job:finished", Type: "job", Data: data}}); err != nil {
		return CleanupOutput{}, fmt.Errorf("cleanup: %w", err)
	}
	job, err = p.Store.UpdateJob(ctx, jobID, upd)
	if errors.Is(err, store.ErrConflict) && job.Status.Terminal() {
		// Another cleanup got there first.
		return CleanupOutput{Status: string(job.Status), Terminated: n}, nil
	}
	if err != nil {
		return CleanupOutput{}, fmt.Errorf("cleanup: close job: %w", err)
	}
	log.Info("job finished", "status", status, "terminated", n)
	return CleanupOutput{Status: string(status), Terminated: n}, nil
}

// finalStatus decides how the job ended from the cleanup input.
func finalStatus(job store.Job, in CleanupInput) (store.Status, string) {
	if job.CancelRequested {
		return store.StatusCancelled, ""
	}
	if in.Detail != nil {
		switch in.Detail.Status {
		case "SUCCEEDED":
			return store.StatusSucceeded, ""
		case "TIMED_OUT":
			return store.StatusFailed, "the execution timed out"
		case "ABORTED":
			return store.StatusFailed, "the execution was stopped"
		default:
			return store.StatusFailed, errorMessage(in.Detail.Error, in.Detail.Cause)
		}
	}
	if in.Error != nil {
		if in.Error.Error == "JobCancelled" {
			return store.StatusCancelled, ""
		}
		return store.StatusFailed, errorMessage(in.Error.Error, in.Error.Cause)
	}
	if in.Outcome == "succeeded" {
		return store.StatusSucceeded, ""
	}
	return store.StatusFailed, "the job failed"
}

// errorMessage renders a Step Functions error. A Lambda's Cause is the JSON
// error response ({"errorMessage","errorType"}); the message is what a user
// can read.
func errorMessage(name, cause string) string {
	var lambdaErr struct {
		Message string `json:"errorMessage"`
		Type    string `json:"errorType"`
	}
	if json.Unmarshal([]byte(cause), &lambdaErr) == nil && lambdaErr.Message != "" {
		cause = lambdaErr.Message
	}
	switch {
	case name == "":
		return cause
	case cause == "":
		return name
	}
	return name + ": " + cause
}

func finishMessage(status store.Status, msg string) string {
	if msg == "" {
		return "job " + string(status)
	}
	return "job " + string(status) + ": " + msg
}
