package localstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/emulation/asl"
	"github.com/sandstep/sandstep/internal/service/research"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/fixturesite"
)

// usageLLM is a fake model that streams an answer and, as OpenAI's API does
// with stream_options.include_usage, a last chunk with the call's usage.
// It counts its calls.
func usageLLM(t *testing.T, calls *atomic.Int64, prompt, completion int) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var req struct {
			Model         string `json:"model"`
			StreamOptions struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "text/event-stream")
		data, _ := json.Marshal(map[string]any{"model": req.Model, "choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": "## Executive summary\n\nKestrels migrate [1].\n"}}}})
		fmt.Fprintf(w, "data: %s\n\n", data)
		if req.StreamOptions.IncludeUsage {
			data, _ = json.Marshal(map[string]any{"model": req.Model, "choices": []any{},
				"usage": map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}})
			fmt.Fprintf(w, "data: %s\n\n", data)
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// A research job on the local stack reports the usage the fakes counted:
// the fake model's tokens, the fake search's calls, the ledger's sandbox
// time; its cost at the configured prices; the report's footer states it;
// and GET /v1/usage adds it up for the tenant.
func TestResearchJobReportsWhatTheFakesCounted(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{Hosts: 1})
	var searches, llmCalls atomic.Int64
	searx := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		searches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"query": r.URL.Query().Get("q"), "results": []any{}})
	}))
	t.Cleanup(searx.Close)
	llm := usageLLM(t, &llmCalls, 1200, 34)
	cfg := fmt.Sprintf(`[research]
render = "never"
[research.llm]
base_url = %q
api_key_env = ""
models = ["m"]
[pricing.sandbox.local]
default = 0.001
[pricing.models.m]
input = 2.0
output = 10.0
[pricing.search]
searxng = 0.005
[pricing.egress]
local = 0.09
`, llm)
	s := newStackWith(t, stackOpts{config: cfg, searx: searx, allowPrivate: site.AllowPrivate()})
	s.research(t, "job-usage", "light", "balanced", []string{site.Hosts[0].Page("/"), site.Hosts[0].Page("/a")})
	code, job := s.do(t, "GET", "/v1/jobs/job-usage", nil)
	if code != http.StatusOK {
		t.Fatalf("status: %d %v", code, job)
	}
	raw, _ := json.Marshal(job["usage"])
	var u struct {
		SandboxSeconds []struct {
			Provider string
			MemoryMB int `json:"memory_mb"`
			Seconds  float64
		} `json:"sandbox_seconds"`
		Execs  int64
		Tokens []struct {
			Model         string
			Input, Output int64
			Estimated     bool
		}
		SearchCalls []struct {
			Backend string
			Calls   int64
		} `json:"search_calls"`
		PagesCrawled int64  `json:"pages_crawled"`
		BytesOut     *int64 `json:"bytes_out"`
	}
	if err := json.Unmarshal(raw, &u); err != nil {
		t.Fatal(err)
	}
	n := llmCalls.Load()
	if n == 0 || len(u.Tokens) != 1 || u.Tokens[0].Model != "m" || u.Tokens[0].Input != 1200*n || u.Tokens[0].Output != 34*n || u.Tokens[0].Estimated {
		t.Errorf("tokens %+v, the fake model answered %d calls of 1200+34 tokens", u.Tokens, n)
	}
	if len(u.SearchCalls) != 1 || u.SearchCalls[0].Backend != "searxng" || u.SearchCalls[0].Calls != searches.Load() || searches.Load() == 0 {
		t.Errorf("search calls %+v, the fake search answered %d", u.SearchCalls, searches.Load())
	}
	if u.PagesCrawled < 2 || u.Execs < 3 {
		t.Errorf("pages %d, execs %d", u.PagesCrawled, u.Execs)
	}
	entry, err := s.st.LedgerGet(context.Background(), devKey("job-usage"))
	if err != nil {
		t.Fatal(err)
	}
	want := entry.TerminatedAt.Sub(entry.RunningAt).Seconds()
	// The crawl's traffic, as the sandbox's proxy measured it at the
	// terminate: at least the requests of the pages it fetched.
	if entry.BytesOut == nil || u.BytesOut == nil || *u.BytesOut != *entry.BytesOut || *u.BytesOut < 100*u.PagesCrawled {
		t.Fatalf("bytes out %v, the ledger says %v for %d pages", u.BytesOut, entry.BytesOut, u.PagesCrawled)
	}
	if len(u.SandboxSeconds) != 1 || u.SandboxSeconds[0].Provider != "local" || math.Abs(u.SandboxSeconds[0].Seconds-want) > 0.01 || want <= 0 {
		t.Errorf("sandbox seconds %+v, the ledger says %.3f s", u.SandboxSeconds, want)
	}
	cost, _ := job["cost"].(map[string]any)
	wantCost := want*0.001 + float64(1200*n)*2/1e6 + float64(34*n)*10/1e6 + float64(searches.Load())*0.005 + float64(*entry.BytesOut)/1e9*0.09
	if cost == nil || cost["currency"] != "USD" || math.Abs(cost["total"].(float64)-wantCost) > 1e-5 || len(cost["unpriced"].([]any)) != 0 {
		t.Errorf("cost %v, want %.6f", cost, wantCost)
	}
	if md := s.reportMarkdown(t, "job-usage"); !strings.Contains(md, fmt.Sprintf("%d model tokens", 1234*n)) || !strings.Contains(md, "cost USD ") {
		t.Errorf("the report's footer does not state the cost:\n%s", md)
	}
	code, all := s.do(t, "GET", "/v1/usage?group_by=job_type", nil)
	if code != http.StatusOK {
		t.Fatalf("usage: %d %v", code, all)
	}
	total := all["total"].(map[string]any)
	groups := all["groups"].([]any)
	if total["jobs"] != 1.0 || len(groups) != 1 || groups[0].(map[string]any)["key"] != "research:light" ||
		math.Abs(total["cost"].(map[string]any)["total"].(float64)-wantCost) > 1e-5 {
		t.Errorf("GET /v1/usage: %v", all)
	}
}

