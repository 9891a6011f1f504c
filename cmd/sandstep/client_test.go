package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/api"
	"github.com/sandstep/sandstep/internal/service/ids"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/apitest"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
	"github.com/sandstep/sandstep/internal/testkit/testlog"
)

func TestMain(m *testing.M) { os.Exit(testddb.RunTests(m)) }

const (
	testToken  = "acme-5b0e7c1d9a2f4e8b6c3d1a0f9e8d7c65"
	otherToken = "globex-2a4c6e8f0b1d3f5a7c9e1b3d5f7a9c0e"
	devToken   = "dev-9e7c5a3f1d0b8e6c4a2f0d9b7e5c3a18"
)

// recordingExecutor stands in for the engine: the tests move jobs on
// through the store, the way the phases do.
type recordingExecutor struct {
	mu      sync.Mutex
	cancels []string
}

func (e *recordingExecutor) Start(_ context.Context, jobID string, _ []byte) (string, error) {
	return "exec:" + jobID, nil
}

func (e *recordingExecutor) Cancel(_ context.Context, jobID, _ string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cancels = append(e.cancels, jobID)
	return nil
}

func (e *recordingExecutor) cancelled() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.cancels...)
}

// proxy sits in front of the API handler: it records the event requests
// and, when cutFirstStream is set, drops the first event stream's
// connection right after its first event.
type proxy struct {
	h              http.Handler
	cutFirstStream bool

	mu           sync.Mutex
	eventGets    int
	lastEventIDs []string // the Last-Event-ID of each stream request
	cut          bool
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.URL.Path, "/events") {
		stream := r.Header.Get("Accept") == "text/event-stream"
		p.mu.Lock()
		p.eventGets++
		if stream {
			p.lastEventIDs = append(p.lastEventIDs, r.Header.Get("Last-Event-ID"))
			if p.cutFirstStream && !p.cut {
				p.cut = true
				w = &cutWriter{ResponseWriter: w}
			}
		}
		p.mu.Unlock()
	}
	p.h.ServeHTTP(w, r)
}

func (p *proxy) seen() (eventGets int, lastEventIDs []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.eventGets, append([]string(nil), p.lastEventIDs...)
}

// cutWriter passes a stream through up to the end of its first event, then
// aborts the connection the way a dropped network would.
type cutWriter struct{ http.ResponseWriter }

func (c *cutWriter) Write(b []byte) (int, error) {
	start := bytes.Index(b, []byte("\nid: "))
	if start < 0 {
		return c.ResponseWriter.Write(b)
	}
	end := bytes.Index(b[start:], []byte("\n\n"))
	c.ResponseWriter.Write(b[:start+end+2])
	http.NewResponseController(c.ResponseWriter).Flush()
	panic(http.ErrAbortHandler)
}

