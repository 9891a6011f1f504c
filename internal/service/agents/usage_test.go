package agents_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/emulation/asl"
	"github.com/sandstep/sandstep/internal/service/store"
)

// twice delivers every invocation of the agent function twice, as Lambda
// may, and answers the second: every phase must be idempotent.
type twice struct{ inv asl.Invoker }

func (d twice) Invoke(ctx context.Context, arn string, payload []byte) ([]byte, error) {
	if _, err := d.inv.Invoke(ctx, arn, payload); err != nil {
		return nil, err
	}
	return d.inv.Invoke(ctx, arn, payload)
}

// usageView is a usage as the API shows it.
type usageView struct {
	SandboxSeconds []struct {
		Provider string
		MemoryMB int `json:"memory_mb"`
		Seconds  float64
	} `json:"sandbox_seconds"`
	Execs  int64
	Tokens []struct {
		Model         string
		Input, Output int64
		CacheRead     int64 `json:"cache_read"`
		CacheWrite    int64 `json:"cache_write"`
		Estimated     bool
	}
	BytesOut  *int64 `json:"bytes_out"`
	AgentRuns int64  `json:"agent_runs"`
}

// same is a usage as comparable text.
func same(u usageView) string {
	b, _ := json.Marshal(u)
	return string(b)
}

// usageOf reads the usage and cost of an answer.
func usageOf(t *testing.T, m map[string]any) (usageView, map[string]any) {
	t.Helper()
	raw, _ := json.Marshal(m["usage"])
	var u usageView
	if err := json.Unmarshal(raw, &u); err != nil {
		t.Fatalf("usage %s: %v", raw, err)
	}
	cost, _ := m["cost"].(map[string]any)
	return u, cost
}

// TestAgentRunUsageIsWhatItUsed: an agent run, every phase of it delivered
// twice, reports what it really used, against counts kept apart from it:
// the model tokens the fake model reported (read from the agent's own
// result line), the sandbox time of its sandbox and of the child it
// started from their ledger entries, the bytes the model server and the
// API received from the sandboxes as its bytes out, the commands run, one
// agent run; GET /v1/agent-runs/{id}, its result and GET /v1/jobs/{id}
// show the same, priced; and GET /v1/usage counts the run's sandboxes in
// the run only, not again as sandboxes of their own.
func TestAgentRunUsageIsWhatItUsed(t *testing.T) {
	e := newEnvWith(t, envOpts{
		wrap: func(inv asl.Invoker) asl.Invoker { return twice{inv} },
		config: `
[pricing.sandbox.local]
default = 0.001
[pricing.models.claude-fake-1]
input = 3.0
output = 15.0
cache_read = 0.3
cache_write = 3.75
[pricing.egress]
local = 0.09
`,
	})
	e.submit(t, "run-usage", "How do kestrels hover?", 0)
	evs := e.stream("run-usage", nil)
	order(t, evs, "sandbox.created", "exec.started", "agent.result", "sandbox.terminated", "job.succeeded")
	run := e.do("GET", "/v1/agent-runs/run-usage", nil).json(t)
	if run["status"] != "succeeded" {
		t.Fatalf("the run: %v", run)
	}
	u, cost := usageOf(t, run)

	// Tokens: what the fake model reported, once (the slice that read the
	// result line ran twice).
	want := e.model.reported()
	if want.input == 0 || len(u.Tokens) != 1 || u.Tokens[0].Model != "claude-fake-1" || u.Tokens[0].Estimated ||
		u.Tokens[0].Input != want.input || u.Tokens[0].Output != want.output || u.Tokens[0].CacheRead != want.cacheRead || u.Tokens[0].CacheWrite != want.cacheWrite {
		t.Errorf("tokens %+v, the model reported %+v", u.Tokens, want)
	}
	if u.AgentRuns != 1 {
		t.Errorf("agent_runs %d", u.AgentRuns)
	}
	// Sandbox time: the ledger's, of the run's sandbox and its child.
	child := childOf(evs)
	sandbox, _ := run["sandbox_id"].(string)
	if child == "" || sandbox == "" {
		t.Fatalf("the run's sandbox %q, its child %q", sandbox, child)
	}
	var seconds float64
	for _, id := range []string{sandbox, child} {
		en, err := e.st.LedgerGet(context.Background(), "sbx-"+id)
		if err != nil {
			t.Fatal(err)
		}
		if en.State != store.LedgerTerminated || en.Job == "" {
			t.Fatalf("ledger entry of %s: %+v", id, en)
		}
		seconds += en.TerminatedAt.Sub(en.RunningAt).Seconds()
	}
	if len(u.SandboxSeconds) != 1 || u.SandboxSeconds[0].Provider != "local" || math.Abs(u.SandboxSeconds[0].Seconds-seconds) > 0.01 || seconds <= 0 {
		t.Errorf("sandbox seconds %+v, the ledger says %.3f s", u.SandboxSeconds, seconds)
	}
	// Bytes out: all the sandboxes sent went to the model server and to
	// the API's sandbox-facing listener.
	sent := e.model.ln.Received() + e.inner.Received()
	if u.BytesOut == nil || *u.BytesOut != sent || sent == 0 {
		t.Errorf("bytes out %v, the servers received %d", u.BytesOut, sent)
	}
	// Execs: the setup, the agent, the artifact listing of collect (run
	// twice: both ran), and what the agent ran in its child through the
	// API.
	if wantExecs := 1 + 1 + 2 + e.innerExecs.Load(); u.Execs != wantExecs || e.innerExecs.Load() == 0 {
		t.Errorf("execs %d, want %d", u.Execs, wantExecs)
	}
	wantCost := seconds*0.001 + (float64(want.input)*3+float64(want.output)*15+float64(want.cacheRead)*0.3+float64(want.cacheWrite)*3.75)/1e6 +
		float64(sent)/1e9*0.09
	if cost == nil || math.Abs(cost["total"].(float64)-wantCost) > 1e-5 || len(cost["unpriced"].([]any)) != 0 {
		t.Errorf("cost %v, want %.6f", cost, wantCost)
	}
	// The same on the result and on the job.
	for _, path := range []string{"/v1/agent-runs/run-usage/result", "/v1/jobs/run-usage"} {
		got, _ := usageOf(t, e.do("GET", path, nil).json(t))
		if a, b := same(got), same(u); a != b {
			t.Errorf("%s: usage %s, the run shows %s", path, a, b)
		}
	}
	// GET /v1/usage: the run is the agent group; its sandboxes are not a
	// "sandbox" group beside it.
	r := e.do("GET", "/v1/usage?group_by=job_type", nil)
	all := r.json(t)
	if r.status != 200 {
		t.Fatalf("usage: %d %v", r.status, all)
	}
	groups := all["groups"].([]any)
	total := all["total"].(map[string]any)
	if len(groups) != 1 || groups[0].(map[string]any)["key"] != "agent" || total["jobs"] != 1.0 || total["sandboxes"] != 0.0 {
		t.Fatalf("GET /v1/usage?group_by=job_type: %v", all)
	}
	gu, _ := usageOf(t, groups[0].(map[string]any))
	if a, b := same(gu), same(u); a != b {
		t.Errorf("the agent group: %s, the run: %s", a, b)
	}
	recs, _, err := e.st.TenantSandboxUsageBetween(context.Background(), "acme", time.Now().Add(-time.Hour), time.Now().Add(time.Minute), 0)
	if err != nil || len(recs) != 0 {
		t.Errorf("usage records of sandboxes of their own: %+v %v", recs, err)
	}
	// By provider: the run's sandbox time and bytes out under local.
	p := e.do("GET", "/v1/usage?group_by=provider", nil).json(t)
	pg := p["groups"].([]any)
	if len(pg) != 1 || pg[0].(map[string]any)["key"] != "local" {
		t.Fatalf("by provider: %v", p)
	}
	if lu, _ := usageOf(t, pg[0].(map[string]any)); lu.BytesOut == nil || *lu.BytesOut != sent {
		t.Errorf("by provider: bytes out %v, want %d", lu.BytesOut, sent)
	}
}

