package api_test

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/service/usage"
)

// The OpenAPI description of the usage routes names every field the API
// answers with: a field added to a view without it fails here.
func TestUsageFragmentDescribesTheViews(t *testing.T) {
	raw, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths      map[string]map[string]any `json:"paths"`
		Components struct {
			Schemas map[string]struct {
				Required   []string       `json:"required"`
				Properties map[string]any `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Paths["/v1/usage"]["get"] == nil || doc.Paths["/v1/jobs/{id}"]["get"] == nil || doc.Paths["/v1/jobs"]["post"] == nil {
		t.Fatalf("paths %v", doc.Paths)
	}
	for schema, v := range map[string]any{"Usage": usage.View{}, "Cost": usage.Cost{}} {
		want, optional := jsonFields(reflect.TypeOf(v))
		sc := doc.Components.Schemas[schema]
		got := slices.Sorted(slices.Values(sc.Required))
		if !slices.Equal(got, want) {
			t.Errorf("schema %s requires %v; the API always answers %v", schema, got, want)
		}
		for _, f := range optional {
			if _, ok := sc.Properties[f]; !ok {
				t.Errorf("schema %s does not describe %s, which the API answers when it has one", schema, f)
			}
		}
	}
}

// jsonFields are a view's fields: those always there, and those left out
// when empty (omitempty).
func jsonFields(t reflect.Type) (always, optional []string) {
	for i := range t.NumField() {
		name, opts, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if strings.Contains(opts, "omitempty") {
			optional = append(optional, name)
			continue
		}
		always = append(always, name)
	}
	slices.Sort(always)
	return always, optional
}

// GET /v1/usage refuses what it cannot answer, naming the parameter, and
// answers a tenant only its own jobs; a job's status carries its usage.
func TestUsageRoute(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct{ query, field string }{
		{"group_by=week", "group_by"},
		{"from=yesterday", "from"},
		{"from=2026-02-01&to=2026-01-01", "from"},
		{"from=2024-01-01&to=2026-01-01", "to"},
	} {
		wantError(t, e.get("/v1/usage?"+tc.query, tokenAcme), 400, "invalid_argument", tc.field)
	}
	e.submit(tokenAcme, "u-1")
	e.submit(tokenGlobex, "u-2")
	if err := e.store.PutUsage(ctxFor(t), acmeKey("u-1"), "discover", storeUsage(3)); err != nil {
		t.Fatal(err)
	}
	res := e.get("/v1/usage?group_by=day", tokenAcme)
	wantStatus(t, res, 200)
	m := res.json(t)
	total := m["total"].(map[string]any)
	if total["jobs"] != 1.0 || total["cost"] != nil || len(m["groups"].([]any)) != 1 {
		t.Fatalf("usage %s", res.body)
	}
	if calls := total["usage"].(map[string]any)["search_calls"].([]any); len(calls) != 1 || calls[0].(map[string]any)["calls"] != 3.0 {
		t.Fatalf("usage %s", res.body)
	}
	// An agent run is its own job type, not a research job without a mode.
	if _, _, err := e.store.CreateJob(ctxFor(t), store.NewJob{ID: acmeKey("u-agent"), Tenant: "acme", ClientID: "u-agent", Type: store.JobTypeAgent,
		Request: []byte(`{"agent":"claude","prompt":"p"}`), RequestHash: "h"}); err != nil {
		t.Fatal(err)
	}
	res = e.get("/v1/usage?group_by=job_type", tokenAcme)
	wantStatus(t, res, 200)
	var keys []string
	for _, g := range res.json(t)["groups"].([]any) {
		keys = append(keys, g.(map[string]any)["key"].(string))
	}
	if strings.Join(keys, ",") != "agent,research:light" {
		t.Fatalf("job_type groups %v, want agent and research:light: %s", keys, res.body)
	}
	st := e.get("/v1/jobs/u-1", tokenAcme).json(t)
	if st["usage"].(map[string]any)["search_calls"].([]any)[0].(map[string]any)["backend"] != "searxng" || st["cost"] != nil {
		t.Fatalf("status %v", st)
	}
}