func (c *cutWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

type testEnv struct {
	t     *testing.T
	store *store.Store
	exec  *recordingExecutor
	proxy *proxy
	url   string
}

// newEnv serves the real API over tables of the test's own on 127.0.0.1.
func newEnv(t *testing.T, streaming, cutFirstStream bool) *testEnv {
	t.Helper()
	db := testddb.ForTests(t)
	sum := sha256.Sum256([]byte(testToken))
	other := sha256.Sum256([]byte(otherToken))
	auth, err := api.NewAuthenticator(config.AuthConfig{Tokens: []config.AuthToken{
		{Tenant: "acme", SHA256: hex.EncodeToString(sum[:])},
		{Tenant: "globex", SHA256: hex.EncodeToString(other[:])},
	}}, func(string) string { return "" }, devToken)
	if err != nil {
		t.Fatal(err)
	}
	e := &testEnv{t: t, store: store.NewLocal(db.Endpoint, db.Prefix), exec: &recordingExecutor{}}
	e.proxy = &proxy{cutFirstStream: cutFirstStream, h: api.New(api.Options{
		Store:        e.store,
		Executor:     e.exec,
		Auth:         auth,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		Streaming:    streaming,
		PollInterval: 20 * time.Millisecond,
	})}
	srv := httptest.NewServer(apitest.Validate(t, e.proxy))
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type result struct {
	code           int
	stdout, stderr string
}

// run runs the sandstep command line as the acme tenant against the env's
// server.
func (e *testEnv) run(args ...string) result {
	e.t.Helper()
	return runCLI(testCtx(e.t), append(args, "--server", e.url, "--token", testToken)...)
}

func runCLI(ctx context.Context, args ...string) result {
	var stdout, stderr testlog.Buffer
	code := run(ctx, args, &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

// start runs the command line in the background; wait returns its result.
func (e *testEnv) start(args ...string) (stdout *testlog.Buffer, wait func() result) {
	args = append(args, "--server", e.url, "--token", testToken)
	var out, errOut testlog.Buffer
	done := make(chan int, 1)
	ctx := testCtx(e.t)
	go func() { done <- run(ctx, args, &out, &errOut) }()
	return &out, func() result {
		select {
		case code := <-done:
			return result{code, out.String(), errOut.String()}
		case <-time.After(45 * time.Second):
			e.t.Fatalf("sandstep %v did not end; output so far:\n%s\n%s", args[:2], out.String(), errOut.String())
			return result{}
		}
	}
}

// waitFor waits until cond holds, bounded in time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func wantCode(t *testing.T, r result, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
}

// acmeKey is the store key of the tenant acme's job id.
func acmeKey(id string) string { return ids.JobKey("acme", id) }

// appendEvents adds progress events numbered from..to, as the phases do.
func (e *testEnv) appendEvents(jobID string, from, to int) {
	e.t.Helper()
	var evs []store.Event
	for i := from; i <= to; i++ {
		evs = append(evs, store.Event{Type: "progress", Data: json.RawMessage(fmt.Sprintf(
			`{"stage":"crawl","status":"running","message":"page %d\nof the site","current":%d,"total":%d}`, i, i, to))})
	}
	if _, err := e.store.AppendEvents(testCtx(e.t), acmeKey(jobID), evs); err != nil {
		e.t.Fatal(err)
	}
}

func (e *testEnv) setStatus(jobID string, to store.Status, errMsg string) {
	e.t.Helper()
	u := store.JobUpdate{Status: to}
	if errMsg != "" {
		u.Error = &errMsg
	}
	if _, err := e.store.UpdateJob(testCtx(e.t), acmeKey(jobID), u); err != nil {
		e.t.Fatal(err)
	}
}

var eventLine = regexp.MustCompile(`^#(\d+) \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z crawl running page (\d+) of the site \[(\d+)/\d+\]$`)

// eventSeqs returns the seqs of the event lines of out, checking each
// line's form.
func eventSeqs(t *testing.T, out string) []string {
	t.Helper()
	var seqs []string
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		m := eventLine.FindStringSubmatch(line)
		if m == nil || m[1] != m[2] || m[1] != m[3] {
			t.Fatalf("event line %q is not #seq time stage status message [current/total]", line)
		}
		seqs = append(seqs, m[1])
	}
	return seqs
}

func seqRange(from, to int) string {
	var s []string
	for i := from; i <= to; i++ {
		s = append(s, fmt.Sprint(i))
	}
	return strings.Join(s, ",")
}

func TestSubmitStatusCancel(t *testing.T) {
	e := newEnv(t, true, false)
	ctx := testCtx(t)

	r := e.run("submit", "solar panels in winter", "--url", "https://example.com/a", "--url", "https://example.org/b",
		"--mode", "max", "--optimization", "quality")
	wantCode(t, r, 0)
	id := strings.TrimSpace(r.stdout)
	job, err := e.store.GetJob(ctx, acmeKey(id))
	if err != nil {
		t.Fatalf("submit printed %q; job: %v", r.stdout, err)
	}
	want := `{"query":"solar panels in winter","mode":"max","optimization":"quality","seed_urls":["https://example.com/a","https://example.org/b"]}`
	if job.Tenant != "acme" || string(job.Request) != want {
		t.Fatalf("stored job: tenant %q request %s", job.Tenant, job.Request)
	}

	// Under a chosen id, the same request again finds the job.
	wantCode(t, e.run("submit", "--job-id", "cli-1", "wind"), 0)
	r = e.run("submit", "wind", "--job-id", "cli-1")
	wantCode(t, r, 0)
	if r.stdout != "cli-1\n" || !strings.Contains(r.stderr, "already existed") {
		t.Fatalf("resubmit: %+v", r)
	}

	if _, err := e.store.SetStep(ctx, acmeKey("cli-1"), store.Step{ID: store.StepCrawl, State: store.StepRunning, Current: 3, Total: 22}); err != nil {
		t.Fatal(err)
	}
	phase := "crawl"
	if _, err := e.store.UpdateJob(ctx, acmeKey("cli-1"), store.JobUpdate{Status: store.StatusRunning, Phase: &phase, AddFallbacks: []string{"snippets"}}); err != nil {
		t.Fatal(err)
	}
	r = e.run("status", "cli-1")
	wantCode(t, r, 0)
	for _, re := range []string{
		`(?m)^job +cli-1$`, `(?m)^status +running$`, `(?m)^phase +crawl$`, `(?m)^error +-$`, `(?m)^fallbacks +snippets$`,
		`(?m)^  search +pending +Searching the web$`, `(?m)^  crawl +running +3/22 +Crawling sources$`,
		`(?m)^  cleanup +pending +Cleaning up$`,
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Fatalf("status output does not match %s:\n%s", re, r.stdout)
		}
	}
	if n := strings.Count(r.stdout, "\n  "); n != 8 {
		t.Fatalf("status shows %d steps, want 8:\n%s", n, r.stdout)
	}
	r = e.run("status", "--json", "cli-1")
	wantCode(t, r, 0)
	var st map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st["job_id"] != "cli-1" || st["phase"] != "crawl" {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}

	r = e.run("cancel", "cli-1")
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "cancel requested: job cli-1 (running)") {
		t.Fatalf("cancel: %+v", r)
	}
	if got := e.exec.cancelled(); len(got) != 1 || got[0] != acmeKey("cli-1") {
		t.Fatalf("executor cancels: %v", got)
	}
	r = e.run("status", "cli-1")
	if !regexp.MustCompile(`(?m)^status +running \(cancel requested\)$`).MatchString(r.stdout) {
		t.Fatalf("status after cancel:\n%s", r.stdout)
	}
	e.setStatus("cli-1", store.StatusCancelled, "")
	r = e.run("cancel", "cli-1")
	wantCode(t, r, 1)
	if r.stderr != "sandstep cancel: conflict: job \"cli-1\" has already finished: cancelled\n" {
		t.Fatalf("cancelling a finished job: %q", r.stderr)
	}

	// API errors: code, message and field; another tenant's job does not
	// exist.
	r = e.run("submit", "q", "--mode", "turbo")
	wantCode(t, r, 1)
	if r.stderr != "sandstep submit: invalid_argument: mode must be one of light, max (mode)\n" {
		t.Fatalf("invalid mode: %q", r.stderr)
	}
	r = runCLI(ctx, "status", "cli-1", "--server", e.url, "--token", otherToken)
	wantCode(t, r, 1)
	if r.stderr != "sandstep status: not_found: job \"cli-1\" not found\n" {
		t.Fatalf("another tenant's job: %q", r.stderr)
	}
	// Usage mistakes exit 2.
	wantCode(t, e.run("status"), 2)
	wantCode(t, e.run("submit", "a", "b"), 2)
}