// A job with a token budget smaller than its report's prompt never calls
// the model: its report is extractive, and it records budget_exhausted.
func TestSmallTokenBudgetEndsWithAnExtractiveReport(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{Hosts: 1})
	var llmCalls atomic.Int64
	llm := usageLLM(t, &llmCalls, 1200, 34)
	cfg := fmt.Sprintf("[research]\nrender = \"never\"\n[research.llm]\nbase_url = %q\napi_key_env = \"\"\nmodels = [\"m\"]\n", llm)
	s := newStackWith(t, stackOpts{config: cfg, allowPrivate: site.AllowPrivate()})
	body := map[string]any{"query": "kestrel migration fixtures", "job_id": "job-budget", "seed_urls": []string{site.Hosts[0].Page("/")},
		"budget": map[string]any{"max_tokens": 20}}
	if code, out := s.do(t, "POST", "/v1/jobs", body); code != http.StatusAccepted {
		t.Fatalf("submit: %d %v", code, out)
	}
	job := s.wait(t, "job-budget")
	if job["status"] != "succeeded" || !slices.Contains(fallbacks(job), research.FallbackBudgetExhausted) {
		t.Fatalf("job %v, fallbacks %v", job["status"], job["fallbacks"])
	}
	if n := llmCalls.Load(); n != 0 {
		t.Errorf("the model was called %d times past the budget", n)
	}
	md := s.reportMarkdown(t, "job-budget")
	if strings.Contains(md, "Kestrels migrate [1]") || !strings.Contains(md, "Used ") {
		t.Errorf("not an extractive report with its footer:\n%s", md)
	}
	if tok := job["usage"].(map[string]any)["tokens"].([]any); len(tok) != 0 {
		t.Errorf("tokens counted for a job that called no model: %v", tok)
	}
	// A budget that is not one is refused, naming the field.
	if code, out := s.do(t, "POST", "/v1/jobs", map[string]any{"query": "q", "budget": map[string]any{"max_tokens": -1}}); code != http.StatusBadRequest ||
		out["error"].(map[string]any)["field"] != "budget" {
		t.Errorf("a negative budget: %d %v", code, out)
	}
}

