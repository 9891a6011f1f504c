package localstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda/messages"

	"github.com/sandstep/sandstep/internal/emulation/asl"
	"github.com/sandstep/sandstep/internal/service/research"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/fixturesite"
	"github.com/sandstep/sandstep/internal/testkit/testbin"
	"github.com/sandstep/sandstep/providers"
)

// researchJob submits a job with the given mode and waits for it.
func (s *stack) research(t testing.TB, id, mode, opt string, seeds []string) map[string]any {
	t.Helper()
	body := map[string]any{"query": "kestrel migration fixtures", "job_id": id, "mode": mode, "optimization": opt}
	if len(seeds) > 0 {
		body["seed_urls"] = seeds
	}
	if code, out := s.do(t, "POST", "/v1/jobs", body); code != http.StatusAccepted {
		t.Fatalf("submit: %d %v", code, out)
	}
	job := s.wait(t, id)
	if job["status"] != "succeeded" {
		t.Fatalf("job %s: status %v, error %v", id, job["status"], job["error"])
	}
	return job
}

func (s *stack) sources(t testing.TB, id string) []store.Source {
	t.Helper()
	src, err := s.st.ListSources(context.Background(), devKey(id))
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func (s *stack) reportMarkdown(t testing.TB, id string) string {
	t.Helper()
	code, rep := s.do(t, "GET", "/v1/jobs/"+id+"/report", nil)
	if code != 200 {
		t.Fatalf("report: %d %v", code, rep)
	}
	return fmt.Sprint(rep["markdown"])
}

func fallbacks(job map[string]any) []string {
	var out []string
	for _, f := range job["fallbacks"].([]any) {
		out = append(out, fmt.Sprint(f))
	}
	return out
}

var citation = regexp.MustCompile(`\[(\d+)\]`)

// citesOnly checks that every [n] of the report names a source of origin.
func citesOnly(t *testing.T, md string, sources []store.Source, origin store.Origin) {
	t.Helper()
	byN := map[int]store.Source{}
	for _, s := range sources {
		byN[s.N] = s
	}
	cited := 0
	for _, m := range citation.FindAllStringSubmatch(md, -1) {
		n, _ := strconv.Atoi(m[1])
		s, ok := byN[n]
		if !ok || s.Origin != origin {
			t.Errorf("report cites [%d], which is %+v, not a %s source", n, s, origin)
		}
		cited++
	}
	if cited == 0 {
		t.Errorf("report cites nothing:\n%s", md)
	}
}

func hostOf(raw string) string {
	u, _ := url.Parse(raw)
	return u.Host
}

func requireChromium(t *testing.T) bool {
	t.Helper()
	return testbin.HaveTool(t, "chromium", "chromium")
}

func TestLightModeStaysWithinItsLimits(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{Hosts: 3})
	alpha, beta := site.Hosts[0], site.Hosts[1]
	var results []map[string]string
	for _, p := range []string{"/", "/a", "/b", "/c", "/d", "/e"} {
		results = append(results, map[string]string{"url": alpha.Page(p), "title": "alpha " + p, "content": "kestrel snippet " + p})
	}
	results = append(results,
		map[string]string{"url": beta.Page(fixturesite.PathChallenge), "title": "challenge", "content": "a challenge page"},
		map[string]string{"url": beta.Page(fixturesite.PathJS), "title": "app", "content": "a page that needs JavaScript"},
		map[string]string{"url": beta.Page(fixturesite.PathPDF), "title": "pdf", "content": "a PDF"},
	)
	s := newStackWith(t, stackOpts{searx: fakeSearx(t, results), allowPrivate: site.AllowPrivate()})
	job := s.research(t, "job-light", "light", "balanced", nil)

	// light x balanced: 9 sources, 19 pages, depth 1, 3 pages per host,
	// 8000 chars per source.
	srcs := s.sources(t, "job-light")
	seeds := map[string]bool{}
	for _, r := range results {
		seeds[r["url"]] = true
	}
	perHost := map[string]int{}
	crawled := 0
	for _, src := range srcs {
		if src.Origin != store.OriginCrawl {
			continue
		}
		crawled++
		perHost[hostOf(src.URL)]++
		if !seeds[src.URL] {
			t.Errorf("depth 1 crawled %s, which is no search result", src.URL)
		}
		if n := len([]rune(src.Content)); n > 8000 {
			t.Errorf("%s: %d chars, limit 8000", src.URL, n)
		}
		if strings.Contains(src.URL, fixturesite.PathChallenge) {
			t.Errorf("the challenge page is a crawled source")
		}
	}
	if crawled == 0 || crawled > 19 {
		t.Errorf("%d pages crawled, want 1..19", crawled)
	}
	for h, n := range perHost {
		if n > 3 {
			t.Errorf("host %s: %d pages, limit 3", h, n)
		}
	}
	if len(srcs) > 9+crawled {
		t.Errorf("%d sources stored", len(srcs))
	}
	// The progress says what depth 1 means.
	if !hasEvent(s.events(t, "job-light"), "crawl", "up to 19 pages, depth 1 (sources only)") {
		t.Errorf("no crawl:started event saying depth 1 (sources only): %v", s.events(t, "job-light"))
	}
	md := s.reportMarkdown(t, "job-light")
	citesOnly(t, md, srcs, store.OriginCrawl)
	for _, src := range srcs {
		if strings.Contains(src.URL, fixturesite.PathChallenge) && src.Origin != research.OriginBlocked {
			t.Errorf("challenge page stored as %s", src.Origin)
		}
	}
	if requireChromium(t) {
		var js bool
		for _, src := range srcs {
			js = js || strings.Contains(src.Content, fixturesite.JSText)
		}
		if !js {
			t.Errorf("the JavaScript-only page's text was not extracted with the browser; events: %v", s.events(t, "job-light"))
		}
		if slices.Contains(fallbacks(job), research.FallbackHTTPMode) {
			t.Errorf("HTTP mode recorded although a browser is installed")
		}
	}
	s.noLiveSandboxes(t, "job-light")
}

