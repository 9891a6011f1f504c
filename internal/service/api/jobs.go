package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandstep/sandstep/internal/service/ids"
	"github.com/sandstep/sandstep/internal/service/report"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/service/usage"
)

// Request limits. The body's is [server] max_body_bytes.
const (
	MaxQueryRunes   = 2000
	MaxSeedURLs     = 20
	MaxSeedURLBytes = 2048
	MaxJobIDLen     = ids.MaxLen
)

var (
	modes         = []string{"light", "max"}
	optimizations = []string{"speed", "balanced", "quality"}
)

// phaseStartFailed marks a job whose execution could not be started. The
// store allows no way back from a terminal status, and a resubmission must
// be able to start the job, so the record stays queued with this phase and
// the API shows it as failed (see viewStatus).
const phaseStartFailed = "start_failed"

// viewStatus is the status the API shows for a job.
func viewStatus(j store.Job) store.Status {
	if j.Status == store.StatusQueued && j.Phase == phaseStartFailed && j.ExecutionID == "" {
		return store.StatusFailed
	}
	return j.Status
}

// submitBody is POST /v1/jobs as sent.
type submitBody struct {
	Query        *string  `json:"query"`
	Mode         string   `json:"mode"`
	Optimization string   `json:"optimization"`
	SeedURLs     []string `json:"seed_urls"`
	JobID        *string  `json:"job_id"`
	// Budget bounds what the job may spend (store.JobBudget).
	Budget *budgetBody `json:"budget"`
}

type budgetBody struct {
	MaxCost           *float64 `json:"max_cost"`
	MaxTokens         *int64   `json:"max_tokens"`
	MaxSandboxSeconds *int64   `json:"max_sandbox_seconds"`
}

type links struct {
	Self      string `json:"self"`
	Events    string `json:"events"`
	Report    string `json:"report"`
	Cancel    string `json:"cancel"`
	Artifacts string `json:"artifacts"`
}

type submitResponse struct {
	JobID  string       `json:"job_id"`
	Status store.Status `json:"status"`
	Links  links        `json:"links"`
}

func jobLinks(id string) links {
	self := "/v1/jobs/" + id
	return links{Self: self, Events: self + "/events", Report: self + "/report", Cancel: self + "/cancel", Artifacts: self + "/artifacts"}
}

// decodeSubmit reads and validates the body; every problem is reported, and
// Field is set when only one field is at fault.
func decodeSubmit(w http.ResponseWriter, r *http.Request) (submitBody, error) {
	var body submitBody
	dec := json.NewDecoder(r.Body) // bounded by the route's guard
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return body, decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			return body, invalid("", "the request body holds more than one JSON value")
		}
		return body, decodeError(err)
	}
	var problems []*Error
	add := func(e *Error) { problems = append(problems, e) }
	switch {
	case body.Query == nil:
		add(invalid("query", "query is required"))
	case strings.TrimSpace(*body.Query) == "":
		add(invalid("query", "query must not be blank"))
	default:
		q := strings.TrimSpace(*body.Query)
		body.Query = &q
		if n := utf8.RuneCountInString(q); n > MaxQueryRunes {
			add(invalid("query", "query is %d characters long; the limit is %d", n, MaxQueryRunes))
		}
	}
	if body.Mode == "" {
		body.Mode = modes[0]
	} else if !slices.Contains(modes, body.Mode) {
		add(invalid("mode", "mode must be one of %s", strings.Join(modes, ", ")))
	}
	if body.Optimization == "" {
		body.Optimization = "balanced"
	} else if !slices.Contains(optimizations, body.Optimization) {
		add(invalid("optimization", "optimization must be one of %s", strings.Join(optimizations, ", ")))
	}
	if len(body.SeedURLs) > MaxSeedURLs {
		add(invalid("seed_urls", "seed_urls has %d URLs; the limit is %d", len(body.SeedURLs), MaxSeedURLs))
	} else {
		seen := make(map[string]bool, len(body.SeedURLs))
		urls := make([]string, 0, len(body.SeedURLs))
		for i, u := range body.SeedURLs {
			if err := checkSeedURL(u); err != nil {
				add(invalid("seed_urls", "seed_urls[%d] %s", i, err))
				continue
			}
			if !seen[u] {
				seen[u] = true
				urls = append(urls, u)
			}
		}
		body.SeedURLs = urls
	}
	if b := body.Budget; b != nil {
		switch {
		case b.MaxCost == nil && b.MaxTokens == nil && b.MaxSandboxSeconds == nil:
			add(invalid("budget", "budget must set at least one of max_cost, max_tokens, max_sandbox_seconds"))
		case b.MaxCost != nil && !(*b.MaxCost > 0), b.MaxTokens != nil && *b.MaxTokens <= 0, b.MaxSandboxSeconds != nil && *b.MaxSandboxSeconds <= 0:
			add(invalid("budget", "budget's max_cost, max_tokens and max_sandbox_seconds must be greater than 0"))
		}
	}
	if body.JobID != nil && !ids.Valid(*body.JobID) {
		add(invalid("job_id", "job_id must be 1 to %d characters of A-Z, a-z, 0-9, '.', '_' and '-' (and not \".\" or \"..\")", MaxJobIDLen))
	}
	switch len(problems) {
	case 0:
		return body, nil
	case 1:
		return body, problems[0]
	}
	msgs := make([]string, len(problems))
	for i, p := range problems {
		msgs[i] = p.Message
	}
	return body, invalid("", "%s", strings.Join(msgs, "; "))
}