func TestEventsPages(t *testing.T) {
	e := newEnv(t, true, false)
	wantCode(t, e.run("submit", "q", "--job-id", "pg-1"), 0)
	r := e.run("events", "pg-1")
	wantCode(t, r, 0)
	if r.stdout != "" {
		t.Fatalf("events of a job without any: %q", r.stdout)
	}
	// More than one page of the server's default 100.
	e.appendEvents("pg-1", 1, 230)
	before, _ := e.proxy.seen()
	r = e.run("events", "pg-1")
	wantCode(t, r, 0)
	if got := strings.Join(eventSeqs(t, r.stdout), ","); got != seqRange(1, 230) {
		t.Fatalf("events printed: %s", got)
	}
	// Three pages, and one more that shows next no longer moves.
	if after, _ := e.proxy.seen(); after-before != 4 {
		t.Fatalf("%d event requests, want 4", after-before)
	}
	r = e.run("events", "pg-1", "--after", "225")
	wantCode(t, r, 0)
	if got := strings.Join(eventSeqs(t, r.stdout), ","); got != seqRange(226, 230) {
		t.Fatalf("events after 225: %s", got)
	}
}

func TestEventsFollowResumesAfterDrop(t *testing.T) {
	e := newEnv(t, true, true)
	wantCode(t, e.run("submit", "q", "--job-id", "fo-1"), 0)
	e.appendEvents("fo-1", 1, 3)

	stdout, wait := e.start("events", "fo-1", "--follow")
	// The first connection is cut after event 1; the rest comes through the
	// reconnection.
	waitFor(t, "event 3", func() bool { return strings.Contains(stdout.String(), "#3 ") })
	e.setStatus("fo-1", store.StatusRunning, "")
	e.appendEvents("fo-1", 4, 4)
	e.setStatus("fo-1", store.StatusSucceeded, "")
	r := wait()
	wantCode(t, r, 0)
	if got := strings.Join(eventSeqs(t, r.stdout), ","); got != "1,2,3,4" {
		t.Fatalf("events printed: %s\n%s", got, r.stdout)
	}
	if _, ids := e.proxy.seen(); len(ids) != 2 || ids[0] != "" || ids[1] != "1" {
		t.Fatalf("Last-Event-ID of the stream requests: %q, want none then 1", ids)
	}
	if !strings.Contains(r.stderr, "event stream of job fo-1 lost") || !strings.Contains(r.stderr, "attempt 1 of 5") {
		t.Fatalf("stderr does not tell of the reconnection: %q", r.stderr)
	}

	// Following a job that has ended prints what is left and ends.
	r = e.run("events", "fo-1", "--follow", "--after", "2")
	wantCode(t, r, 0)
	if got := strings.Join(eventSeqs(t, r.stdout), ","); got != "3,4" {
		t.Fatalf("events printed: %s", got)
	}
}