// hasEvent reports whether an event of stage has a message containing
// text.
func hasEvent(evs []map[string]any, stage, text string) bool {
	for _, e := range evs {
		if e["stage"] == stage && strings.Contains(fmt.Sprint(e["message"]), text) {
			return true
		}
	}
	return false
}

func TestMaxModeFollowsSameHostLinks(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{Hosts: 2})
	alpha := site.Hosts[0]
	// The crawl's first delivery is lost after it stored the pages, as a
	// Lambda's may be: the retry must not store them a second time.
	s := newStackWith(t, stackOpts{config: "[research]\nrender = \"never\"\n", allowPrivate: site.AllowPrivate(), wrap: func(inv asl.Invoker) asl.Invoker {
		return &phaseWrapper{inner: inv, fn: "CrawlFunction", after: func(_ context.Context, n int, out []byte, err error) ([]byte, error) {
			if n == 1 && err == nil && strings.Contains(string(out), `"done":true`) {
				return nil, messages.InvokeResponse_Error{Type: "Lambda.ServiceException", Message: "injected"}
			}
			return out, err
		}}
	}})
	s.research(t, "job-max", "max", "quality", []string{alpha.Page("/")})
	urls := map[string]int{}
	for _, src := range s.sources(t, "job-max") {
		if urls[src.URL]++; urls[src.URL] > 1 {
			t.Errorf("%s stored twice", src.URL)
		}
	}
	// max x quality: depth 2, 12 links per page, 8 pages per host.
	var followed, onAlpha int
	for _, src := range s.sources(t, "job-max") {
		if src.Origin != store.OriginCrawl {
			continue
		}
		if hostOf(src.URL) != hostOf(alpha.URL) {
			t.Errorf("followed a link off the seed's host: %s", src.URL)
		}
		onAlpha++
		if src.URL != alpha.Page("/") {
			followed++
		}
		if strings.Contains(src.URL, "/a1") {
			t.Errorf("depth 2 reached %s, a page two links away", src.URL)
		}
	}
	if followed == 0 {
		t.Errorf("no link was followed at depth 2")
	}
	if onAlpha > 8 {
		t.Errorf("%d pages on one host, limit 8", onAlpha)
	}
	if !hasEvent(s.events(t, "job-max"), "crawl", "depth 2 (the sources and the pages they link to)") {
		t.Errorf("no crawl:started event saying what depth 2 means: %v", s.events(t, "job-max"))
	}
}

// faultProvider breaks chosen calls of the real provider.
type faultProvider struct {
	providers.Provider
	failCreate bool
	execHook   func(req providers.ExecRequest) (providers.ExecResult, bool)
	readHook   func(path string, w io.Writer) (int64, error, bool)
}

