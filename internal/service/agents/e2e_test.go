package agents_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/openaiclient"
)

var childID = regexp.MustCompile(`child ([a-z2-7]+): hello from the child`)

// submit starts a run of the fake Claude and answers its job id.
func (e *env) submit(t *testing.T, id, prompt string, timeout int) {
	t.Helper()
	body := map[string]any{"agent": "claude", "prompt": prompt, "job_id": id,
		"files": map[string]string{"notes/input.txt": "kestrels hover"}}
	if timeout > 0 {
		body["timeout_seconds"] = timeout
	}
	res := e.do("POST", "/v1/agent-runs", body)
	if res.status != 202 {
		t.Fatalf("submit: %d %s", res.status, res.body)
	}
	if m := res.json(t); m["job_id"] != id || m["links"].(map[string]any)["self"] != "/v1/agent-runs/"+id {
		t.Fatalf("submit: %v", m)
	}
}

// order checks that the events' types hold want as a subsequence.
func order(t *testing.T, evs []event, want ...string) {
	t.Helper()
	var got []string
	for _, ev := range evs {
		got = append(got, ev.typ())
	}
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	if i < len(want) {
		t.Errorf("events %v do not hold %v in order (stopped at %s)", got, want, want[i])
	}
	var prev time.Time
	for _, ev := range evs {
		at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(ev["time"]))
		if err != nil || at.Before(prev) {
			t.Errorf("event %v: time %v is not after %v", ev, ev["time"], prev)
		}
		prev = at
	}
}

// childOf finds the child sandbox the agent reported starting.
func childOf(evs []event) string {
	for _, ev := range evs {
		if m := childID.FindStringSubmatch(fmt.Sprint(ev["message"])); m != nil {
			return m[1]
		}
	}
	return ""
}

func (e *env) childState(t *testing.T, id string) string {
	t.Helper()
	d, err := e.st.DirectGet(context.Background(), id)
	if err != nil {
		t.Fatalf("the child %s: %v", id, err)
	}
	return d.State
}

