package localstack_test

import (
	"context"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/sandboxes"
	"github.com/sandstep/sandstep/internal/service/store"
)

// A session's sandbox and a direct sandbox show up in GET /v1/usage once
// they end, as their own types, with the seconds of their ledger entries
// priced at [pricing]; releasing them again (a retried release, a reaper
// pass) does not count them twice.
func TestSessionsAndDirectSandboxesShowInUsage(t *testing.T) {
	s := newStackWith(t, stackOpts{allowPrivate: []string{"127.0.0.1:1"},
		config: "[sessions]\nenabled = true\n[pricing.sandbox.local]\ndefault = 0.002\n"})
	ctx := context.Background()
	if code, out := s.do(t, "POST", "/v1/sessions/usage-s1/run", map[string]any{"code": "echo hi", "language": "shell"}); code != http.StatusOK || out["status"] != "succeeded" {
		t.Fatalf("session run: %d %v", code, out)
	}
	code, sb := s.do(t, "POST", "/v1/sandboxes", map[string]any{"ttl_seconds": 600})
	if code != http.StatusCreated && code != http.StatusOK {
		t.Fatalf("create sandbox: %d %v", code, sb)
	}
	// The live entries are the session's and the direct sandbox's.
	live, err := s.st.LedgerListLive(ctx, time.Now().AddDate(1, 0, 0), 0)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{} // ledger name: owner kind
	for _, e := range live {
		names[e.Name] = sandboxes.ParseOwner(e.Owner).Kind
	}
	if len(names) != 2 {
		t.Fatalf("live sandboxes %v, want the session's and the direct one", names)
	}
	time.Sleep(300 * time.Millisecond) // both live long enough to count
	if code, out := s.do(t, "DELETE", "/v1/sessions/usage-s1", nil); code/100 != 2 {
		t.Fatalf("delete session: %d %v", code, out)
	}
	if code, out := s.do(t, "DELETE", "/v1/sandboxes/"+sb["id"].(string), nil); code/100 != 2 {
		t.Fatalf("terminate sandbox: %d %v", code, out)
	}
	want := map[string]float64{} // usage type: seconds from the ledger
	var wantBytes int64          // bytes out the ledger entries measured
	for name, kind := range names {
		var e store.LedgerEntry
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			if e, err = s.st.LedgerGet(ctx, name); err != nil {
				t.Fatal(err)
			}
			if e.State == store.LedgerTerminated || time.Now().After(deadline) {
				break
			}
		}
		if e.State != store.LedgerTerminated || e.Tenant != "dev" {
			t.Fatalf("ledger entry %s of %s: %+v", name, kind, e)
		}
		if e.BytesOut == nil {
			t.Fatalf("ledger entry %s: the local provider's bytes out were not kept", name)
		}
		wantBytes += *e.BytesOut
		typ := map[string]string{sandboxes.KindSession: "session", sandboxes.KindTenant: "sandbox"}[kind]
		want[typ] += e.TerminatedAt.Sub(e.RunningAt).Seconds()
		// Released again, twice, as a retried release and a reaper pass
		// do: the same record, not another.
		owner := sandboxes.ParseOwner(e.Owner)
		owner.Tenant = e.Tenant
		for range 2 {
			if err := s.App.Phases.Sandboxes.Release(ctx, owner, sandboxes.Ref{Name: name, ID: e.ProviderID}, "retried"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(want) != 2 || want["session"] < 0.3 || want["sandbox"] < 0.3 {
		t.Fatalf("ledger seconds %v", want)
	}
	near := func(got, want float64) bool { return math.Abs(got-want) < 0.01 }
	seconds := func(g map[string]any) float64 {
		var n float64
		for _, x := range g["usage"].(map[string]any)["sandbox_seconds"].([]any) {
			n += x.(map[string]any)["seconds"].(float64)
		}
		return n
	}
	byKey := func(a map[string]any) map[string]map[string]any {
		out := map[string]map[string]any{}
		for _, g := range a["groups"].([]any) {
			out[g.(map[string]any)["key"].(string)] = g.(map[string]any)
		}
		return out
	}
	// The index is eventually consistent: wait for both records.
	var a map[string]any
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, a = s.do(t, "GET", "/v1/usage?group_by=job_type", nil)
		if code != http.StatusOK {
			t.Fatalf("usage: %d %v", code, a)
		}
		if a["total"].(map[string]any)["sandboxes"] == 2.0 || time.Now().After(deadline) {
			break
		}
	}
	groups := byKey(a)
	total := a["total"].(map[string]any)
	if len(groups) != 2 || groups["session"]["sandboxes"] != 1.0 || groups["sandbox"]["sandboxes"] != 1.0 || total["jobs"] != 0.0 || total["sandboxes"] != 2.0 {
		t.Fatalf("GET /v1/usage?group_by=job_type: %v", a)
	}
	for typ, secs := range want {
		if got := seconds(groups[typ]); !near(got, secs) {
			t.Errorf("%s: %.3f s, the ledger says %.3f s", typ, got, secs)
		}
		if c := groups[typ]["cost"].(map[string]any)["sandbox"].(float64); math.Abs(c-secs*0.002) > 1e-5 {
			t.Errorf("%s: cost %v, want %.6f", typ, c, secs*0.002)
		}
	}
	if got := seconds(total); !near(got, want["session"]+want["sandbox"]) {
		t.Errorf("total %.3f s, the ledger says %v", got, want)
	}
	if got, ok := total["usage"].(map[string]any)["bytes_out"].(float64); !ok || int64(got) != wantBytes {
		t.Errorf("total bytes out %v, the ledger says %d", total["usage"].(map[string]any)["bytes_out"], wantBytes)
	}
	// By provider and by day, the same seconds.
	_, p := s.do(t, "GET", "/v1/usage?group_by=provider", nil)
	if g := byKey(p); len(g) != 1 || g["local"]["sandboxes"] != 2.0 || !near(seconds(g["local"]), want["session"]+want["sandbox"]) {
		t.Errorf("by provider: %v", p)
	}
	// By day (UTC, of each start): the groups add up to the same seconds.
	_, d := s.do(t, "GET", "/v1/usage?group_by=day", nil)
	var daySecs float64
	var daySandboxes float64
	for _, g := range byKey(d) {
		daySecs += seconds(g)
		daySandboxes += g["sandboxes"].(float64)
	}
	if daySandboxes != 2 || !near(daySecs, want["session"]+want["sandbox"]) {
		t.Errorf("by day: %v", d)
	}
	// The records are the tenant's: another tenant sees none.
	recs, _, err := s.st.TenantSandboxUsageBetween(ctx, "dev", time.Now().Add(-time.Hour), time.Now().Add(time.Minute), 0)
	if err != nil || len(recs) != 2 {
		t.Fatalf("records %v %v", recs, err)
	}
	other, _, err := s.st.TenantSandboxUsageBetween(ctx, "acme", time.Now().Add(-time.Hour), time.Now().Add(time.Minute), 0)
	if err != nil || len(other) != 0 {
		t.Fatalf("another tenant's records %v %v", other, err)
	}
	for _, r := range recs {
		if r.Provider != "local" || names[r.Name] != r.OwnerKind || r.Tenant != "dev" {
			t.Errorf("record %+v, ledger names %v", r, names)
		}
	}
}