// A phase delivered twice (Lambda runs an invocation at least once) counts
// once: the discover phase run twice on one job searched twice, and the
// job's usage holds one run's searches.
func TestAReplayedPhaseCountsOnce(t *testing.T) {
	var searches atomic.Int64
	searx := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		searches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"query": r.URL.Query().Get("q"), "results": []any{}})
	}))
	t.Cleanup(searx.Close)
	s := newStackWith(t, stackOpts{searx: searx, allowPrivate: []string{"127.0.0.1:1"}})
	ctx := context.Background()
	key := devKey("job-replay")
	if _, _, err := s.st.CreateJob(ctx, store.NewJob{ID: key, Tenant: "dev", ClientID: "job-replay", RequestHash: "h",
		Request: []byte(`{"query":"kestrel migration fixtures","mode":"light","optimization":"balanced","seed_urls":["http://127.0.0.1:1/a"]}`)}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := s.App.Phases.Discover(ctx, research.Input{JobID: key}); err != nil {
			t.Fatal(err)
		}
	}
	u, err := s.st.JobUsage(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if got, all := u.SearchCalls["searxng"], searches.Load(); all == 0 || all%2 != 0 || got != all/2 {
		t.Fatalf("the job's usage counts %d searches; the two deliveries made %d", got, all)
	}
}

// Every slice of a crawl keeps its own usage record, also a slice in which
// the crawler printed nothing (its progress offset does not move): the
// job's execs are those of every slice, and a slice delivered again
// replaces only its own record.
func TestEveryCrawlSliceCounts(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{Hosts: 1, SlowLatency: 1500 * time.Millisecond})
	var crawls atomic.Int64
	s := newStackWith(t, stackOpts{config: "[research]\nrender = \"never\"\n", allowPrivate: site.AllowPrivate(),
		wrap: func(inv asl.Invoker) asl.Invoker {
			return &phaseWrapper{inner: inv, fn: "CrawlFunction", before: func(context.Context, int) error {
				crawls.Add(1)
				return nil
			}}
		}})
	// Slices far shorter than the slow page: the crawler is silent
	// through several of them.
	s.App.Phases.CrawlSlice = 100 * time.Millisecond
	s.research(t, "job-slices", "light", "balanced", []string{site.Hosts[0].Page(fixturesite.PathSlow)})
	recs, err := s.st.JobUsageRecords(context.Background(), devKey("job-slices"))
	if err != nil {
		t.Fatal(err)
	}
	calls := int(crawls.Load())
	var keys []string
	var execs int64
	for k, u := range recs {
		if strings.HasPrefix(k, "crawl:") {
			keys = append(keys, k)
			execs += u.Execs
			if u.Execs == 0 {
				t.Errorf("slice %s counted no exec", k)
			}
		}
	}
	slices.Sort(keys)
	if calls < 3 || len(keys) != calls {
		t.Fatalf("%d crawl slices ran, %d usage records: %v", calls, len(keys), keys)
	}
	for i := range calls {
		if _, ok := recs[fmt.Sprintf("crawl:%d", i)]; !ok {
			t.Errorf("no record of slice %d: %v", i, keys)
		}
	}
	u, err := s.st.JobUsage(context.Background(), devKey("job-slices"))
	if err != nil {
		t.Fatal(err)
	}
	if u.Execs < execs {
		t.Errorf("the job counts %d execs, its crawl slices alone %d", u.Execs, execs)
	}
}