// TestAgentRunEndToEnd: the fake Claude Code runs in a sandbox, calls the
// model through the egress proxy, writes artifacts and starts a child
// sandbox with the Python client. The run succeeds; its events arrive in
// order on the stream; the result carries the final answer, the exit
// status and the artifacts, served with their content types from the
// store; the model server saw the real key, the agent only a placeholder;
// nothing is left running; and a resubmission finds the same run.
func TestAgentRunEndToEnd(t *testing.T) {
	e := newEnv(t)
	e.submit(t, "run-1", "How do kestrels hover?", 0)
	evs := e.stream("run-1", nil)
	order(t, evs, "sandbox.created", "exec.started", "agent.message", "agent.message", "agent.tool_use", "agent.tool_result",
		"agent.tool_use", "agent.tool_result", "agent.result", "file.written", "file.written", "sandbox.terminated", "job.succeeded")
	run := e.do("GET", "/v1/agent-runs/run-1", nil).json(t)
	if run["status"] != "succeeded" || run["agent"] != "claude" || run["timeout_seconds"] != float64(300) || run["sandbox_id"] == nil {
		t.Errorf("the run: %v", run)
	}
	res := e.do("GET", "/v1/agent-runs/run-1/result", nil)
	if res.status != 200 {
		t.Fatalf("result: %d %s", res.status, res.body)
	}
	var result struct {
		Complete  bool   `json:"complete"`
		Answer    string `json:"answer"`
		ExitCode  *int   `json:"exit_code"`
		Artifacts []struct {
			Path, ContentType, URL string
			Size                   int64
		} `json:"artifacts"`
	}
	json.Unmarshal(res.body, &result)
	if !result.Complete || result.ExitCode == nil || *result.ExitCode != 0 || !strings.HasPrefix(result.Answer, "Done: Kestrels hover by facing into the wind.") {
		t.Errorf("result: %s", res.body)
	}
	if len(result.Artifacts) != 2 || result.Artifacts[0].Path != "data/seen.json" || result.Artifacts[1].Path != "report.md" {
		t.Fatalf("artifacts: %s", res.body)
	}
	// The same run as OpenAI chat-completion chunks, read by OpenAI's own
	// client: every event in order as reasoning_content, the answer as
	// the content, finish_reason stop. (A subtest: without node it is the
	// one skipped.)
	t.Run("openai-chunks", func(t *testing.T) {
		var told []string
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		final := openaiclient.Read(ctx, t, e.url, tokenAcme, "run-1", "", func(c openaiclient.Chunk) {
			if c.Event == nil {
				return
			}
			typ, _ := c.Event["type"].(string)
			if r := c.Choices[0].Delta.ReasoningContent; !strings.Contains(r, " "+typ) || !strings.HasSuffix(r, "\n") {
				t.Errorf("chunk of %s: reasoning_content %q", typ, r)
			}
			told = append(told, typ)
		})
		var types []string
		for _, ev := range evs {
			types = append(types, ev.typ())
		}
		if !slices.Equal(told, types) {
			t.Errorf("the OpenAI view told %v, the events are %v", told, types)
		}
		if c := final.Choices; len(c) != 1 || c[0].Message.Content == nil || *c[0].Message.Content != result.Answer || c[0].FinishReason != "stop" || final.Model != "claude" {
			t.Errorf("the OpenAI view's completion: %+v", final)
		}
	})
	// The sandbox is gone: the artifacts come from the store.
	md := e.do("GET", "/v1/agent-runs/run-1/artifacts/report.md", nil)
	if md.status != 200 || md.header.Get("Content-Type") != "text/markdown; charset=utf-8" || !strings.Contains(string(md.body), "Notes: kestrels hover") {
		t.Errorf("report.md: %d %q %q", md.status, md.header.Get("Content-Type"), md.body)
	}
	seenRes := e.do("GET", "/v1/agent-runs/run-1/artifacts/data/seen.json", nil)
	var seen struct {
		Key    string `json:"key_seen"`
		Prefix string `json:"token_prefix"`
	}
	if err := json.Unmarshal(seenRes.body, &seen); err != nil || seenRes.header.Get("Content-Type") != "application/json" {
		t.Fatalf("seen.json: %q %v", seenRes.body, err)
	}
	if !strings.HasPrefix(seen.Key, "sandstep-placeholder-") || strings.Contains(seen.Key, modelKey) {
		t.Errorf("the agent saw ANTHROPIC_API_KEY = %q, want only a placeholder", seen.Key)
	}
	if seen.Prefix != "sst_" {
		t.Errorf("the agent's SANDSTEP_TOKEN starts %q, want a sandbox token", seen.Prefix)
	}
	if keys := e.model.seen(); len(keys) != 1 || keys[0] != modelKey {
		t.Errorf("the model server saw keys %q, want the real key once", keys)
	}
	// The run's folder lists the same files as its result.
	var kept struct {
		Artifacts []struct{ Path, URL string }
	}
	listRes := e.do("GET", "/v1/agent-runs/run-1/artifacts", nil)
	if err := json.Unmarshal(listRes.body, &kept); listRes.status != 200 || err != nil || len(kept.Artifacts) != 2 ||
		kept.Artifacts[0].Path != "data/seen.json" || kept.Artifacts[1].URL != "/v1/agent-runs/run-1/artifacts/report.md" {
		t.Errorf("the run's artifacts: %d %v %s", listRes.status, err, listRes.body)
	}
	if code := e.do("GET", "/v1/agent-runs/run-1/artifacts/nope.txt", nil).status; code != 404 {
		t.Errorf("a missing artifact: %d", code)
	}
	if code := e.do("GET", "/v1/agent-runs/run-1/artifacts/../x", nil).status; code != 400 && code != 404 {
		t.Errorf("a path out of the folder: %d", code)
	}
	child := childOf(evs)
	if child == "" {
		t.Fatal("the agent reported no child")
	}
	if st := e.childState(t, child); st != store.DirectTerminated {
		t.Errorf("the child %s is %s", child, st)
	}
	if n := e.liveSandboxes(); n != 0 {
		t.Errorf("%d sandboxes left running", n)
	}
	for _, ev := range evs {
		if b, _ := json.Marshal(ev); strings.Contains(string(b), modelKey) {
			t.Errorf("an event carries the model key: %s", b)
		}
	}
	// Idempotent: the same request finds the run; a different one is refused.
	again := e.do("POST", "/v1/agent-runs", map[string]any{"agent": "claude", "prompt": "How do kestrels hover?", "job_id": "run-1",
		"files": map[string]string{"notes/input.txt": "kestrels hover"}})
	if again.status != 200 || again.json(t)["status"] != "succeeded" {
		t.Errorf("resubmission: %d %s", again.status, again.body)
	}
	if r := e.do("POST", "/v1/agent-runs", map[string]any{"agent": "claude", "prompt": "other", "job_id": "run-1"}); r.status != 409 {
		t.Errorf("the id with another request: %d %s", r.status, r.body)
	}
	list := e.do("GET", "/v1/jobs?type=agent", nil).json(t)
	jobs := list["jobs"].([]any)
	if len(jobs) != 1 || jobs[0].(map[string]any)["type"] != "agent" || jobs[0].(map[string]any)["mode"] != "claude" {
		t.Errorf("GET /v1/jobs?type=agent: %v", list)
	}
	if l := e.do("GET", "/v1/jobs?type=research", nil).json(t); len(l["jobs"].([]any)) != 0 {
		t.Errorf("GET /v1/jobs?type=research: %v", l)
	}
}

