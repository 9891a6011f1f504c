package localstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda/messages"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/emulation/asl"
	"github.com/sandstep/sandstep/internal/emulation/localstack"
	"github.com/sandstep/sandstep/internal/service/ids"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/apitest"
	"github.com/sandstep/sandstep/internal/testkit/fakedeno"
	"github.com/sandstep/sandstep/internal/testkit/fixturesite"
	"github.com/sandstep/sandstep/internal/testkit/testbin"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
	"github.com/sandstep/sandstep/providers"
)

var pluginDir, toolsDir string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sandstep-e2e-plugins-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// The sandboxes' uids must be able to enter the tools folder.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if pluginDir, err = testbin.Build(filepath.Join(dir, "plugins"), testbin.LocalPlugin, testbin.SandyPlugin, testbin.DenoPlugin, testbin.ModalPlugin); err == nil {
		toolsDir, err = testbin.Build(filepath.Join(dir, "tools"), testbin.Crawler)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return testddb.RunTests(m)
}

// devKey is the store key (and execution and sandbox name) of a job of
// the tenant "dev", whose token the tests use.
func devKey(id string) string { return ids.JobKey("dev", id) }

const (
	token    = "e2e-token"
	sandyKey = "e2e-sandy-key"
	// The fake Modal's token: the tests check it appears nowhere.
	modalTokenID     = "ak-e2emodaltokenid7f3a"
	modalTokenSecret = "as-e2emodaltokensecret51c9"
)

// stack is a local stack behind a real HTTP server on 127.0.0.1.
type stack struct {
	*localstack.Stack
	srv *httptest.Server
	st  *store.Store
	// live lists the provider's sandboxes where List cannot (Sandy).
	live func() []string
}

func requireBwrap(t testing.TB) {
	t.Helper()
	testbin.RequireTool(t, "bwrap", "bubblewrap")
}

// stackOpts shape a test stack: faults between the engine and the phases,
// and extra configuration (TOML appended to the test config).
type stackOpts struct {
	wrap   func(asl.Invoker) asl.Invoker
	config string
	// provider is the one line of config that differs between runs on
	// different providers; sandyURL and modalURL are the fakes it then
	// talks to.
	provider string
	sandyURL string
	// deno is the fake Deno provider "deno" talks to.
	deno *fakedeno.Running
	// modalURL is the fake Modal provider "modal" talks to.
	modalURL string
	// searx answers the discover phase's searches; nil: no results.
	searx *httptest.Server
	// allowPrivate is [sandbox] allow_private: the fixture sites the
	// sandboxes may reach on this machine's loopback.
	allowPrivate []string
	// dnsServers is [provider.local] dns_servers.
	dnsServers []string
	// server is more of [server] (TOML lines).
	server string
	// seen, when set, sees every request the API gets.
	seen func(*http.Request)
}

// allowSites lists the hosts of fixture sites as allow_private entries.
func allowSites(sites ...*fixturesite.Site) []string {
	var out []string
	for _, s := range sites {
		out = append(out, s.AllowPrivate()...)
	}
	return out
}

// newStack is a stack for jobs submitted with submit, whose seeds are on
// 127.0.0.1:1: allowed, so that they are fetched and refuse the connection
// (the snippets stand in), not refused by the policy (they would not).
func newStack(t testing.TB, wrap func(asl.Invoker) asl.Invoker) *stack {
	return newStackWith(t, stackOpts{wrap: wrap, allowPrivate: []string{"127.0.0.1:1"}})
}