func (f *faultProvider) Create(ctx context.Context, spec providers.CreateSpec) (providers.Sandbox, error) {
	if f.failCreate {
		return providers.Sandbox{}, providers.Errorf(providers.ResourceExhausted, "create", "injected: no capacity")
	}
	return f.Provider.Create(ctx, spec)
}

func (f *faultProvider) Exec(ctx context.Context, id string, req providers.ExecRequest) (providers.ExecResult, error) {
	if f.execHook != nil {
		if res, ok := f.execHook(req); ok {
			return res, nil
		}
	}
	return f.Provider.Exec(ctx, id, req)
}

func (f *faultProvider) ReadFile(ctx context.Context, id string, req providers.ReadFileRequest, w io.Writer) (int64, error) {
	if f.readHook != nil {
		if n, err, ok := f.readHook(req.Path, w); ok {
			return n, err
		}
	}
	return f.Provider.ReadFile(ctx, id, req, w)
}

const outputPath = "/tmp/sandstep-crawl/output.json"

func TestFallbacks(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{Hosts: 2, Latency: 0})
	alpha := site.Hosts[0]
	seeds := []string{alpha.Page("/"), alpha.Page("/a"), alpha.Page("/b")}
	cases := []struct {
		name     string
		config   string
		llm      func(t *testing.T) string
		fault    func(f *faultProvider)
		want     string
		reportOf store.Origin
	}{
		{name: "sandbox creation fails", fault: func(f *faultProvider) { f.failCreate = true }, want: research.FallbackSnippets, reportOf: store.OriginSearch},
		{name: "warmup fails five times", fault: func(f *faultProvider) {
			f.execHook = func(req providers.ExecRequest) (providers.ExecResult, bool) {
				if len(req.Argv) == 1 && req.Argv[0] == "true" {
					fmt.Fprint(orDiscard(req.Stderr), "vsock handshake failed")
					return providers.ExecResult{ExitCode: 1}, true
				}
				return providers.ExecResult{}, false
			}
		}, want: research.FallbackSnippets, reportOf: store.OriginSearch},
		{name: "browser unavailable", fault: func(f *faultProvider) {
			f.execHook = func(req providers.ExecRequest) (providers.ExecResult, bool) {
				if strings.Contains(req.Shell, "command -v chromium") {
					return providers.ExecResult{}, true
				}
				return providers.ExecResult{}, false
			}
		}, want: research.FallbackHTTPMode, reportOf: store.OriginCrawl},
		{name: "crawler times out", config: "[research]\nmax_crawl_duration = \"2s\"\n", want: research.FallbackPartialCrawl},
		{name: "output truncated", fault: func(f *faultProvider) {
			f.readHook = func(path string, w io.Writer) (int64, error, bool) {
				if path != outputPath {
					return 0, nil, false
				}
				n, _ := io.WriteString(w, `{"pages":[{"n":1,`)
				return int64(n), nil, true
			}
		}, want: research.FallbackChunkedRead, reportOf: store.OriginCrawl},
		{name: "output unreadable", fault: func(f *faultProvider) {
			f.readHook = func(path string, w io.Writer) (int64, error, bool) {
				if path != outputPath {
					return 0, nil, false
				}
				n, _ := io.WriteString(w, `garbage`)
				return int64(n), nil, true
			}
			f.execHook = func(req providers.ExecRequest) (providers.ExecResult, bool) {
				if strings.Contains(req.Shell, "dd if="+outputPath) {
					return providers.ExecResult{ExitCode: 1}, true
				}
				return providers.ExecResult{}, false
			}
		}, want: research.FallbackSnippets, reportOf: store.OriginSearch},
		{name: "summary fails", config: "[research.agent]\nenabled = true\nmodel = \"m\"\ncommand = \"echo the agent has nothing to say\"\n", want: research.FallbackRawExtracts, reportOf: store.OriginCrawl},
		{name: "every model rate-limited", llm: rateLimitedLLM, want: research.FallbackExtractive, reportOf: store.OriginCrawl},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.config
			if tc.llm != nil {
				cfg += "[research.llm]\nbase_url = \"" + tc.llm(t) + "\"\napi_key_env = \"\"\nmodels = [\"first\", \"second\"]\n"
			}
			allow := site.AllowPrivate()
			if tc.name == "crawler times out" {
				// Pages slower than the crawl may last.
				slow := fixturesite.Start(t, fixturesite.Options{Hosts: 1, Latency: 5 * time.Second})
				seeds = []string{slow.Hosts[0].Page("/"), slow.Hosts[0].Page("/a"), alpha.Page("/")}
				allow = allowSites(site, slow)
			}
			s := newStackWith(t, stackOpts{config: cfg, searx: snippetSearx(t, seeds), allowPrivate: allow})
			s.App.Phases.WarmupBackoff = 10 * time.Millisecond
			if tc.fault != nil {
				f := &faultProvider{Provider: s.Provider}
				tc.fault(f)
				s.App.UseProvider(f)
			}
			id := fmt.Sprintf("job-fallback-%d", i)
			job := s.research(t, id, "light", "speed", seeds)
			if fb := fallbacks(job); !slices.Contains(fb, tc.want) {
				t.Errorf("fallbacks %v, want %s", fb, tc.want)
			}
			if tc.reportOf != "" {
				citesOnly(t, s.reportMarkdown(t, id), s.sources(t, id), tc.reportOf)
			}
			s.noLiveSandboxes(t, id)
		})
	}
}