func TestSubmitWaitFailedJob(t *testing.T) {
	e := newEnv(t, true, false)
	stdout, wait := e.start("submit", "q", "--job-id", "wt-1", "--wait")
	waitFor(t, "the job id", func() bool { return strings.HasPrefix(stdout.String(), "wt-1\n") })
	e.setStatus("wt-1", store.StatusRunning, "")
	e.appendEvents("wt-1", 1, 2)
	e.setStatus("wt-1", store.StatusFailed, "the crawler ran out of memory")
	r := wait()
	wantCode(t, r, 1)
	if got := strings.Join(eventSeqs(t, r.stdout), ","); got != "1,2" || !strings.HasSuffix(r.stdout, "job wt-1 failed\n") {
		t.Fatalf("stdout:\n%s", r.stdout)
	}
	if r.stderr != "sandstep submit: job wt-1 failed: the crawler ran out of memory\n" {
		t.Fatalf("stderr: %q", r.stderr)
	}
}

func TestFollowWithoutStreaming(t *testing.T) {
	old := pollInterval
	pollInterval = 20 * time.Millisecond
	t.Cleanup(func() { pollInterval = old })
	e := newEnv(t, false, false)
	wantCode(t, e.run("submit", "q", "--job-id", "po-1"), 0)
	e.appendEvents("po-1", 1, 2)
	stdout, wait := e.start("events", "po-1", "--follow")
	waitFor(t, "event 2", func() bool { return strings.Contains(stdout.String(), "#2 ") })
	e.setStatus("po-1", store.StatusRunning, "")
	e.appendEvents("po-1", 3, 3)
	e.setStatus("po-1", store.StatusSucceeded, "")
	r := wait()
	wantCode(t, r, 0)
	if got := strings.Join(eventSeqs(t, r.stdout), ","); got != "1,2,3" {
		t.Fatalf("events printed: %s", got)
	}
}

