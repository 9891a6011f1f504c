package direct_test

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"
)

// GET /v1/providers shows what the caller's tenant's sandboxes went
// through in this process, counted by the sandbox owner for every path
// (here the direct API on the real local provider): another tenant's
// sandboxes are not in its counts, and each event is one log line with
// the tenant on it.
func TestProvidersCountsTheTenantsSandboxes(t *testing.T) {
	e := newEnv(t, "")
	counts := func(token string) map[string]any {
		t.Helper()
		r := e.do("GET", "/v1/providers", token, nil)
		if r.status != 200 {
			t.Fatalf("GET /v1/providers = %d %s", r.status, r.body)
		}
		c, ok := r.json(t)["sandboxes"].(map[string]any)
		if !ok || c["scope"] != "process" {
			t.Fatalf("no sandbox counts in %s", r.body)
		}
		return c
	}
	delta := func(before, after map[string]any, key string) float64 {
		return after[key].(float64) - before[key].(float64)
	}
	acme0, globex0 := counts(tokenAcme), counts(tokenGlobex)

	r := e.do("POST", "/v1/sandboxes", tokenAcme, `{"name":"counted","ttl_seconds":600}`)
	if r.status != 201 {
		t.Fatalf("create = %d %s", r.status, r.body)
	}
	id, _ := r.json(t)["id"].(string)
	if r := e.do("DELETE", "/v1/sandboxes/"+id, tokenAcme, nil); r.status/100 != 2 {
		t.Fatalf("delete = %d %s", r.status, r.body)
	}

	acme1, globex1 := counts(tokenAcme), counts(tokenGlobex)
	if delta(acme0, acme1, "created") != 1 || delta(acme0, acme1, "cleaned_up") != 1 || delta(acme0, acme1, "failed") != 0 {
		t.Fatalf("acme's counts went from %v to %v; want one create and one cleanup", acme0, acme1)
	}
	for _, k := range []string{"created", "reused", "failed", "refused", "cleaned_up", "cleanup_failed", "gone"} {
		if delta(globex0, globex1, k) != 0 {
			t.Fatalf("globex's %s moved with acme's sandbox: %v -> %v", k, globex0, globex1)
		}
	}

	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(e.logs.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l map[string]any
		if json.Unmarshal(sc.Bytes(), &l) != nil || l["tenant"] != "acme" || l["provider"] != "local" {
			continue
		}
		if ev, _ := l["event"].(string); ev != "" && l["sandbox_id"] != "" && l["owner"] == "tenant:acme" {
			seen[ev] = true
		}
	}
	if !seen["created"] || !seen["cleaned_up"] {
		t.Fatalf("lifecycle lines seen for acme: %v\n%s", seen, e.logs.String())
	}
}
