package sandboxes_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/logging"
	"github.com/sandstep/sandstep/internal/service/quota"
	"github.com/sandstep/sandstep/internal/service/sandboxes"
	"github.com/sandstep/sandstep/internal/testkit/testlog"
	"github.com/sandstep/sandstep/providers"
)

// eventLines are the lifecycle lines a logger wrote, parsed.
func eventLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("a log line is not JSON: %q: %v", sc.Text(), err)
		}
		if _, ok := l["event"]; ok {
			lines = append(lines, l)
		}
	}
	return lines
}

// Every create, reuse (of a running entry, and of a name the provider
// found taken), failure, refusal, cleanup and sandbox found gone, on the
// real local provider, is one log line carrying provider, owner, tenant,
// name, id and duration, and one count; a repeated release counts nothing
// more.
func TestLifecycleEventsAreLoggedAndCounted(t *testing.T) {
	e := newEnv(t)
	var out testlog.Buffer
	log := slog.New(logging.NewHandler(&out, logging.Options{}))
	cfg, err := config.Parse([]byte("[quotas]\nmax_sandbox_ttl = \"30m\"\n"), "config.toml", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	counters := sandboxes.NewCounters()
	m := sandboxes.New(sandboxes.Options{Store: e.st, Provider: e.prov, ProviderName: "local", Deployment: "test", Logger: log,
		Quotas: quota.New(e.st, &cfg.Quotas), Counters: counters})
	ctx := ctxFor(t)
	owner := sandboxes.JobOwner("j-ev", "acme")
	acquire := func(name string, ready func(context.Context, providers.Sandbox) error) (sandboxes.Lease, error) {
		lease, err := m.Acquire(ctx, sandboxes.Request{Owner: owner, Spec: spec(name, 10*time.Minute), Ready: ready})
		if err == nil {
			t.Cleanup(func() { _ = e.prov.Provider.Terminate(context.Background(), lease.Sandbox.ID) })
		}
		return lease, err
	}

	first, err := acquire("j-ev", nil)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := acquire("j-ev", nil); err != nil || !again.Adopted {
		t.Fatalf("retry: %+v, %v", again, err)
	}
	// A sandbox an earlier attempt made but did not live to record: the
	// provider refuses the name, and the live sandbox under it is adopted.
	stray, err := e.prov.Provider.Create(ctx, spec("j-ev-taken", 10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.prov.Provider.Terminate(context.Background(), stray.ID) })
	if taken, err := acquire("j-ev-taken", nil); err != nil || taken.Sandbox.ID != stray.ID {
		t.Fatalf("acquire of a taken name: %+v, %v; want %s adopted", taken, err, stray.ID)
	}
	e.prov.before = func(providers.CreateSpec) error {
		return providers.Errorf(providers.ResourceExhausted, "create", "rate limited")
	}
	if _, err := acquire("j-ev-fail", nil); err == nil {
		t.Fatal("the create the provider refused succeeded")
	}
	e.prov.before = nil
	if _, err := acquire("j-ev-warm", func(context.Context, providers.Sandbox) error { return errors.New("no python") }); err == nil {
		t.Fatal("the warm-up that failed succeeded")
	}
	if _, err := m.Acquire(ctx, sandboxes.Request{Owner: owner, Spec: spec("j-ev-long", time.Hour)}); err == nil {
		t.Fatal("a lifetime past max_sandbox_ttl was admitted")
	}
	// A sandbox that ends behind the ledger's back (a container the
	// provider removed) is found gone by the release.
	vanished, err := acquire("j-ev-gone", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.prov.Provider.Terminate(ctx, vanished.Sandbox.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ReleaseOwner(ctx, owner, "job done"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ReleaseOwner(ctx, owner, "job done"); err != nil {
		t.Fatal(err)
	}
	// A sandbox of this deployment that the ledger never knew.
	orphan, err := e.prov.Provider.Create(ctx, spec("orphan-ev", 10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.prov.Provider.Terminate(context.Background(), orphan.ID) })
	if c, err := m.Reconcile(ctx, sandboxes.ReconcileOptions{}); err != nil || c.Orphans != 1 {
		t.Fatalf("reconcile = %+v, %v", c, err)
	}

	type want struct{ event, name, id, extraKey, extra, level string }
	wants := []want{
		{"created", "j-ev", first.Sandbox.ID, "", "", "INFO"},
		{"reused", "j-ev", first.Sandbox.ID, "found", "ledger", "INFO"},
		{"reused", "j-ev-taken", stray.ID, "found", "name taken", "INFO"},
		{"failed", "j-ev-fail", "", "stage", "create", "WARN"},
		{"failed", "j-ev-warm", "*", "stage", "warm-up", "WARN"},
		{"cleaned_up", "j-ev-warm", "*", "reason", "warm-up failed", "INFO"},
		{"refused", "j-ev-long", "", "", "", "INFO"},
		{"created", "j-ev-gone", vanished.Sandbox.ID, "", "", "INFO"},
		{"cleaned_up", "j-ev", first.Sandbox.ID, "reason", "job done", "INFO"},
		{"cleaned_up", "j-ev-taken", stray.ID, "reason", "job done", "INFO"},
		{"gone", "j-ev-gone", vanished.Sandbox.ID, "reason", "job done", "WARN"},
		{"cleaned_up", "orphan-ev", orphan.ID, "reason", "orphan: the ledger does not know it", "WARN"},
	}
	lines := eventLines(t, out.String())
	if len(lines) != len(wants) {
		t.Fatalf("%d lifecycle lines, want %d:\n%s", len(lines), len(wants), out.String())
	}
	for i, w := range wants {
		l := lines[i]
		if l["event"] != w.event || l["name"] != w.name || l["level"] != w.level || l["provider"] != "local" ||
			l["msg"] != "sandbox "+strings.ReplaceAll(w.event, "_", " ") {
			t.Errorf("line %d = %v, want %+v", i, l, w)
		}
		if w.id == "*" {
			if id, _ := l["sandbox_id"].(string); id == "" {
				t.Errorf("line %d has no sandbox id: %v", i, l)
			}
		} else if l["sandbox_id"] != w.id {
			t.Errorf("line %d: sandbox_id %v, want %q", i, l["sandbox_id"], w.id)
		}
		if w.extraKey != "" && l[w.extraKey] != w.extra {
			t.Errorf("line %d: %s = %v, want %q", i, w.extraKey, l[w.extraKey], w.extra)
		}
		if ms, ok := l["duration_ms"].(float64); !ok || ms < 0 {
			t.Errorf("line %d: duration_ms = %v", i, l["duration_ms"])
		}
		if w.name == "orphan-ev" {
			continue // the ledger never knew its owner
		}
		if l["owner"] != "job:j-ev" || l["tenant"] != "acme" {
			t.Errorf("line %d: owner %v tenant %v", i, l["owner"], l["tenant"])
		}
	}
	if l := lines[8]; l["network"] == nil {
		t.Errorf("a cleanup line lacks what the sandbox sent and received: %v", l)
	}
	got := m.Stats()
	got.Since = time.Time{}
	if w := (sandboxes.Stats{Provider: "local", Created: 2, Reused: 2, Failed: 2, Refused: 1, CleanedUp: 4, Gone: 1}); got != w {
		t.Fatalf("counts = %+v, want %+v", got, w)
	}
	// By tenant: the orphan carried no tenant label.
	snap := counters.Snapshot()
	if len(snap) != 2 || snap[0].Tenant != "" || snap[0].CleanedUp != 1 || snap[1].Tenant != "acme" || snap[1].CleanedUp != 3 || snap[1].Created != 2 || snap[1].Gone != 1 {
		t.Fatalf("snapshot = %+v", snap)
	}
}
