package soak

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/fixturesite"
	"github.com/sandstep/sandstep/internal/testkit/testbin"
	"github.com/sandstep/sandstep/providers"
)

// A kill -9 of the server in the middle of each phase of a job: after a
// restart on the same data the job resumes where it was and finishes, and
// nothing is left: no sandbox alive (provider and ledger), no plugin
// process orphaned, no event lost or repeated, no execution record.
func TestServeKilledInEachPhase(t *testing.T) {
	w := newWorld(t)
	site := fixturesite.Start(t, fixturesite.Options{Hosts: 1})
	var pageGate, agentGate, llmGate gate
	page := gatedPage(t, &pageGate)
	agentSite := gatedPage(t, &agentGate)
	// The agent first asks the gated page (a summary that takes its time),
	// then answers for the prompt's first source, as Claude Code would.
	agent := fmt.Sprintf(`curl -s --noproxy '' -o /dev/null %s/summary
url=$(printf '%%s' "$PROMPT" | grep -o '"url":"[^"]*"' | head -1 | cut -d'"' -f4)
printf '{"sources":[{"title":"t","url":"%%s","summary":"Kestrels summarized by the agent.","keyPoints":["one","two","three"]}],"overallInsights":["insight"]}' "$url"`, agentSite.URL)
	w.search.answer(site.Hosts[0].Page("/a"), site.Hosts[0].Page("/b"))
	w.configure(setup{agent: agent, llm: fakeLLM(t, &llmGate), allowPrivate: append(site.AllowPrivate(), hostOf(page), hostOf(agentSite))})
	w.start()
	prov := w.provider()

	type holdFn func(job string) (entered <-chan struct{}, release func())
	phases := []struct {
		name  string
		seeds []string
		hold  holdFn
	}{
		// The search engine does not answer: Discover waits on it.
		{"discover", nil, func(string) (<-chan struct{}, func()) { return w.search.arm(), w.search.open }},
		// The sandbox was made and warmed, and Provision's answer is lost.
		{"provision", nil, func(job string) (<-chan struct{}, func()) {
			return w.faults.once("ProvisionFunction", job, "after", answer{Action: "hold"}), nil
		}},
		// The crawler, in the sandbox, waits on a page.
		{"crawl", []string{page.URL + "/held"}, func(string) (<-chan struct{}, func()) { return pageGate.arm(), pageGate.open }},
		// The agent, in the sandbox, is summarizing.
		{"summarize", nil, func(string) (<-chan struct{}, func()) { return agentGate.arm(), agentGate.open }},
		// The model is writing the report.
		{"report", nil, func(string) (<-chan struct{}, func()) { return llmGate.arm(), llmGate.open }},
		// Cleanup was invoked and had not begun.
		{"cleanup", nil, func(job string) (<-chan struct{}, func()) {
			return w.faults.once("CleanupFunction", job, "before", answer{Action: "hold"}), nil
		}},
	}
	for _, ph := range phases {
		t.Run(ph.name, func(t *testing.T) {
			w.t = t
			defer func() { w.t = t }()
			job := "killed-in-" + ph.name
			entered, release := ph.hold(job)
			seeds := append([]string{site.Hosts[0].Page("/a")}, ph.seeds...)
			w.submit(job, seeds)
			select {
			case <-entered:
			case <-time.After(3 * time.Minute):
				t.Fatalf("the job never reached %s; server log:\n%s", ph.name, tail(w.server().log))
			}
			w.kill()
			if release != nil {
				release()
			}
			s := w.start()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			got, err := w.awaitEnd(ctx, job)
			if err != nil {
				t.Fatalf("%v; server log:\n%s", err, tail(s.log))
			}
			if got["status"] != "succeeded" {
				t.Fatalf("job %s: %v (%v); server log:\n%s", job, got["status"], got["error"], tail(s.log))
			}
			if !logged(s.log, "execution resumed", job) {
				t.Errorf("the restarted server did not resume %s; its log:\n%s", job, tail(s.log))
			}
			st := w.stateStore()
			if err := checkEvents(st, job, "succeeded"); err != nil {
				t.Error(err)
			}
			w.noLeaks(st, prov)
			awaitNoRecord(t, st, job)
		})
	}
}