// checkSeedURL says what is wrong with a seed URL. Credentials are refused:
// the URL is stored and shown in events.
func checkSeedURL(raw string) error {
	if len(raw) > MaxSeedURLBytes {
		return fmt.Errorf("is %d bytes long; the limit is %d", len(raw), MaxSeedURLBytes)
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || !u.IsAbs():
		return errors.New("is not an absolute URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("must be an http or https URL")
	case u.Hostname() == "":
		return errors.New("has no host")
	case u.User != nil:
		return errors.New("must not contain credentials")
	}
	return nil
}

// decodeError turns a JSON decoding failure into the answer to send.
func decodeError(err error) *Error {
	var unread *bodyError
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &unread):
		return unread.answer
	case errors.Is(err, io.EOF):
		return invalid("", "the request body is empty; send a JSON object")
	case errors.As(err, &syntax), errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("", "the request body is not valid JSON: %v", err)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return invalid("", "the request body must be a JSON object, not %s", jsonValue(typ.Value))
		}
		field, sub, _ := strings.Cut(typ.Field, ".")
		if sub != "" {
			return invalid(field, "%s must be %s, not %s", typ.Field, jsonType(typ.Field), jsonValue(typ.Value))
		}
		return invalid(field, "%s must be %s, not %s", field, jsonType(field), jsonValue(typ.Value))
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		// encoding/json quotes the name with %q; the field is the name
		// as sent.
		field, uerr := strconv.Unquote(name)
		if uerr != nil {
			field = strings.Trim(name, `"`)
		}
		return invalid(field, "unknown field %q", field)
	}
	return invalid("", "the request body cannot be read: %v", err)
}

// jsonValue names a JSON value kind as UnmarshalTypeError.Value gives it.
func jsonValue(kind string) string {
	switch kind {
	case "array", "object":
		return "an " + kind
	case "bool":
		return "a boolean"
	}
	return "a " + kind
}

func jsonType(field string) string {
	switch field {
	case "seed_urls":
		return "an array of strings"
	case "budget":
		return "an object"
	case "budget.max_cost":
		return "a number"
	case "budget.max_tokens", "budget.max_sandbox_seconds":
		return "a whole number"
	}
	return "a string"
}

