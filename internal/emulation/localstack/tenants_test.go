package localstack_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/emulation/asl"
	"github.com/sandstep/sandstep/internal/service/ids"
	"github.com/sandstep/sandstep/internal/service/store"
)

// globexToken is a second tenant's token, issued in the config by hash.
const globexToken = "e2e-globex-token-5b7d9f1a3c"

func globexConfig() string {
	sum := sha256.Sum256([]byte(globexToken))
	return fmt.Sprintf("[[auth.tokens]]\ntenant = \"globex\"\nsha256 = %q\n", hex.EncodeToString(sum[:]))
}

// doAs sends a request with tok and reads the JSON answer.
func (s *stack) doAs(t testing.TB, tok, method, path string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, s.srv.URL+path, rd)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
		}
	}
	return resp.StatusCode, out
}

func (s *stack) waitAs(t testing.TB, tok, jobID string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		_, job := s.doAs(t, tok, "GET", "/v1/jobs/"+jobID, nil)
		switch job["status"] {
		case "succeeded", "failed", "cancelled":
			return job
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("job %s did not end", jobID)
	return nil
}

// Two tenants submit the same job_id: both are accepted, and they are two
// jobs, with their own executions, sandboxes, events, reports and cancels;
// neither learns that the other exists. Within a tenant an id keeps its
// meaning: the same request again is 200, another request 409.
func TestJobIDsArePerTenant(t *testing.T) {
	// Both jobs wait at the crawl until both are there, so that they run
	// side by side with their sandboxes alive.
	var (
		mu      sync.Mutex
		arrived int
		gate    = make(chan struct{})
	)
	s := newStackWith(t, stackOpts{config: globexConfig(), wrap: func(inv asl.Invoker) asl.Invoker {
		return &phaseWrapper{inner: inv, fn: "CrawlFunction", before: func(ctx context.Context, _ int) error {
			mu.Lock()
			arrived++
			mu.Unlock()
			select {
			case <-gate:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}}
	}})
	const id = "shared-1"
	bodyOf := func(tenant string) map[string]any {
		return map[string]any{
			"query":     "how does bubblewrap isolate processes, for " + tenant,
			"job_id":    id,
			"seed_urls": []string{"http://127.0.0.1:1/" + tenant + "/a", "http://127.0.0.1:1/" + tenant + "/b"},
		}
	}
	for _, tc := range []struct{ tenant, tok string }{{"dev", token}, {"globex", globexToken}} {
		code, out := s.doAs(t, tc.tok, "POST", "/v1/jobs", bodyOf(tc.tenant))
		if code != http.StatusAccepted || out["job_id"] != id {
			t.Fatalf("%s submits %s: %d %v", tc.tenant, id, code, out)
		}
		links, _ := out["links"].(map[string]any)
		if links["self"] != "/v1/jobs/"+id {
			t.Fatalf("%s's links show %v, want the client's id", tc.tenant, links)
		}
	}
	devKey, globexKey := ids.JobKey("dev", id), ids.JobKey("globex", id)
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		n := arrived
		mu.Unlock()
		if n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			close(gate)
			t.Fatalf("%d of 2 jobs reached the crawl", n)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Two executions, two sandboxes, both alive now.
	for _, key := range []string{devKey, globexKey} {
		if _, ok := s.Engine.Execution(key); !ok {
			t.Errorf("no execution named %s", key)
		}
	}
	names := map[string]bool{}
	for tenant, key := range map[string]string{"dev": devKey, "globex": globexKey} {
		job, err := s.st.GetJob(context.Background(), key)
		if err != nil || job.Tenant != tenant || job.ClientID != id || !strings.Contains(string(job.Request), "for "+tenant) {
			t.Fatalf("%s's record: %+v, %v", tenant, job, err)
		}
		entries, err := s.st.LedgerListByOwner(context.Background(), "job:"+key)
		if err != nil || len(entries) != 1 || entries[0].Tenant != tenant || entries[0].State == store.LedgerTerminated {
			t.Fatalf("%s's sandbox in the ledger: %+v, %v", tenant, entries, err)
		}
		names[entries[0].Name] = true
	}
	if len(names) != 2 {
		t.Fatalf("the two jobs share a sandbox name: %v", names)
	}

	// Within a tenant, the id keeps its meaning.
	for _, tc := range []struct{ tenant, tok string }{{"dev", token}, {"globex", globexToken}} {
		if code, out := s.doAs(t, tc.tok, "POST", "/v1/jobs", bodyOf(tc.tenant)); code != http.StatusOK || out["job_id"] != id {
			t.Errorf("%s resubmits the same request: %d %v, want 200", tc.tenant, code, out)
		}
		other := bodyOf(tc.tenant)
		other["query"] = "something else"
		code, out := s.doAs(t, tc.tok, "POST", "/v1/jobs", other)
		er, _ := out["error"].(map[string]any)
		if code != http.StatusConflict || er["field"] != "job_id" || er["job_id"] != id {
			t.Errorf("%s reuses the id for another request: %d %v, want 409 naming job_id", tc.tenant, code, out)
		}
	}
	// An id only the other tenant has is not found, and free to take.
	if code, out := s.do(t, "POST", "/v1/jobs", map[string]any{"query": "dev's alone", "job_id": "dev-only", "seed_urls": []string{"http://127.0.0.1:1/x"}}); code != http.StatusAccepted {
		t.Fatalf("dev submits dev-only: %d %v", code, out)
	}
	for _, path := range []string{"/v1/jobs/dev-only", "/v1/jobs/dev-only/events", "/v1/jobs/dev-only/report"} {
		if code, out := s.doAs(t, globexToken, "GET", path, nil); code != http.StatusNotFound {
			t.Errorf("globex GET %s: %d %v, want 404", path, code, out)
		}
	}
	if code, out := s.doAs(t, globexToken, "POST", "/v1/jobs/dev-only/cancel", nil); code != http.StatusNotFound {
		t.Errorf("globex cancels dev-only: %d %v, want 404", code, out)
	}
	// Each tenant's listing holds its own jobs only, newest first.
	for _, tc := range []struct {
		tenant, tok string
		want        []string
	}{{"dev", token, []string{"dev-only", id}}, {"globex", globexToken, []string{id}}} {
		code, out := s.doAs(t, tc.tok, "GET", "/v1/jobs", nil)
		jobs, _ := out["jobs"].([]any)
		var got []string
		for _, j := range jobs {
			j := j.(map[string]any)
			if !strings.Contains(fmt.Sprint(j["query"]), tc.tenant) && j["job_id"] != "dev-only" {
				t.Errorf("%s lists a job of another tenant: %v", tc.tenant, j)
			}
			got = append(got, fmt.Sprint(j["job_id"]))
		}
		if code != http.StatusOK || !slices.Equal(got, tc.want) || out["next_cursor"] != nil {
			t.Errorf("%s's jobs: %d %v, want %v", tc.tenant, code, out, tc.want)
		}
	}

	// globex cancels its shared-1; dev's goes on.
	if code, out := s.doAs(t, globexToken, "POST", "/v1/jobs/"+id+"/cancel", nil); code != http.StatusAccepted || out["job_id"] != id {
		t.Fatalf("globex cancels %s: %d %v", id, code, out)
	}
	close(gate)
	g := s.waitAs(t, globexToken, id)
	d := s.waitAs(t, token, id)
	if g["status"] != "cancelled" || d["status"] != "succeeded" || d["job_id"] != id || g["job_id"] != id {
		t.Fatalf("after globex's cancel: dev's %v (%v), globex's %v", d["status"], d["error"], g["status"])
	}
	s.wait(t, "dev-only")

	// Each sees its own report and events.
	code, rep := s.do(t, "GET", "/v1/jobs/"+id+"/report", nil)
	if code != http.StatusOK || rep["job_id"] != id {
		t.Fatalf("dev's report: %d %v", code, rep)
	}
	for _, src := range rep["sources"].([]any) {
		if u := fmt.Sprint(src.(map[string]any)["url"]); strings.Contains(u, "/globex/") {
			t.Errorf("dev's report lists globex's source %s", u)
		}
	}
	// Each job's events end with its own outcome, once.
	for _, tc := range []struct{ tenant, tok, want string }{{"dev", token, "succeeded"}, {"globex", globexToken, "cancelled"}} {
		_, out := s.doAs(t, tc.tok, "GET", "/v1/jobs/"+id+"/events?limit=1000", nil)
		evs, _ := out["events"].([]any)
		var finished []string
		for _, e := range evs {
			if ev := e.(map[string]any); ev["stage"] == "job" {
				finished = append(finished, fmt.Sprint(ev["status"]))
			}
		}
		if len(evs) < 3 || strings.Join(finished, ",") != tc.want {
			t.Errorf("%s's events: %d, finished %v, want one %s", tc.tenant, len(evs), finished, tc.want)
		}
	}
	s.noLiveSandboxes(t, id)
}