// noLeaks checks that no sandbox is alive and no ledger entry open.
func (w *world) noLeaks(st *store.Store, prov providers.Provider) {
	w.t.Helper()
	for _, e := range liveLedger(w.t, st) {
		w.t.Errorf("ledger entry %s (owner %s) is still %s", e.Name, e.Owner, e.State)
	}
	for _, sb := range aliveSandboxes(w.t, prov) {
		w.t.Errorf("sandbox %s (%s) is still alive", sb.ID, sb.Name)
	}
}

// awaitNoRecord waits for the engine's bookkeeping after an execution's
// end: its record goes once the execution ended, right after the job did.
func awaitNoRecord(t *testing.T, st *store.Store, job string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := st.GetExecution(context.Background(), jobKey(job))
		if errors.Is(err, store.ErrNotFound) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the execution record of %s is still there", job)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logged reports whether the server's log has a line with msg about job.
func logged(path, msg, job string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var l struct {
			Msg    string `json:"msg"`
			JobKey string `json:"job_key"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == msg && l.JobKey == jobKey(job) {
			return true
		}
	}
	return false
}

// A kill -9 while a session run is in flight: after the restart the run is
// failed with the reason, the session runs again at once with its files,
// and the sandbox of before is gone.
func TestSessionRunInterruptedByServerKill(t *testing.T) {
	w := newWorld(t)
	w.search.answer()
	w.configure(setup{sessions: true})
	w.start()
	prov := w.provider()

	code, out := w.mustDo("POST", "/v1/sessions/s1/run", map[string]any{"code": "echo kept > /workspace/file; echo warm", "language": "shell"})
	if code != http.StatusOK || out["success"] != true {
		t.Fatalf("first run: %d %v", code, out)
	}
	code, out = w.mustDo("POST", "/v1/sessions/s1/run", map[string]any{"code": "sleep 600", "language": "shell", "timeout_seconds": 600})
	if code != http.StatusAccepted {
		t.Fatalf("long run: %d %v, want 202 after sync_wait", code, out)
	}
	runID, _ := out["run_id"].(string)
	// The run holds the session from the moment it began.
	view := w.awaitSession("s1", func(v map[string]any) bool { return v["state"] == "running" })
	sb, _ := view["sandbox"].(map[string]any)
	oldSandbox, _ := sb["id"].(string)
	if oldSandbox == "" {
		t.Fatalf("session %v has no sandbox", view)
	}

	w.kill()
	w.start()

	code, out = w.mustDo("GET", "/v1/sessions/s1/runs/"+runID, nil)
	if code != http.StatusOK || out["status"] != "failed" || out["error"] != "interrupted: the server stopped while the run was in flight" {
		t.Fatalf("the interrupted run: %d %v", code, out)
	}
	code, out = w.mustDo("GET", "/v1/sessions/s1", nil)
	if code != http.StatusOK || out["state"] != "idle" {
		t.Fatalf("session after the restart: %d %v", code, out)
	}
	if sbv, _ := out["sandbox"].(map[string]any); sbv != nil && sbv["id"] == oldSandbox {
		t.Errorf("the session still keeps the sandbox of before the crash: %v", out)
	}
	// Usable at once, with its files.
	start := time.Now()
	code, out = w.mustDo("POST", "/v1/sessions/s1/run", map[string]any{"code": "cat /workspace/file", "language": "shell"})
	if code != http.StatusOK || out["success"] != true || strings.TrimSpace(fmt.Sprint(out["stdout"])) != "kept" {
		t.Fatalf("run after the restart: %d %v", code, out)
	}
	t.Logf("the session ran again %v after the restart", time.Since(start))

	st := w.stateStore()
	if sb, err := prov.Get(context.Background(), oldSandbox); err == nil && sb.State == providers.StateRunning {
		t.Errorf("the sandbox of before the crash, %s, is alive", oldSandbox)
	}
	// What is alive is what the ledger holds, and the reverse: the
	// session's new sandbox only.
	var alive, open []string
	for _, sb := range aliveSandboxes(t, prov) {
		alive = append(alive, sb.ID)
	}
	for _, e := range liveLedger(t, st) {
		open = append(open, e.ProviderID)
	}
	slices.Sort(alive)
	slices.Sort(open)
	if len(alive) != 1 || !slices.Equal(alive, open) {
		t.Errorf("alive sandboxes %v, open ledger entries %v: want the session's one sandbox in both", alive, open)
	}
	// Deleting the session leaves nothing.
	if code, out := w.mustDo("DELETE", "/v1/sessions/s1", nil); code != http.StatusOK {
		t.Fatalf("delete: %d %v", code, out)
	}
	w.noLeaks(st, prov)
}

// awaitSession polls the session until ok says so (bounded).
func (w *world) awaitSession(id string, ok func(map[string]any) bool) map[string]any {
	w.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		_, v := w.mustDo("GET", "/v1/sessions/"+id, nil)
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("session %s: %v", id, v)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A server that comes back with another state machine definition cannot
// resume an execution started under the old one: the job fails with a clear
// error and its cleanup runs, so nothing is left.
func TestRestartWithAChangedDefinitionFailsTheJobCleanly(t *testing.T) {
	w := newWorld(t)
	site := fixturesite.Start(t, fixturesite.Options{Hosts: 1})
	var pageGate gate
	page := gatedPage(t, &pageGate)
	w.search.answer(site.Hosts[0].Page("/a"))
	w.configure(setup{allowPrivate: append(site.AllowPrivate(), hostOf(page))})
	w.start()
	prov := w.provider()
	entered := pageGate.arm()
	w.submit("job-changed", []string{page.URL + "/held"})
	select {
	case <-entered:
	case <-time.After(3 * time.Minute):
		t.Fatalf("the crawl never began; server log:\n%s", tail(w.server().log))
	}
	w.kill()
	pageGate.open()

	// The same template with one word of the definition changed.
	root, _ := testbin.Root()
	dir := t.TempDir()
	tmpl, err := os.ReadFile(filepath.Join(root, "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	def, err := os.ReadFile(filepath.Join(root, "statemachine", "deep-research.asl.json"))
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(def), `"Comment": "sandstep deep research`, `"Comment": "sandstep deep research, changed`, 1)
	if changed == string(def) {
		t.Fatal("the definition's comment moved; change another word")
	}
	os.MkdirAll(filepath.Join(dir, "statemachine"), 0o755)
	os.WriteFile(filepath.Join(dir, "statemachine", "deep-research.asl.json"), []byte(changed), 0o644)
	// The template's other machine, unchanged.
	agentDef, err := os.ReadFile(filepath.Join(root, "statemachine", "agent-run.asl.json"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "statemachine", "agent-run.asl.json"), agentDef, 0o644)
	os.WriteFile(filepath.Join(dir, "template.yaml"), tmpl, 0o644)
	w.template = filepath.Join(dir, "template.yaml")
	s := w.start()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	job, err := w.awaitEnd(ctx, "job-changed")
	if err != nil {
		t.Fatalf("%v; server log:\n%s", err, tail(s.log))
	}
	msg := fmt.Sprint(job["error"])
	if job["status"] != "failed" || !strings.Contains(msg, "ResumeFailed") || !strings.Contains(msg, "definition changed") {
		t.Fatalf("job: %v %q, want failed with ResumeFailed naming the changed definition", job["status"], msg)
	}
	st := w.stateStore()
	if err := checkEvents(st, "job-changed", "failed"); err != nil {
		t.Error(err)
	}
	w.noLeaks(st, prov)
	awaitNoRecord(t, st, "job-changed")
}