func TestReport(t *testing.T) {
	e := newEnv(t, true, false)
	ctx := testCtx(t)
	wantCode(t, e.run("submit", "q", "--job-id", "rp-1"), 0)
	r := e.run("report", "rp-1")
	wantCode(t, r, 1)
	if !strings.HasPrefix(r.stderr, "sandstep report: job still running (queued)") {
		t.Fatalf("report of a queued job: %q", r.stderr)
	}
	md := "# Solar panels\n\nThey work in winter [1].\n\n1. https://example.com/a?x=1&y=2"
	if err := e.store.PutReport(ctx, acmeKey("rp-1"), md, true); err != nil {
		t.Fatal(err)
	}
	e.setStatus("rp-1", store.StatusRunning, "")
	e.setStatus("rp-1", store.StatusSucceeded, "")
	r = e.run("report", "rp-1")
	wantCode(t, r, 0)
	if r.stdout != md+"\n" || r.stderr != "" {
		t.Fatalf("report: %+v", r)
	}

	// A finished report says how its citations fared, on stderr.
	details := `{"sources":[{"n":1,"url":"https://example.com/a","final_url":"https://example.com/a","title":"A","mode":"pdf","chars":10,"truncated":false,"pages":2}],` +
		`"not_used":[{"url":"https://example.com/c","reason":"challenge","message":"an anti-bot challenge page"}],` +
		`"citations":{"total":4,"supported":3,"unsupported":1,"accuracy":0.75,"removed":1,"method":"extractive","threshold":0.5,"action":"annotate","flagged":[]}}`
	if err := e.store.WriteReport(ctx, acmeKey("rp-1"), store.Report{Markdown: md, Complete: true, Details: []byte(details)}); err != nil {
		t.Fatal(err)
	}
	r = e.run("report", "rp-1")
	wantCode(t, r, 0)
	if r.stdout != md+"\n" || r.stderr != "citations: 3 of 4 cited sentences supported by their sources (75%), 1 flagged, 1 citation of sources that do not exist removed; 1 source read, 1 found but not used\n" {
		t.Fatalf("report: %+v", r)
	}
	r = e.run("report", "rp-1", "--json")
	wantCode(t, r, 0)
	var js map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &js); err != nil || js["markdown"] != md || js["citations"].(map[string]any)["accuracy"] != 0.75 || len(js["not_used"].([]any)) != 1 {
		t.Fatalf("report --json: %v %+v", err, r)
	}

	// A job that ended with part of its report gets that part, and a note.
	wantCode(t, e.run("submit", "q", "--job-id", "rp-2"), 0)
	if err := e.store.AppendReport(ctx, acmeKey("rp-2"), "# Partial\n", false); err != nil {
		t.Fatal(err)
	}
	e.setStatus("rp-2", store.StatusFailed, "boom")
	r = e.run("report", "rp-2")
	wantCode(t, r, 0)
	if r.stdout != "# Partial\n" || !strings.Contains(r.stderr, "before its report was complete") {
		t.Fatalf("partial report: %+v", r)
	}
}

func TestTokens(t *testing.T) {
	e := newEnv(t, true, false)
	ctx := testCtx(t)
	const wrong = "wrong-token-4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c"
	r := runCLI(ctx, "status", "x", "--server", e.url, "--token", wrong)
	wantCode(t, r, 1)
	if r.stderr != "sandstep status: unauthenticated: invalid bearer token\n" || strings.Contains(r.stdout+r.stderr, wrong) {
		t.Fatalf("bad token: %+v", r)
	}

	// Without --token: SANDSTEP_TOKEN, else SANDSTEP_DEV_TOKEN; neither is
	// shown by -h.
	t.Setenv(envToken, "")
	t.Setenv(envDevToken, devToken)
	t.Setenv(envServer, e.url)
	r = runCLI(ctx, "submit", "q", "--job-id", "dev-1")
	wantCode(t, r, 0)
	if job, err := e.store.GetJob(ctx, ids.JobKey("dev", "dev-1")); err != nil || job.Tenant != "dev" {
		t.Fatalf("job submitted with the dev token: %+v, %v", job, err)
	}
	t.Setenv(envToken, testToken)
	r = runCLI(ctx, "status", "dev-1")
	wantCode(t, r, 1) // acme does not see dev's job
	r = runCLI(ctx, "status", "-h")
	wantCode(t, r, 0)
	if strings.Contains(r.stdout+r.stderr, testToken) || strings.Contains(r.stdout+r.stderr, devToken) || !strings.Contains(r.stdout, "-token") {
		t.Fatalf("status -h: %+v", r)
	}

	t.Setenv(envToken, "")
	t.Setenv(envDevToken, "")
	r = runCLI(ctx, "status", "dev-1")
	wantCode(t, r, 1)
	if !strings.Contains(r.stderr, "no API token") {
		t.Fatalf("without a token: %q", r.stderr)
	}
}

func TestServerDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close()
	for _, args := range [][]string{{"submit", "q"}, {"status", "x"}, {"events", "x", "--follow"}, {"cancel", "x"}, {"report", "x"}} {
		r := runCLI(testCtx(t), append(args, "--server", url, "--token", testToken)...)
		wantCode(t, r, 1)
		want := fmt.Sprintf("sandstep %s: no sandstep server is running at %s (connection refused): start one with `sandstep serve` or `make run`", args[0], url)
		if !strings.HasPrefix(r.stderr, want) || strings.Contains(r.stderr, testToken) {
			t.Fatalf("%v: %q", args, r.stderr)
		}
	}
}
