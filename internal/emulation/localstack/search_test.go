package localstack_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sandstep/sandstep/internal/service/research"
)

// stuckSearch is a search backend (either API) that never answers: each
// request is held until the client gives up. It counts requests per query
// and the most in flight at once.
type stuckSearch struct {
	*httptest.Server
	mu       sync.Mutex
	perQuery map[string]int
	inFlight int
	most     int
}

func newStuckSearch(t testing.TB) *stuckSearch {
	t.Helper()
	s := &stuckSearch{perQuery: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		s.mu.Lock()
		s.perQuery[q.Get("q")+q.Get("srsearch")]++
		s.inFlight++
		s.most = max(s.most, s.inFlight)
		s.mu.Unlock()
		<-r.Context().Done()
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *stuckSearch) stats() (map[string]int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.perQuery), s.most
}

// The only backend never answers and the job has no seed URL: the job
// fails, naming the backend and why, after one timeout for all its queries
// at once; each query says so as a warning event first.
func TestSearchThatNeverAnswersFailsTheJob(t *testing.T) {
	stuck := newStuckSearch(t)
	s := newStackWith(t, stackOpts{searx: stuck.Server, config: "timeout = \"1s\"\n"})
	code, out := s.do(t, "POST", "/v1/jobs", map[string]any{"query": "kestrel migration", "job_id": "job-stuck", "mode": "max"})
	if code != http.StatusAccepted {
		t.Fatalf("submit: %d %v", code, out)
	}
	job := s.wait(t, "job-stuck")
	want := "SearchFailed: no source found: every search failed: searxng: no answer within 1s (4 of 4 queries)"
	if job["status"] != "failed" || job["error"] != want {
		t.Fatalf("job: status %v, error %q, want failed with %q", job["status"], job["error"], want)
	}
	perQuery, most := stuck.stats()
	queries := []string{"kestrel migration", "kestrel migration overview", "kestrel migration comparison", "kestrel migration latest research"}
	if !slices.Equal(slices.Sorted(maps.Keys(perQuery)), slices.Sorted(slices.Values(queries))) {
		t.Errorf("queries asked: %v", perQuery)
	}
	for q, n := range perQuery {
		if n != 1 {
			t.Errorf("%q was asked %d times; a hanging backend must cost one timeout per query", q, n)
		}
	}
	if most != len(queries) {
		t.Errorf("%d queries were in flight at once, want all %d", most, len(queries))
	}
	evs := s.events(t, "job-stuck")
	warnings := 0
	for _, e := range evs {
		if e["stage"] == "search" && e["status"] == "warning" {
			warnings++
			if !strings.Contains(fmt.Sprint(e["message"]), "searxng: no answer within 1s") {
				t.Errorf("warning %v", e)
			}
		}
	}
	if warnings != len(queries) {
		t.Errorf("%d search warnings, want one per query: %v", warnings, evs)
	}
	if !hasEvent(evs, "search", "every search failed: searxng") {
		t.Errorf("no search error event: %v", evs)
	}
	if st := steps(job)["search"]; st != "error" {
		t.Errorf("search step %q", st)
	}
	// Nothing was crawled, so there is no report, and no sandbox was made.
	if code, rep := s.do(t, "GET", "/v1/jobs/job-stuck/report", nil); code != http.StatusNotFound {
		t.Errorf("report: %d %v", code, rep)
	}
	s.noLiveSandboxes(t, "job-stuck")
	if slices.Contains(s.statesEntered("job-stuck"), "Provision") {
		t.Error("a job with nothing to read provisioned a sandbox")
	}
}

// The first backend never answers, the second answers the query but fails
// the related one: the job goes on with what it found, each query warns,
// and the fallback search_incomplete says some searches found nothing.
func TestSearchFallbackWarnsAndGoesOn(t *testing.T) {
	stuck := newStuckSearch(t)
	searx := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query().Get("q")
		if strings.HasSuffix(q, " overview") {
			http.Error(w, `{"error":"engines overloaded"}`, http.StatusServiceUnavailable)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"query": q, "results": []map[string]any{
			{"url": "http://127.0.0.1:1/found", "title": "found", "content": "kestrel migration snippet"},
		}})
	}))
	t.Cleanup(searx.Close)
	s := newStackWith(t, stackOpts{searx: searx, allowPrivate: []string{"127.0.0.1:1"}, config: fmt.Sprintf(`timeout = "1s"
backends = ["wikipedia", "searxng"]
wikipedia_url = %q
`, stuck.URL)})
	job := s.research(t, "job-fallback", "light", "balanced", nil)
	if fb := fallbacks(job); !slices.Contains(fb, research.FallbackSearchIncomplete) {
		t.Errorf("fallbacks %v", fb)
	}
	evs := s.events(t, "job-fallback")
	var warnings []string
	for _, e := range evs {
		if e["stage"] == "search" && e["status"] == "warning" {
			warnings = append(warnings, fmt.Sprint(e["message"]))
		}
	}
	slices.Sort(warnings)
	// The 503 is retried with backoff until the 1 s are spent.
	want := []string{
		`"kestrel migration fixtures overview": 0 results (wikipedia: no answer within 1s; searxng: HTTP 503 Service Unavailable: engines overloaded`,
		`"kestrel migration fixtures": 1 results from searxng (wikipedia: no answer within 1s)`,
	}
	if len(warnings) != 2 || !strings.HasPrefix(warnings[0], want[0]) || warnings[1] != want[1] {
		t.Errorf("warnings:\n%s\nwant\n%s", strings.Join(warnings, "\n"), strings.Join(want, "\n"))
	}
	if !hasEvent(evs, "search", "1 of 2 searches failed on every backend") {
		t.Errorf("no fallback event: %v", evs)
	}
	if perQuery, _ := stuck.stats(); len(perQuery) != 2 || perQuery["kestrel migration fixtures"] != 1 || perQuery["kestrel migration fixtures overview"] != 1 {
		t.Errorf("wikipedia asked %v", perQuery)
	}
}

// steps maps a job's step ids to their status.
func steps(job map[string]any) map[string]string {
	out := map[string]string{}
	for _, s := range job["steps"].([]any) {
		st := s.(map[string]any)
		out[fmt.Sprint(st["id"])] = fmt.Sprint(st["status"])
	}
	return out
}