// TestAgentRunBudgetStopsTheAgent: a run whose sandboxes' time reaches
// budget.max_sandbox_seconds has its agent stopped: the run fails naming
// the limit and records budget_exhausted, what the agent wrote is its
// (incomplete) result, nothing is left running, and its usage shows the
// time it had when it was stopped.
func TestAgentRunBudgetStopsTheAgent(t *testing.T) {
	e := newEnv(t)
	const budget = 20
	res := e.do("POST", "/v1/agent-runs", map[string]any{"agent": "claude", "prompt": "Take it slow: how do kestrels hover?",
		"job_id": "run-budget", "files": map[string]string{"notes/input.txt": "kestrels hover"}, "budget": map[string]any{"max_sandbox_seconds": budget}})
	if res.status != 202 {
		t.Fatalf("submit: %d %s", res.status, res.body)
	}
	started := time.Now()
	evs := e.stream("run-budget", nil)
	order(t, evs, "sandbox.created", "exec.started", "budget.exhausted", "sandbox.terminated", "job.failed")
	if took := time.Since(started); took > 3*time.Minute {
		t.Errorf("the run took %s: the agent (which sleeps 10 minutes) was not stopped", took)
	}
	run := e.do("GET", "/v1/agent-runs/run-budget", nil).json(t)
	if run["status"] != "failed" || !strings.Contains(fmt.Sprint(run["error"]), "budget.max_sandbox_seconds 20") ||
		!slices.Contains(run["fallbacks"].([]any), any("budget_exhausted")) {
		t.Fatalf("the run: %v", run)
	}
	if b, _ := run["budget"].(map[string]any); b["max_sandbox_seconds"] != float64(budget) {
		t.Errorf("the run's budget: %v", run["budget"])
	}
	u, _ := usageOf(t, run)
	var secs float64
	for _, s := range u.SandboxSeconds {
		secs += s.Seconds
	}
	if secs < budget {
		t.Errorf("stopped at %.1f sandbox seconds, before its budget of %d", secs, budget)
	}
	r := e.do("GET", "/v1/agent-runs/run-budget/result", nil)
	var result struct {
		Complete bool   `json:"complete"`
		Answer   string `json:"answer"`
	}
	json.Unmarshal(r.body, &result)
	if r.status != 200 || result.Complete || result.Answer == "" {
		t.Errorf("the partial result: %d %s", r.status, r.body)
	}
	if n := e.liveSandboxes(); n != 0 {
		t.Errorf("%d sandboxes left running", n)
	}
}