func newStackWith(t testing.TB, o stackOpts) *stack {
	t.Helper()
	requireBwrap(t)
	env := testddb.ForTests(t)
	dir := t.TempDir()
	if o.searx == nil {
		o.searx = fakeSearx(t, nil)
	}
	if o.provider == "" {
		o.provider = "local"
	}
	if o.sandyURL == "" {
		o.sandyURL = "http://127.0.0.1:1"
	}
	if o.modalURL == "" {
		o.modalURL = "http://127.0.0.1:1"
	}
	t.Setenv("SANDSTEP_TEST_SANDY_KEY", sandyKey)
	t.Setenv("SANDSTEP_TEST_DENO_TOKEN", denoToken)
	denoConsole, denoSandbox := "http://127.0.0.1:1", "http://127.0.0.1:1"
	if o.deno != nil {
		denoConsole, denoSandbox = o.deno.ConsoleURL, o.deno.SandboxURL
	}
	t.Setenv("SANDSTEP_TEST_MODAL_TOKEN_ID", modalTokenID)
	t.Setenv("SANDSTEP_TEST_MODAL_TOKEN_SECRET", modalTokenSecret)
	cfgText := fmt.Sprintf(`
[server]
data_dir = %q
%s
[provider]
name = %q
plugin_dir = %q
[provider.local]
tools_dir = %q
dns_servers = %s
[provider.sandy]
base_url = %q
api_key_env = "SANDSTEP_TEST_SANDY_KEY"
retry_base_delay = "10ms"
[provider.deno]
token_env = "SANDSTEP_TEST_DENO_TOKEN"
console_url = %q
sandbox_url = %q
[provider.modal]
server_url = %q
token_id_env = "SANDSTEP_TEST_MODAL_TOKEN_ID"
token_secret_env = "SANDSTEP_TEST_MODAL_TOKEN_SECRET"
retry_base_delay = "10ms"
[sandbox]
lifetime = "10m"
allow_private = %s
[auth]
dev_token_env = ""
[research.search]
backends = ["searxng"]
searxng_url = %q
`, dir, o.server, o.provider, pluginDir, toolsDir, tomlList(o.dnsServers), o.sandyURL, denoConsole, denoSandbox, o.modalURL, tomlList(o.allowPrivate), o.searx.URL) + o.config
	cfg, err := config.Parse([]byte(cfgText), "config.toml", "../../..")
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(env.Client, env.Prefix)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := localstack.Start(ctx, localstack.Options{
		Config:      cfg,
		Template:    "../../../template.yaml",
		Store:       st,
		DevToken:    token,
		WrapInvoker: o.wrap,
		CancelPoll:  100 * time.Millisecond,
		CancelGrace: 20 * time.Second,
		Clock:       asl.NewInstantClock(time.Now()),
	})
	if err != nil {
		t.Fatal(err)
	}
	// Providers that cannot mount the crawler get it uploaded from here.
	s.App.Phases.CrawlerBinary = filepath.Join(toolsDir, "sandstep-crawler")
	// Every answer a test gets is checked against openapi.json.
	h := apitest.Validate(t, s.Handler)
	if o.seen != nil {
		inner := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { o.seen(r); inner.ServeHTTP(w, r) })
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return &stack{Stack: s, srv: srv, st: st}
}

