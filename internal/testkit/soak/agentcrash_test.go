package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/testdns"
	"github.com/sandstep/sandstep/providers"
)

// The agent of TestServeKilledMidAgentRun: it prints, keeps an artifact,
// starts a child sandbox through sandstep's API with its own scoped token,
// then waits on a held page, so that the server dies while it works; once
// the page answers it ends.
const crashAgent = `echo "agent started"
echo partial > "$SANDSTEP_ARTIFACTS_DIR/notes.txt"
child=$(curl -sS --noproxy '' -X POST -H "Authorization: Bearer $SANDSTEP_TOKEN" -H 'Content-Type: application/json' \
  -d '{"ttl_seconds":900}' "$SANDSTEP_URL/v1/sandboxes" | grep -o '"id":"[^"]*"' | head -1 | cut -d'"' -f4)
echo "child $child started"
curl -sS --noproxy '' -o /dev/null "$HELD_URL/held"
echo "agent done"
`

var childLine = regexp.MustCompile(`child ([a-z2-7]+) started`)

// A kill -9 of the server while an agent run's agent works: after a restart
// on the same data the run resumes (the detached agent lived on in its
// sandbox, its output is read on from the offset the state machine kept)
// and succeeds with every line told once; the child sandbox the agent
// started is terminated with it, and nothing is left: no sandbox alive
// (provider and ledger), no plugin orphaned, no execution record.
func TestServeKilledMidAgentRun(t *testing.T) {
	w := newWorld(t)
	w.search.answer()
	var held gate
	page := gatedPage(t, &held)
	// The agent reaches sandstep by a name, through the egress proxy: the
	// sandbox's own 127.0.0.1 is its own.
	dns := testdns.Start(t, map[string][]string{"sandstep.test": {"127.0.0.1"}})
	_, port, _ := net.SplitHostPort(w.addr)
	w.configure(setup{
		allowPrivate: []string{w.addr, hostOf(page)},
		dnsServers:   []string{dns.Addr()},
		apiURL:       "http://sandstep.test:" + port,
		agents: fmt.Sprintf("[agents.worker]\ncommand = %q\noutput = \"text\"\nenv = { HELD_URL = %q }\n",
			crashAgent, page.URL),
	})
	w.start()
	prov := w.provider()

	entered := held.arm()
	code, out := w.mustDo("POST", "/v1/agent-runs", map[string]any{"agent": "worker", "prompt": "work, slowly", "job_id": "agent-killed", "timeout_seconds": 600})
	if code != http.StatusAccepted {
		t.Fatalf("submit: %d %v", code, out)
	}
	select {
	case <-entered:
	case <-time.After(3 * time.Minute):
		t.Fatalf("the agent never reached the held page; server log:\n%s", tail(w.server().log))
	}
	// The run's output is read while the agent waits: the child is known
	// before the server dies.
	child := awaitChild(t, w, "agent-killed")
	before := aliveSandboxes(t, prov)
	if len(before) != 2 {
		t.Fatalf("alive before the kill: %v, want the run's sandbox and its child", before)
	}

	w.kill()
	held.open()
	s := w.start()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	got, err := w.awaitEnd(ctx, "agent-killed")
	if err != nil {
		t.Fatalf("%v; server log:\n%s", err, tail(s.log))
	}
	if got["status"] != "succeeded" {
		t.Fatalf("the run: %v (%v); server log:\n%s", got["status"], got["error"], tail(s.log))
	}
	if !logged(s.log, "execution resumed", "agent-killed") {
		t.Errorf("the restarted server did not resume the run; its log:\n%s", tail(s.log))
	}
	code, res := w.mustDo("GET", "/v1/agent-runs/agent-killed/result", nil)
	if code != http.StatusOK || res["complete"] != true || res["exit_code"] != 0.0 || !strings.Contains(fmt.Sprint(res["answer"]), "agent done") {
		t.Errorf("the result: %d %v", code, res)
	}
	// A text/plain body is not JSON: only the status is read.
	if code, _, _ := w.do("GET", "/v1/agent-runs/agent-killed/artifacts/notes.txt", nil); code != http.StatusOK {
		t.Errorf("the artifact: %d", code)
	}
	st := w.stateStore()
	if err := checkAgentEvents(st, "agent-killed"); err != nil {
		t.Error(err)
	}
	d, err := st.DirectGet(context.Background(), child)
	if err != nil || d.State != store.DirectTerminated {
		t.Errorf("the agent's child %s: %+v (%v), want terminated", child, d, err)
	}
	if sb, err := prov.Get(context.Background(), child); err == nil && sb.State == providers.StateRunning {
		t.Errorf("the agent's child %s is alive", child)
	}
	w.noLeaks(st, prov)
	awaitNoRecord(t, st, "agent-killed")
}

// awaitChild reads the run's events until the agent has told of its child
// (bounded).
func awaitChild(t *testing.T, w *world, id string) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, page := w.mustDo("GET", "/v1/agent-runs/"+id+"/events?limit=1000", nil)
		evs, _ := page["events"].([]any)
		for _, ev := range evs {
			if m := childLine.FindStringSubmatch(fmt.Sprint(ev.(map[string]any)["message"])); m != nil {
				return m[1]
			}
			if strings.Contains(fmt.Sprint(ev.(map[string]any)["message"]), "child  started") {
				t.Fatalf("the agent could not start its child: %v", evs)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not tell of its child: %v", evs)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkAgentEvents checks an agent run's events after a crash: seqs 1..n
// without a gap or a repeat, each line of the agent told once, and the
// lifecycle in order, ending succeeded once.
func checkAgentEvents(st *store.Store, id string) error {
	evs, err := st.ListEvents(context.Background(), jobKey(id), 0, store.MaxEventPage)
	if err != nil {
		return err
	}
	var types, messages []string
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			return fmt.Errorf("run %s: event %d has seq %d (lost or repeated)", id, i+1, ev.Seq)
		}
		var d struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(ev.Data, &d)
		types = append(types, ev.Type)
		if ev.Type == "agent.message" {
			messages = append(messages, d.Message)
		}
	}
	if len(messages) != 3 || messages[0] != "agent started" || !childLine.MatchString(messages[1]) || messages[2] != "agent done" {
		return fmt.Errorf("run %s: the agent's lines were told as %q, want each once", id, messages)
	}
	want := []string{"sandbox.created", "exec.started", "agent.message", "file.written", "sandbox.terminated", "job.succeeded"}
	i := 0
	for _, typ := range types {
		if i < len(want) && typ == want[i] {
			i++
		}
	}
	if i < len(want) || slices.Index(types, "job.succeeded") != len(types)-1 {
		return fmt.Errorf("run %s: events %v, want %v in order and the end last", id, types, want)
	}
	for _, once := range []string{"sandbox.created", "exec.started", "file.written", "sandbox.terminated"} {
		n := 0
		for _, typ := range types {
			if typ == once {
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("run %s: %d %s events, want 1: %v", id, n, once, types)
		}
	}
	return nil
}