// normalize encodes the request as stored and its hash, the identity of a
// submission for idempotency.
func normalize(body submitBody) (json.RawMessage, string, error) {
	req := store.JobRequest{Query: *body.Query, Mode: body.Mode, Optimization: body.Optimization, SeedURLs: body.SeedURLs}
	if b := body.Budget; b != nil {
		req.Budget = &store.JobBudget{}
		if b.MaxCost != nil {
			req.Budget.MaxCost = *b.MaxCost
		}
		if b.MaxTokens != nil {
			req.Budget.MaxTokens = *b.MaxTokens
		}
		if b.MaxSandboxSeconds != nil {
			req.Budget.MaxSandboxSeconds = *b.MaxSandboxSeconds
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(req); err != nil {
		return nil, "", fmt.Errorf("encode request: %w", err)
	}
	raw := bytes.TrimSpace(buf.Bytes())
	return raw, requestHash(raw), nil
}

// requestHash identifies a stored request for idempotent resubmission.
func requestHash(raw []byte) string {
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// submit is POST /v1/jobs: create the job (or find it, for a resubmission)
// and start its execution.
func (s *server) submit(w http.ResponseWriter, r *http.Request, c *call) error {
	body, err := decodeSubmit(w, r)
	if err != nil {
		return err
	}
	raw, hash, err := normalize(body)
	if err != nil {
		return err
	}
	// A generated id is a client id like any other: the client learns it
	// from the answer and uses it from then on.
	id := ids.New(s.opts.Now())
	if body.JobID != nil {
		id = *body.JobID
	}
	return s.createJob(w, r, c, id, "", raw, hash)
}

// createJob creates the job of the request raw (or finds it, for a
// resubmission of the same id and request) and starts its execution: one
// path for every job type.
func (s *server) createJob(w http.ResponseWriter, r *http.Request, c *call, id, typ string, raw json.RawMessage, hash string) error {
	key := ids.JobKey(c.tenant, id)
	c.jobID, c.jobKey = id, key
	ctx, cancel := detached(r)
	defer cancel()
	if err := s.admit(ctx, c, key); err != nil {
		return err
	}
	job, created, err := s.opts.Store.CreateJob(ctx, store.NewJob{ID: key, Tenant: c.tenant, ClientID: id, Type: typ, Request: raw, RequestHash: hash})
	if err != nil && !errors.Is(err, store.ErrConflict) {
		// Not created: the slot goes back. (A conflict is a job of the
		// same key, whose slot it is.)
		if rerr := s.opts.Quotas.ReleaseJob(ctx, c.tenant, key); rerr != nil {
			c.cause = rerr
		}
	}
	switch {
	case errors.Is(err, store.ErrConflict):
		// The key is the tenant's own: only this tenant's earlier job can
		// be in the way.
		return &Error{Status: http.StatusConflict, Code: CodeConflict, Field: "job_id", JobID: id,
			Message: fmt.Sprintf("job_id %q is already used by a different request", id)}
	case errors.Is(err, store.ErrTooLarge):
		return &Error{Status: http.StatusRequestEntityTooLarge, Code: CodePayloadTooLarge, Message: "the request is too large to store"}
	case err != nil:
		return err
	}
	// A job found rather than created may never have started: its first
	// submission failed to start it, or was cut short.
	if job.ExecutionID == "" && !job.Status.Terminal() {
		if job, err = s.start(ctx, c, job); err != nil {
			return err
		}
	}
	status := http.StatusOK
	if created {
		status = http.StatusAccepted
	}
	return writeJSON(w, status, submitResponse{JobID: job.ClientID, Status: viewStatus(job), Links: linksOf(job)})
}

// admit applies the tenant's job quotas to a submission of the job key: a
// new job counts against jobs_per_hour and takes a concurrent_jobs slot; a
// resubmitted job that never started (its start failed, which gave its
// slot back) takes its slot again; any other resubmission is answered as
// it is, quota or not. Refusals are *store.LimitError, answered 429.
func (s *server) admit(ctx context.Context, c *call, key string) error {
	if s.opts.Quotas == nil {
		return nil
	}
	job, err := s.opts.Store.GetJob(ctx, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return s.opts.Quotas.AdmitJob(ctx, c.tenant, key, true)
	case err != nil:
		return err
	case job.ExecutionID == "" && !job.Status.Terminal():
		return s.opts.Quotas.AdmitJob(ctx, c.tenant, key, false)
	}
	return nil
}

// detachedTimeout bounds work that goes on after the client left.
const detachedTimeout = 30 * time.Second

// detached returns a context for writes that must not stop halfway when the
// client disconnects (a job created but not started, a cancel recorded but
// not passed on). It keeps the request's deadline, if any (the Lambda's).
func detached(r *http.Request) (context.Context, context.CancelFunc) {
	ctx := context.WithoutCancel(r.Context())
	if dl, ok := r.Context().Deadline(); ok {
		return context.WithDeadline(ctx, dl)
	}
	return context.WithTimeout(ctx, detachedTimeout)
}

// start starts the job's execution and records its id. Start is idempotent
// by execution name, so a job whose start was interrupted, or failed, is
// started by resubmitting it.
func (s *server) start(ctx context.Context, c *call, job store.Job) (store.Job, error) {
	st := s.opts.Store
	if job.Phase == phaseStartFailed {
		// Cleared before starting, so the mark can never overwrite what the
		// execution writes once it runs.
		empty := ""
		cleared, err := st.UpdateJob(ctx, job.ID, store.JobUpdate{IfStatus: []store.Status{store.StatusQueued}, Phase: &empty, Error: &empty})
		if err != nil && !errors.Is(err, store.ErrConflict) {
			return job, err
		}
		job = cleared
		if err != nil || job.ExecutionID != "" {
			return job, nil // the job moved on meanwhile: someone else started it
		}
	}
	input, err := json.Marshal(map[string]string{"job_id": job.ID})
	if err != nil {
		return job, err
	}
	execID, err := s.executor(job).Start(ctx, job.ID, input)
	if err != nil {
		c.cause = fmt.Errorf("start execution: %w", err)
		phase := phaseStartFailed
		msg := "the execution could not be started; submit the same request again to retry"
		// Conditional on the version read, so that a concurrent submission
		// that did start the job is not marked failed.
		if marked, uerr := st.UpdateJob(ctx, job.ID, store.JobUpdate{IfVersion: job.Version, IfStatus: []store.Status{store.StatusQueued}, Phase: &phase, Error: &msg}); uerr == nil {
			job = marked
			// Shown as failed, it must not hold a concurrent_jobs slot
			// until it is resubmitted (which takes one again).
			if rerr := s.opts.Quotas.ReleaseJob(ctx, job.Tenant, job.ID); rerr != nil {
				c.cause = errors.Join(c.cause, rerr)
			}
		} else if !errors.Is(uerr, store.ErrConflict) {
			c.cause = errors.Join(c.cause, fmt.Errorf("mark job failed: %w", uerr))
		}
		return job, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, JobID: job.ClientID, JobStatus: string(viewStatus(job)),
			RetryAfter: 1, Message: msg}
	}
	updated, err := st.UpdateJob(ctx, job.ID, store.JobUpdate{ExecutionID: &execID})
	if err != nil {
		return job, fmt.Errorf("record execution id: %w", err)
	}
	return updated, nil
}

// job reads the job named in the path, as c.tenant may see it: the path
// holds the client's id, and the key is the tenant's own, so another
// tenant's job of the same id is never even read. The tenant and id are
// checked all the same.
func (s *server) job(r *http.Request, c *call) (store.Job, error) {
	id := r.PathValue("id")
	c.jobKey = ids.JobKey(c.tenant, id)
	job, err := s.opts.Store.GetJob(r.Context(), c.jobKey)
	if errors.Is(err, store.ErrNotFound) || err == nil && (job.Tenant != c.tenant || job.ClientID != id) {
		return store.Job{}, jobNotFound(id)
	}
	// Every job is a job under /v1/jobs; under /v1/agent-runs only agent
	// runs are found.
	if err == nil && job.Type != store.JobTypeAgent && strings.Contains(r.Pattern, "/v1/agent-runs/") {
		return store.Job{}, &Error{Status: http.StatusNotFound, Code: CodeNotFound, JobID: id, Message: fmt.Sprintf("agent run %q not found", id)}
	}
	return job, err
}

// executor runs the job's state machine: deep research or agent runs.
func (s *server) executor(job store.Job) Executor {
	if job.Type == store.JobTypeAgent && s.opts.AgentExecutor != nil {
		return s.opts.AgentExecutor
	}
	return s.opts.Executor
}

// stepLabels are the steps' names for people.
var stepLabels = map[store.StepID]string{
	store.StepSearch:   "Searching the web",
	store.StepSandbox:  "Creating the sandbox",
	store.StepSetup:    "Setting up the sandbox",
	store.StepBrowser:  "Checking the browser",
	store.StepCrawl:    "Crawling sources",
	store.StepAnalysis: "Analyzing sources",
	store.StepFinalize: "Writing the report",
	store.StepCleanup:  "Cleaning up",
}

type stepView struct {
	ID      store.StepID    `json:"id"`
	Label   string          `json:"label"`
	Status  store.StepState `json:"status"`
	Current int             `json:"current"`
	Total   int             `json:"total"`
}

type statusView struct {
	JobID           string       `json:"job_id"`
	Status          store.Status `json:"status"`
	Phase           *string      `json:"phase"`
	Steps           []stepView   `json:"steps"`
	CreatedAt       string       `json:"created_at"`
	UpdatedAt       string       `json:"updated_at"`
	Error           *string      `json:"error"`
	Fallbacks       []string     `json:"fallbacks"`
	CancelRequested bool         `json:"cancel_requested"`
	// Usage is what the job used so far (its sandbox time once the
	// sandbox is released); Cost its cost at [pricing], null without it.
	Usage usage.View  `json:"usage"`
	Cost  *usage.Cost `json:"cost"`
	Links links       `json:"links"`
}

// timeFormat is RFC 3339 in UTC with milliseconds, the precision the store
// keeps.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

func formatTime(t time.Time) string { return t.UTC().Format(timeFormat) }

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (s *server) status(w http.ResponseWriter, r *http.Request, c *call) error {
	job, err := s.job(r, c)
	if err != nil {
		return err
	}
	v := statusView{
		JobID:           job.ClientID,
		Status:          viewStatus(job),
		Phase:           optional(job.Phase),
		CreatedAt:       formatTime(job.CreatedAt),
		UpdatedAt:       formatTime(job.UpdatedAt),
		Error:           optional(job.Error),
		Fallbacks:       nonNil(job.Fallbacks),
		CancelRequested: job.CancelRequested,
		Links:           linksOf(job),
	}
	for _, id := range store.Steps {
		st := job.Step(id)
		v.Steps = append(v.Steps, stepView{ID: id, Label: stepLabels[id], Status: st.State, Current: st.Current, Total: st.Total})
	}
	u, err := s.jobUsage(r.Context(), job)
	if err != nil {
		return err
	}
	v.Usage, v.Cost = usage.ViewOf(u), s.cost(u)
	return writeJSON(w, http.StatusOK, v)
}

type cancelView struct {
	JobID  string       `json:"job_id"`
	Status store.Status `json:"status"`
}

func finished(job store.Job) *Error {
	st := viewStatus(job)
	return &Error{Status: http.StatusConflict, Code: CodeConflict, JobID: job.ClientID, JobStatus: string(st),
		Message: fmt.Sprintf("job %q has already finished: %s", job.ClientID, st)}
}

// cancel records the cancel request, which the phases act on, then asks the
// executor to stop the execution after its grace period. Asking twice is
// answered the same way.
func (s *server) cancel(w http.ResponseWriter, r *http.Request, c *call) error {
	job, err := s.job(r, c)
	if err != nil {
		return err
	}
	if viewStatus(job).Terminal() {
		return finished(job)
	}
	ctx, cancel := detached(r)
	defer cancel()
	job, err = s.opts.Store.RequestCancel(ctx, job.ID)
	switch {
	case errors.Is(err, store.ErrConflict):
		return finished(job)
	case err != nil:
		return err
	}
	if err := s.executor(job).Cancel(ctx, job.ID, job.ExecutionID); err != nil {
		// The cancel is recorded and the phases stop on it; the reaper is
		// the backstop. The caller has nothing to retry.
		c.cause = fmt.Errorf("executor cancel: %w", err)
	}
	return writeJSON(w, http.StatusAccepted, cancelView{JobID: job.ClientID, Status: viewStatus(job)})
}

// reportView is the report with what sandstep says about it: the sources
// it was written from, what was found but not used, and the citation
// check. A report still being written has none of them yet (empty lists,
// citations null).
type reportView struct {
	JobID    string       `json:"job_id"`
	Status   store.Status `json:"status"`
	Complete bool         `json:"complete"`
	// Partial: the job ended (cancelled or failed) before its report was
	// complete; what is here was written from what it had found.
	Partial   bool                `json:"partial"`
	Markdown  string              `json:"markdown"`
	Sources   []report.UsedSource `json:"sources"`
	NotUsed   []report.NotUsed    `json:"not_used"`
	Citations *report.Citations   `json:"citations"`
}

// report answers with the job's report once there is one to read: complete,
// or whatever was written when the job ended.
func (s *server) report(w http.ResponseWriter, r *http.Request, c *call) error {
	job, err := s.job(r, c)
	if err != nil {
		return err
	}
	ctx := r.Context()
	st := viewStatus(job)
	rep, err := s.opts.Store.GetReport(ctx, job.ID)
	switch {
	case errors.Is(err, store.ErrNotFound) && st.Terminal():
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, JobID: job.ClientID, JobStatus: string(st),
			Message: fmt.Sprintf("job %q ended (%s) without a report", job.ClientID, st)}
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return err
	case err != nil || !rep.Complete && !st.Terminal():
		return &Error{Status: http.StatusConflict, Code: CodeConflict, JobID: job.ClientID, JobStatus: string(st),
			Message: fmt.Sprintf("the report of job %q is not ready yet (the job is %s)", job.ClientID, st)}
	}
	if prefersMarkdown(r.Header.Get("Accept")) {
		h := w.Header()
		h.Set("Content-Type", "text/markdown; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Report-Complete", fmt.Sprint(rep.Complete))
		h.Set("X-Report-Partial", fmt.Sprint(!rep.Complete && st.Terminal()))
		w.WriteHeader(http.StatusOK)
		_, err := io.WriteString(w, rep.Markdown)
		return err
	}
	v := reportView{JobID: job.ClientID, Status: st, Complete: rep.Complete, Partial: !rep.Complete && st.Terminal(), Markdown: rep.Markdown,
		Sources: []report.UsedSource{}, NotUsed: []report.NotUsed{}}
	if len(rep.Details) > 0 {
		var d report.Details
		if err := json.Unmarshal(rep.Details, &d); err != nil {
			return fmt.Errorf("report details of job %s: %w", job.ClientID, err)
		}
		if d.Sources != nil {
			v.Sources = d.Sources
		}
		if d.NotUsed != nil {
			v.NotUsed = d.NotUsed
		}
		v.Citations = &d.Citations
	}
	return writeJSON(w, http.StatusOK, v)
}

// prefersMarkdown: the client names text/markdown and does not rank JSON
// above it (a tie, with JSON named too, keeps JSON, the API's default).
func prefersMarkdown(accept string) bool {
	md := acceptQ(accept, "text/markdown", "text/*")
	return md > 0 && md > acceptQ(accept, "application/json")
}

// acceptQ returns the highest quality the Accept header gives to any of the
// media ranges (compared case-insensitively, parameters other than q
// ignored); 0 when it names none of them.
func acceptQ(accept string, ranges ...string) float64 {
	best := 0.0
	for _, part := range strings.Split(accept, ",") {
		media, params, _ := strings.Cut(part, ";")
		media = strings.TrimSpace(media)
		if !slices.ContainsFunc(ranges, func(r string) bool { return strings.EqualFold(r, media) }) {
			continue
		}
		q := 1.0
		for _, p := range strings.Split(params, ";") {
			k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
			if ok && strings.EqualFold(strings.TrimSpace(k), "q") {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && f >= 0 && f <= 1 {
					q = f
				}
			}
		}
		best = max(best, q)
	}
	return best
}