// tomlList writes strings as a TOML array.
func tomlList(v []string) string {
	q := make([]string, len(v))
	for i, s := range v {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func (s *stack) do(t testing.TB, method, path string, body any) (int, map[string]any) {
	t.Helper()
	return s.doAs(t, token, method, path, body)
}

func (s *stack) submit(t testing.TB, jobID string) {
	t.Helper()
	code, out := s.do(t, "POST", "/v1/jobs", map[string]any{
		"query":     "how does bubblewrap isolate processes",
		"job_id":    jobID,
		"seed_urls": []string{"http://127.0.0.1:1/a", "http://127.0.0.1:1/b"},
	})
	if code != http.StatusAccepted {
		t.Fatalf("submit: %d %v", code, out)
	}
}

// wait polls the job over HTTP until it ends.
func (s *stack) wait(t testing.TB, jobID string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		_, job := s.do(t, "GET", "/v1/jobs/"+jobID, nil)
		switch job["status"] {
		case "succeeded", "failed", "cancelled":
			// The engine's status-change cleanup may still be running.
			if x, ok := s.Engine.Execution(devKey(jobID)); ok {
				select {
				case <-x.Done():
				case <-time.After(time.Minute):
					t.Fatal("execution did not end")
				}
			}
			return job
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("job %s did not end", jobID)
	return nil
}

// noLiveSandboxes checks the ledger and the provider agree: nothing runs.
func (s *stack) noLiveSandboxes(t testing.TB, jobID string) {
	t.Helper()
	ctx := context.Background()
	// Cleanups triggered by the status-change path run after the execution
	// ends; give them a bounded moment.
	deadline := time.Now().Add(30 * time.Second)
	for {
		live, err := s.st.LedgerListLive(ctx, time.Now().Add(24*time.Hour), 100)
		if err != nil {
			t.Fatal(err)
		}
		var running []providers.Sandbox
		if s.live != nil {
			for range s.live() {
				running = append(running, providers.Sandbox{})
			}
		} else if running, err = s.Provider.List(ctx, providers.ListFilter{Labels: map[string]string{providers.LabelJob: jobID}}); err != nil {
			t.Fatal(err)
		}
		if len(live) == 0 && len(running) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("live sandboxes remain: ledger %d %+v, provider %d %+v", len(live), live, len(running), running)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *stack) events(t testing.TB, jobID string) []map[string]any {
	t.Helper()
	_, out := s.do(t, "GET", "/v1/jobs/"+jobID+"/events?limit=1000", nil)
	var evs []map[string]any
	for _, e := range out["events"].([]any) {
		evs = append(evs, e.(map[string]any))
	}
	return evs
}

func (s *stack) statesEntered(jobID string) []string {
	x, _ := s.Engine.Execution(devKey(jobID))
	var names []string
	for _, ev := range x.History() {
		if strings.HasSuffix(string(ev.Type), "StateEntered") {
			names = append(names, ev.StateName)
		}
	}
	return names
}

func TestJobRunsEveryStateAndCleansUp(t *testing.T) {
	s := newStack(t, nil)
	s.submit(t, "job-ok")
	job := s.wait(t, "job-ok")
	if job["status"] != "succeeded" {
		t.Fatalf("status %v, error %v", job["status"], job["error"])
	}
	for _, step := range job["steps"].([]any) {
		if st := step.(map[string]any); st["status"] != "complete" {
			t.Errorf("step %v is %v", st["id"], st["status"])
		}
	}
	want := []string{"Discover", "Provision", "HasSandbox", "InitCrawl", "Crawl", "CrawlDone", "Report", "Cleanup", "Done"}
	if got := s.statesEntered("job-ok"); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("states entered %v, want %v", got, want)
	}
	// The crawler really ran in the sandbox (the seed hosts refuse
	// connections, so it crawled nothing and the snippets were used).
	var sawCrawl bool
	for _, e := range s.events(t, "job-ok") {
		if e["stage"] == "crawl" && strings.Contains(fmt.Sprint(e["message"]), "pages crawled") {
			sawCrawl = true
		}
	}
	if !sawCrawl {
		t.Errorf("no crawl event from the sandbox: %v", s.events(t, "job-ok"))
	}
	// Nothing could be read, so the report has no sources and lists both
	// seeds as not used, with why.
	code, rep := s.do(t, "GET", "/v1/jobs/job-ok/report", nil)
	notUsed, _ := rep["not_used"].([]any)
	if code != 200 || len(rep["sources"].([]any)) != 0 || len(notUsed) != 2 || notUsed[1].(map[string]any)["url"] != "http://127.0.0.1:1/b" ||
		notUsed[1].(map[string]any)["reason"] != "fetch_error" || !strings.Contains(fmt.Sprint(rep["markdown"]), "No source could be read.") {
		t.Errorf("report: %d %v", code, rep)
	}
	entries, err := s.st.LedgerListByOwner(context.Background(), "job:"+devKey("job-ok"))
	if err != nil || len(entries) != 1 || entries[0].State != store.LedgerTerminated {
		t.Errorf("ledger for the job: %+v, %v", entries, err)
	}
	s.noLiveSandboxes(t, "job-ok")
}

// InjectedFailure is a phase failure that no retrier handles.
type InjectedFailure struct{ Phase string }

func (e *InjectedFailure) Error() string { return "injected failure in " + e.Phase }

// phaseWrapper intercepts one phase's function.
type phaseWrapper struct {
	inner  asl.Invoker
	fn     string
	before func(ctx context.Context, attempt int) error
	after  func(ctx context.Context, attempt int, out []byte, err error) ([]byte, error)
	mu     sync.Mutex
	calls  int
}

func (w *phaseWrapper) Invoke(ctx context.Context, arn string, payload []byte) ([]byte, error) {
	if !strings.HasSuffix(arn, ":function:"+w.fn) {
		return w.inner.Invoke(ctx, arn, payload)
	}
	w.mu.Lock()
	w.calls++
	n := w.calls
	w.mu.Unlock()
	if w.before != nil {
		if err := w.before(ctx, n); err != nil {
			return nil, err
		}
	}
	out, err := w.inner.Invoke(ctx, arn, payload)
	if w.after != nil {
		return w.after(ctx, n, out, err)
	}
	return out, err
}

func (w *phaseWrapper) Has(arn string) bool {
	h, ok := w.inner.(interface{ Has(string) bool })
	return !ok || h.Has(arn)
}

var phases = []string{"Discover", "Provision", "Crawl", "Report"}

func TestFailureInEachPhaseFailsTheJobAndTerminatesTheSandbox(t *testing.T) {
	for _, phase := range phases {
		t.Run(phase, func(t *testing.T) {
			var w *phaseWrapper
			s := newStack(t, func(inv asl.Invoker) asl.Invoker {
				// The phase does its work, then fails: the worst moment,
				// with a sandbox already made.
				w = &phaseWrapper{inner: inv, fn: phase + "Function", after: func(_ context.Context, _ int, _ []byte, err error) ([]byte, error) {
					if err != nil {
						return nil, err
					}
					return nil, &InjectedFailure{Phase: phase}
				}}
				return w
			})
			id := "job-fail-" + strings.ToLower(phase)
			s.submit(t, id)
			job := s.wait(t, id)
			if job["status"] != "failed" {
				t.Fatalf("status %v", job["status"])
			}
			if msg := fmt.Sprint(job["error"]); !strings.Contains(msg, "InjectedFailure") || !strings.Contains(msg, "injected failure in "+phase) {
				t.Errorf("error %q does not say what failed", msg)
			}
			states := s.statesEntered(id)
			if !contains(states, "CleanupAfterError") || !contains(states, "Failed") {
				t.Errorf("states %v: want the Catch path through CleanupAfterError", states)
			}
			s.noLiveSandboxes(t, id)
		})
	}
	t.Run("Cleanup", func(t *testing.T) {
		// A cleanup that fails once is retried and still terminates.
		s := newStack(t, func(inv asl.Invoker) asl.Invoker {
			return &phaseWrapper{inner: inv, fn: "CleanupFunction", before: func(_ context.Context, n int) error {
				if n == 1 {
					return &InjectedFailure{Phase: "Cleanup"}
				}
				return nil
			}}
		})
		s.submit(t, "job-fail-cleanup")
		job := s.wait(t, "job-fail-cleanup")
		if job["status"] != "succeeded" {
			t.Fatalf("status %v error %v", job["status"], job["error"])
		}
		s.noLiveSandboxes(t, "job-fail-cleanup")
	})
}

func TestCancelDuringEachPhase(t *testing.T) {
	for _, phase := range append(phases, "Cleanup") {
		t.Run(phase, func(t *testing.T) {
			id := "job-cancel-" + strings.ToLower(phase)
			var s *stack
			s = newStack(t, func(inv asl.Invoker) asl.Invoker {
				return &phaseWrapper{inner: inv, fn: phase + "Function", before: func(ctx context.Context, n int) error {
					if n == 1 {
						code, out := s.do(t, "POST", "/v1/jobs/"+id+"/cancel", nil)
						if code != http.StatusAccepted {
							t.Errorf("cancel: %d %v", code, out)
						}
					}
					return nil
				}}
			})
			s.submit(t, id)
			job := s.wait(t, id)
			if job["status"] != "cancelled" {
				t.Fatalf("status %v error %v", job["status"], job["error"])
			}
			s.noLiveSandboxes(t, id)
		})
	}
}

func TestRetriedPhasesDoNoDoubleWork(t *testing.T) {
	// Lambda delivers at least once: each phase's first call does its work
	// and then "fails" as the service would; the state machine retries it.
	serviceError := func(_ context.Context, n int, out []byte, err error) ([]byte, error) {
		if n == 1 && err == nil {
			return nil, messages.InvokeResponse_Error{Type: "Lambda.ServiceException", Message: "injected service error"}
		}
		return out, err
	}
	s := newStack(t, func(inv asl.Invoker) asl.Invoker {
		for _, fn := range []string{"DiscoverFunction", "ProvisionFunction", "CrawlFunction", "ReportFunction", "CleanupFunction"} {
			inv = &phaseWrapper{inner: inv, fn: fn, after: serviceError}
		}
		return inv
	})
	s.submit(t, "job-retry")
	job := s.wait(t, "job-retry")
	if job["status"] != "succeeded" {
		t.Fatalf("status %v error %v", job["status"], job["error"])
	}
	entries, err := s.st.LedgerListByOwner(context.Background(), "job:"+devKey("job-retry"))
	if err != nil || len(entries) != 1 {
		t.Fatalf("want one sandbox for the job, ledger has %d (%v)", len(entries), err)
	}
	seen := map[string]int{}
	for _, e := range s.events(t, "job-retry") {
		seen[fmt.Sprint(e["stage"], "/", e["status"], "/", e["url"], "/", e["current"], "/", e["message"])]++
	}
	for k, n := range seen {
		if n > 1 {
			t.Errorf("event %q recorded %d times", k, n)
		}
	}
	x, _ := s.Engine.Execution(devKey("job-retry"))
	retries := 0
	for _, ev := range x.History() {
		if ev.Type == asl.EventStateRetryScheduled {
			retries++
		}
	}
	if retries < 5 {
		t.Errorf("%d retries in the history, want one per phase", retries)
	}
	s.noLiveSandboxes(t, "job-retry")
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// fakeSearx is a SearxNG JSON API answering every query with results.
func fakeSearx(t testing.TB, results []map[string]string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/search" || r.URL.Query().Get("format") != "json" {
			http.NotFound(w, r)
			return
		}
		rs := make([]map[string]any, len(results))
		for i, res := range results {
			rs[i] = map[string]any{"url": res["url"], "title": res["title"], "content": res["content"], "engine": "fake", "score": 1.0 / float64(i+1)}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"query": r.URL.Query().Get("q"), "number_of_results": len(rs), "results": rs})
	}))
	t.Cleanup(srv.Close)
	return srv
}