// snippetSearx answers every search with the given URLs and a snippet of
// prose for each, so that a report built from snippets has text to cite.
func snippetSearx(t testing.TB, urls []string) *httptest.Server {
	var results []map[string]string
	for i, u := range urls {
		results = append(results, map[string]string{"url": u, "title": fmt.Sprintf("Kestrel notes %d", i+1),
			"content": fmt.Sprintf("Kestrels hover above ridge %d before they dive for voles and beetles.", i+1)})
	}
	return fakeSearx(t, results)
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

func TestAgentSummariesAndModelReport(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{Hosts: 1})
	alpha := site.Hosts[0]
	// The agent answers with a summary for the first source's URL, as
	// Claude Code would, from the prompt it was given.
	agent := `url=$(printf '%s' "$PROMPT" | grep -o '"url":"[^"]*"' | head -1 | cut -d'"' -f4)
printf '{"sources":[{"title":"t","url":"%s","summary":"Kestrels summarized by the agent.","keyPoints":["one","two","three"]}],"overallInsights":["insight"]}' "$url"`
	var llmCalls atomic.Int32
	llm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		llmCalls.Add(1)
		var req struct {
			Model string `json:"model"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		if req.Model == "busy" {
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"error":{"message":"rate limited"}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, part := range []string{"## Executive summary\n\nKestrels migrate [1]. ", "Also see [99].\n\n## Key findings\n\n- A finding [1]\n"} {
			data, _ := json.Marshal(map[string]any{"model": req.Model, "choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": part}}}})
			fmt.Fprintf(w, "data: %s\n\n", data)
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(llm.Close)
	cfg := fmt.Sprintf("[research.agent]\nenabled = true\nmodel = \"m\"\ncommand = %q\n[research.llm]\nbase_url = %q\napi_key_env = \"\"\nmodels = [\"busy\", \"good\"]\n", agent, llm.URL)
	s := newStackWith(t, stackOpts{config: cfg, allowPrivate: site.AllowPrivate()})
	job := s.research(t, "job-agent", "light", "balanced", []string{alpha.Page("/"), alpha.Page("/a")})
	if fb := fallbacks(job); len(fb) > 0 && !slices.Equal(fb, []string{research.FallbackHTTPMode}) {
		t.Errorf("fallbacks %v", fb)
	}
	var summarized bool
	for _, src := range s.sources(t, "job-agent") {
		summarized = summarized || strings.HasPrefix(src.Content, "Kestrels summarized by the agent.")
	}
	if !summarized {
		t.Errorf("no source carries the agent's summary")
	}
	md := s.reportMarkdown(t, "job-agent")
	if !strings.Contains(md, "Kestrels migrate [1]") || strings.Contains(md, "[99]") {
		t.Errorf("report keeps [1] and drops [99]?\n%s", md)
	}
	if llmCalls.Load() != 2 {
		t.Errorf("%d model calls, want the busy one then the good one", llmCalls.Load())
	}
	if !strings.Contains(md, alpha.Page("/")) {
		t.Errorf("the sources list lacks the crawled page:\n%s", md)
	}
}

// rateLimitedLLM answers every model with 429.
func rateLimitedLLM(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"error":{"message":"rate limited","type":"rate_limit"}}`)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// The report is saved while the model streams it, so readers of the store
// see it grow before the job ends.
func TestReportGrowsWhileTheModelStreams(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{Hosts: 1})
	release := make(chan struct{})
	llm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		send := func(text string) {
			data, _ := json.Marshal(map[string]any{"model": "m", "choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": text}}}})
			fmt.Fprintf(w, "data: %s\n\n", data)
			w.(http.Flusher).Flush()
		}
		send("## Executive summary\n\nThe first half arrives [1]. ")
		time.Sleep(1100 * time.Millisecond) // past the one-second save interval
		send("More text. ")
		select {
		case <-release:
		case <-time.After(30 * time.Second):
		}
		send("The second half arrives.\n")
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(llm.Close)
	cfg := fmt.Sprintf("[research]\nrender = \"never\"\n[research.llm]\nbase_url = %q\napi_key_env = \"\"\nmodels = [\"m\"]\n", llm.URL)
	s := newStackWith(t, stackOpts{config: cfg, allowPrivate: site.AllowPrivate()})
	id := "job-grows"
	if code, out := s.do(t, "POST", "/v1/jobs", map[string]any{"query": "growth", "job_id": id, "seed_urls": []string{site.Hosts[0].Page("/a")}}); code != http.StatusAccepted {
		t.Fatalf("submit: %d %v", code, out)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		rep, err := s.st.GetReport(context.Background(), devKey(id))
		if err == nil && !rep.Complete && strings.Contains(rep.Markdown, "The first half arrives") {
			break
		}
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("no partial report while the model streamed (last: %+v, %v)", rep, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(release)
	s.wait(t, id)
	if md := s.reportMarkdown(t, id); !strings.Contains(md, "The second half arrives") {
		t.Errorf("final report lacks the end of the stream:\n%s", md)
	}
}

// The research agent's token is scoped to the agent's endpoint: the agent
// sees a placeholder (which is what it could leak into its answer), and
// the endpoint receives the token itself.
func TestAgentTokenScopedToItsEndpoint(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{Hosts: 1})
	alpha := site.Hosts[0]
	const token = "agent-token-3c9e07d1b6a24f58"
	t.Setenv("SANDSTEP_AGENT_TOKEN", token)
	var mu sync.Mutex
	var got []string
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Authorization")+" | "+r.Header.Get("X-Api-Key"))
		mu.Unlock()
		io.WriteString(w, "{}")
	}))
	t.Cleanup(endpoint.Close)
	// The agent calls its endpoint, then answers with a summary that
	// carries what it saw of the token.
	agent := `curl -s -o /dev/null --noproxy '' -H "Authorization: Bearer $ANTHROPIC_AUTH_TOKEN" -H "X-Api-Key: $ANTHROPIC_API_KEY" "$ANTHROPIC_BASE_URL/v1/messages"
url=$(printf '%s' "$PROMPT" | grep -o '"url":"[^"]*"' | head -1 | cut -d'"' -f4)
printf '{"sources":[{"title":"t","url":"%s","summary":"The agent saw %s.","keyPoints":["one"]}],"overallInsights":[]}' "$url" "$ANTHROPIC_AUTH_TOKEN"`
	cfg := fmt.Sprintf("[research]\nrender = \"never\"\n[research.agent]\nenabled = true\nmodel = \"m\"\nbase_url = %q\ncommand = %q\n", endpoint.URL, agent)
	s := newStackWith(t, stackOpts{config: cfg, allowPrivate: append(site.AllowPrivate(), strings.TrimPrefix(endpoint.URL, "http://"))})
	s.research(t, "job-agent-token", "light", "speed", []string{alpha.Page("/a")})
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != "Bearer "+token+" | "+token {
		t.Errorf("the agent's endpoint got %q, want the token itself", got)
	}
	var summary string
	for _, src := range s.sources(t, "job-agent-token") {
		if strings.HasPrefix(src.Content, "The agent saw ") {
			summary = src.Content
		}
	}
	if !strings.Contains(summary, "sandstep-placeholder-") || strings.Contains(summary, token) {
		t.Errorf("the agent saw %q, want a placeholder and never the token", summary)
	}
}