// stopMidRun starts a slow run, waits for the agent to have started its
// child and written its artifacts, and calls stop; then it checks that the
// run ended with want, its child terminated, its partial output and
// artifacts kept, and no sandbox left.
func stopMidRun(t *testing.T, timeout int, stop func(e *env, id string), wantStatus, wantError string) {
	e := newEnv(t)
	id := "slow-run"
	e.submit(t, id, "Take it slow: how do kestrels hover?", timeout)
	stopped := false
	evs := e.stream(id, func(ev event) {
		if !stopped && ev.typ() == "agent.message" && ev["message"] == "waiting for the slow part" {
			stopped = true
			// The output streams while the agent works: the run is still
			// running, with its sandbox and the child alive, so that the
			// checks of what is left below can fail.
			if st := e.do("GET", "/v1/agent-runs/"+id, nil).json(t)["status"]; st != "running" {
				t.Errorf("the agent's output was seen when the run was %v", st)
			}
			if n := e.liveSandboxes(); n != 2 {
				t.Errorf("%d sandboxes alive mid-run, want the run's and its child", n)
			}
			stop(e, id)
		}
	})
	if !stopped {
		t.Fatalf("the agent never reached its slow part: %v", evs)
	}
	order(t, evs, "sandbox.created", "exec.started", "agent.tool_use", "agent.message", "file.written", "sandbox.terminated", "job."+wantStatus)
	run := e.do("GET", "/v1/agent-runs/"+id, nil).json(t)
	if run["status"] != wantStatus || !strings.Contains(fmt.Sprint(run["error"]), wantError) {
		t.Errorf("the run: %v, want %s with %q", run, wantStatus, wantError)
	}
	res := e.do("GET", "/v1/agent-runs/"+id+"/result", nil)
	var result struct {
		Complete  bool   `json:"complete"`
		Answer    string `json:"answer"`
		TimedOut  bool   `json:"timed_out"`
		Artifacts []struct{ Path string }
	}
	json.Unmarshal(res.body, &result)
	paths := []string{}
	for _, a := range result.Artifacts {
		paths = append(paths, a.Path)
	}
	if res.status != 200 || result.Answer != "waiting for the slow part" || !slices.Contains(paths, "report.md") {
		t.Errorf("the partial result: %d %s", res.status, res.body)
	}
	if wantStatus == "cancelled" && result.Complete {
		t.Errorf("a cancelled run's result is complete: %s", res.body)
	}
	if wantStatus == "failed" && !result.TimedOut {
		t.Errorf("a timed-out run's result: %s", res.body)
	}
	if md := e.do("GET", "/v1/agent-runs/"+id+"/artifacts/report.md", nil); md.status != 200 {
		t.Errorf("the partial artifact: %d", md.status)
	}
	child := childOf(evs)
	if child == "" {
		t.Fatal("the agent reported no child")
	}
	if st := e.childState(t, child); st != store.DirectTerminated {
		t.Errorf("the child %s is %s", child, st)
	}
	if n := e.liveSandboxes(); n != 0 {
		t.Errorf("%d sandboxes left running", n)
	}
}

