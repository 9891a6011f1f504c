package localstack_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/internal/testkit/fixturesite"
)

// TestResearchArtifactsKeptBeforeCleanup: what the job's summarizing agent
// writes under /workspace/artifacts (a chart, a nested data file) is
// copied into the job's stored results by the cleanup, before the sandbox
// is terminated, on the local provider and on Modal alike; it is served
// at /v1/jobs/{id}/artifacts/{path} after the sandbox is gone, with a
// file.written event each, and listed at the job's links.artifacts.
func TestResearchArtifactsKeptBeforeCleanup(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{Hosts: 1})
	seeds := []string{site.Hosts[0].Page("/a")}
	const chart = `<svg xmlns="http://www.w3.org/2000/svg"><text>kestrels</text></svg>`
	agent := fmt.Sprintf(`mkdir -p /workspace/artifacts/data && printf '%%s' '%s' > /workspace/artifacts/chart.svg && printf 'a,b\n1,2\n' > /workspace/artifacts/data/table.csv
url=$(printf '%%s' "$PROMPT" | grep -o '"url":"[^"]*"' | head -1 | cut -d'"' -f4)
printf '{"sources":[{"title":"t","url":"%%s","summary":"Kestrels summarized.","keyPoints":["one"]}],"overallInsights":["insight"]}' "$url"`, chart)
	cfg := fmt.Sprintf("[research]\nrender = \"never\"\n[research.agent]\nenabled = true\nmodel = \"m\"\ncommand = %q\n", agent)
	for _, name := range []string{"local", "modal"} {
		t.Run(name, func(t *testing.T) {
			o := stackOpts{provider: name, config: cfg, allowPrivate: site.AllowPrivate()}
			if name == "modal" {
				o.modalURL = startFakeModal(t).URL
			}
			s := newStackWith(t, o)
			id := "job-artifacts-" + name
			s.research(t, id, "light", "balanced", seeds)
			s.noLiveSandboxes(t, id)
			// The job's links.artifacts lists what was kept; each file is
			// at its url.
			_, _, jobBody := s.raw(t, "/v1/jobs/"+id)
			var job struct {
				Links struct{ Artifacts string }
			}
			if err := json.Unmarshal([]byte(jobBody), &job); err != nil || job.Links.Artifacts != "/v1/jobs/"+id+"/artifacts" {
				t.Fatalf("the job's links.artifacts: %v %s", err, jobBody)
			}
			code, _, listBody := s.raw(t, job.Links.Artifacts)
			var list struct {
				Artifacts []struct {
					Path string
					Size int64
					URL  string
				}
			}
			if err := json.Unmarshal([]byte(listBody), &list); code != http.StatusOK || err != nil || len(list.Artifacts) != 2 {
				t.Fatalf("the list: %d %v %s", code, err, listBody)
			}
			want := map[string]struct{ body, ctype string }{
				"chart.svg":      {chart, "image/svg+xml"},
				"data/table.csv": {"a,b\n1,2\n", "text/csv"},
			}
			for _, a := range list.Artifacts {
				w, ok := want[a.Path]
				code, ctype, body := s.raw(t, a.URL)
				if !ok || a.Size != int64(len(w.body)) || code != http.StatusOK || body != w.body || !strings.HasPrefix(ctype, w.ctype) {
					t.Errorf("artifact %s (%d bytes) at %s: %d %q %q; want 200 %q %q", a.Path, a.Size, a.URL, code, ctype, body, w.ctype, w.body)
				}
			}
			if code, _, _ := s.raw(t, "/v1/jobs/"+id+"/artifacts/missing.txt"); code != http.StatusNotFound {
				t.Errorf("a missing artifact: %d, want 404", code)
			}
			written := 0
			for _, e := range s.events(t, id) {
				if e["type"] == "file.written" {
					written++
				}
			}
			if written != 2 {
				t.Errorf("%d file.written events, want 2", written)
			}
		})
	}
}

// raw GETs path and returns the status, content type and body.
func (s *stack) raw(t testing.TB, path string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", s.srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}