// TestAgentRunCancelledMidRun: a cancel while the agent works ends the run
// cancelled within its supervision, keeping what it did.
func TestAgentRunCancelledMidRun(t *testing.T) {
	stopMidRun(t, 0, func(e *env, id string) {
		if r := e.do("POST", "/v1/agent-runs/"+id+"/cancel", nil); r.status != 202 {
			t.Errorf("cancel: %d %s", r.status, r.body)
		}
	}, "cancelled", "<nil>")
}

// TestAgentRunTimesOut: an agent past timeout_seconds is ended, and the run
// fails saying so, keeping what it did.
func TestAgentRunTimesOut(t *testing.T) {
	// Long enough for the agent to reach its slow part on a loaded machine.
	stopMidRun(t, 30, func(*env, string) {}, "failed", "did not finish within timeout_seconds (30)")
}

// TestAgentRunRefusals: bad requests are answered 400 naming the field.
func TestAgentRunRefusals(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"prompt": "x"}, "agent"},
		{map[string]any{"agent": "codex", "prompt": "x"}, "agent"},
		{map[string]any{"agent": "claude", "prompt": "  "}, "prompt"},
		{map[string]any{"agent": "claude", "prompt": "x", "timeout_seconds": 7200}, "timeout_seconds"},
		{map[string]any{"agent": "claude", "prompt": "x", "files": map[string]string{"../etc/passwd": "x"}}, "files"},
		{map[string]any{"agent": "claude", "prompt": "x", "model": "y"}, "model"},
		// Of a budget only max_sandbox_seconds can stop an agent in time.
		{map[string]any{"agent": "claude", "prompt": "x", "budget": map[string]any{"max_cost": 1}}, "budget.max_cost"},
		{map[string]any{"agent": "claude", "prompt": "x", "budget": map[string]any{"max_tokens": 1000, "max_sandbox_seconds": 60}}, "budget.max_tokens"},
		{map[string]any{"agent": "claude", "prompt": "x", "budget": map[string]any{}}, "budget"},
		{map[string]any{"agent": "claude", "prompt": "x", "budget": map[string]any{"max_sandbox_seconds": 0}}, "budget.max_sandbox_seconds"},
		{map[string]any{"agent": "claude", "prompt": "x", "budget": map[string]any{"max_sandbox_seconds": "60"}}, "budget"},
	} {
		r := e.do("POST", "/v1/agent-runs", c.body)
		if r.status != 400 {
			t.Errorf("%v: %d %s", c.body, r.status, r.body)
			continue
		}
		if m, _ := r.json(t)["error"].(map[string]any); m["field"] != c.field {
			t.Errorf("%v: field %v, want %s: %s", c.body, m["field"], c.field, r.body)
		}
	}
	if r := e.do("GET", "/v1/agent-runs/none", nil); r.status != 404 {
		t.Errorf("a missing run: %d", r.status)
	}
}
