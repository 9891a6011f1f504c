package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/api"
	"github.com/sandstep/sandstep/internal/service/docsearch"
	"github.com/sandstep/sandstep/internal/service/ids"
	"github.com/sandstep/sandstep/internal/service/sessions"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/service/tools"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
)

const toolsDocs = `# Widget SDK

## Authentication

Pass an API key to new WidgetClient({ apiKey }).

## Creating widgets

Call client.createWidget({ name }) to make a widget.
`

// toolsEnv serves the API with sessions (no provider: code never runs
// here) and a docs index of one fixture page on 127.0.0.1, indexed.
type toolsEnv struct {
	*testEnv
	docs *docsearch.Service
}

func newToolsEnv(t *testing.T) *toolsEnv {
	t.Helper()
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/widget.md" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, toolsDocs)
	}))
	t.Cleanup(site.Close)
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
[sessions]
enabled = true
max_timeout_seconds = 120
[[sessions.dependencies]]
package = "widget-sdk@2.1.0"
docs = [%q, %q]
[[sessions.dependencies]]
package = "pip:requests==2.32.3"
[tools]
max_k = 10
`, site.URL+"/widget.md", site.URL+"/missing.md")), "config.toml", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dbenv := testddb.ForTests(t)
	st := store.NewLocal(dbenv.Endpoint, dbenv.Prefix)
	svc, err := sessions.New(sessions.Options{Config: cfg, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	docs := docsearch.New(docsearch.Options{Config: cfg, Store: st, Logger: slog.New(slog.DiscardHandler)})
	if rep, err := docs.Index(ctxFor(t)); err != nil || rep.Written != 2 {
		t.Fatalf("index: %+v, %v", rep, err)
	}
	e := newEnvOn(t, st, func(o *api.Options) {
		o.Sessions, o.Docs, o.Tools = svc, docs, tools.SettingsFrom(cfg)
	})
	return &toolsEnv{testEnv: e, docs: docs}
}

// compile checks a tool's parameters against the JSON Schema 2020-12
// meta-schema and returns the compiled schema.
func compile(t *testing.T, name string, schema any) *jsonschema.Schema {
	t.Helper()
	raw, _ := json.Marshal(schema)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(name+".json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(name + ".json")
	if err != nil {
		t.Fatalf("%s: not a valid JSON Schema: %v", name, err)
	}
	return s
}

func valid(s *jsonschema.Schema, args string) bool {
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(args))
	if err != nil {
		panic(err)
	}
	return s.Validate(v) == nil
}

func TestToolDefinitionsAreJSONSchema(t *testing.T) {
	e := newToolsEnv(t)
	res := e.get("/v1/tools", tokenAcme)
	wantStatus(t, res, http.StatusOK)
	var v struct {
		Tools struct {
			OpenAI []struct {
				Type     string `json:"type"`
				Function struct {
					Name        string         `json:"name"`
					Description string         `json:"description"`
					Parameters  map[string]any `json:"parameters"`
				} `json:"function"`
			} `json:"openai"`
			Anthropic []struct {
				Name        string         `json:"name"`
				Description string         `json:"description"`
				InputSchema map[string]any `json:"input_schema"`
			} `json:"anthropic"`
		} `json:"tools"`
		SystemPrompt string   `json:"system_prompt"`
		Packages     []string `json:"packages"`
		SearchMode   string   `json:"search_mode"`
		DocsIndex    struct {
			IndexedAt *time.Time          `json:"indexed_at"`
			Failures  []docsearch.Failure `json:"failures"`
		} `json:"docs_index"`
		Endpoints map[string]string `json:"endpoints"`
	}
	if err := json.Unmarshal(res.body, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Tools.OpenAI) != 2 || len(v.Tools.Anthropic) != 2 {
		t.Fatalf("tools: %s", res.body)
	}
	schemas := map[string]*jsonschema.Schema{}
	for i, o := range v.Tools.OpenAI {
		a := v.Tools.Anthropic[i]
		if o.Type != "function" || o.Function.Name != a.Name || o.Function.Description != a.Description || o.Function.Description == "" {
			t.Fatalf("tool %d: openai %+v, anthropic %+v", i, o, a)
		}
		schemas[a.Name] = compile(t, "anthropic-"+a.Name, a.InputSchema)
		compile(t, "openai-"+a.Name, o.Function.Parameters)
	}
	search, run := schemas["search_docs"], schemas["run_code"]
	if search == nil || run == nil {
		t.Fatalf("tools are %v", schemas)
	}
	for args, want := range map[string]bool{
		`{"query":"create a widget"}`:                 true,
		`{"query":"x","package":"widget-sdk","k":10}`: true,
		`{"query":"x","package":"requests"}`:          true,
		`{}`:                                          false,
		`{"query":""}`:                                false,
		`{"query":1}`:                                 false,
		`{"query":"x","k":11}`:                        false,
		`{"query":"x","package":"lodash"}`:            false,
		`{"query":"x","extra":true}`:                  false,
	} {
		if valid(search, args) != want {
			t.Errorf("search_docs %s: valid = %v", args, !want)
		}
	}
	for args, want := range map[string]bool{
		`{"code":"1+1","language":"typescript"}`:                        true,
		`{"code":"print(1)","language":"python","timeout_seconds":120}`: true,
		`{"code":"1"}`:                    false,
		`{"code":"1","language":"cobol"}`: false,
		`{"code":"1","language":"shell","timeout_seconds":121}`: false,
	} {
		if valid(run, args) != want {
			t.Errorf("run_code %s: valid = %v", args, !want)
		}
	}
	for _, want := range []string{"widget-sdk, requests", "search_docs", "run_code", `"type":"code_modules"`, "/workspace"} {
		if !strings.Contains(v.SystemPrompt, want) {
			t.Errorf("system prompt lacks %q:\n%s", want, v.SystemPrompt)
		}
	}
	if n := strings.Count(v.SystemPrompt, "\n"); n > 6 {
		t.Errorf("the addendum is %d lines; keep it short", n)
	}
	if !slices.Equal(v.Packages, []string{"widget-sdk", "requests"}) || v.SearchMode != "bm25" ||
		v.Endpoints["mcp"] != "/mcp?session_id={session_id}" || v.Endpoints["search_docs"] != "/v1/sessions/{session_id}/search_docs" {
		t.Fatalf("packages %v, mode %q, endpoints %v", v.Packages, v.SearchMode, v.Endpoints)
	}
	// The last indexing says what it could not fetch.
	if d := v.DocsIndex; d.IndexedAt == nil || time.Since(*d.IndexedAt) > time.Minute || len(d.Failures) != 1 ||
		d.Failures[0].Package != "widget-sdk" || !strings.HasSuffix(d.Failures[0].URL, "/missing.md") || d.Failures[0].Error != "HTTP 404" {
		t.Fatalf("docs_index %+v", d)
	}
	wantError(t, e.get("/v1/tools", ""), http.StatusUnauthorized, "unauthenticated", "")
}

func TestSearchDocsRoute(t *testing.T) {
	e := newToolsEnv(t)
	res := e.post("/v1/sessions/s1/search_docs", tokenAcme, `{"query":"how do I make a widget","k":1}`)
	wantStatus(t, res, http.StatusOK)
	var ans docsearch.Answer
	if err := json.Unmarshal(res.body, &ans); err != nil {
		t.Fatal(err)
	}
	if len(ans.Results) != 1 || ans.Mode != "bm25" {
		t.Fatalf("answer %s", res.body)
	}
	r := ans.Results[0]
	if r.Kind != "doc" || r.Package != "widget-sdk" || r.Title != "Widget SDK > Creating widgets" || !strings.Contains(r.Text, "createWidget") || r.Score <= 0 {
		t.Fatalf("result %+v", r)
	}
	res = e.post("/v1/sessions/s1/search_docs", tokenAcme, `{"query":"api key","package":"widget-sdk@2.1.0"}`)
	wantStatus(t, res, http.StatusOK)
	if !strings.Contains(string(res.body), "Widget SDK > Authentication") {
		t.Fatalf("package given as its spec: %s", res.body)
	}
	for _, tc := range []struct{ body, field string }{
		{`{}`, "query"},
		{`{"query":"  "}`, "query"},
		{`{"query":1}`, "query"},
		{fmt.Sprintf(`{"query":%q}`, strings.Repeat("q", tools.MaxQueryChars+1)), "query"},
		{`{"query":"x","k":0}`, "k"},
		{`{"query":"x","k":11}`, "k"},
		{`{"query":"x","k":1.5}`, "k"},
		{`{"query":"x","package":"lodash"}`, "package"},
		{`{"query":"x","top":3}`, "top"},
		{`{"query":"x"} {}`, ""},
		{`not json`, ""},
	} {
		wantError(t, e.post("/v1/sessions/s1/search_docs", tokenAcme, tc.body), http.StatusBadRequest, "invalid_argument", tc.field)
	}
	wantError(t, e.post("/v1/sessions/bad%20id/search_docs", tokenAcme, `{"query":"x"}`), http.StatusBadRequest, "invalid_argument", "session_id")
	wantError(t, e.get("/v1/sessions/s1/search_docs", tokenAcme), http.StatusMethodNotAllowed, "method_not_allowed", "")
	wantError(t, e.post("/v1/sessions/s1/search_docs", "", `{"query":"x"}`), http.StatusUnauthorized, "unauthenticated", "")
}

func TestToolRoutesOffWithoutSessions(t *testing.T) {
	e := newEnv(t)
	for _, r := range []response{
		e.get("/v1/tools", tokenAcme),
		e.post("/v1/sessions/s1/search_docs", tokenAcme, `{"query":"x"}`),
		e.post("/v1/sessions/s1/code_modules", tokenAcme, `{"modules":[]}`),
		e.post("/mcp?session_id=s1", tokenAcme, `{}`),
	} {
		wantError(t, r, http.StatusNotFound, "not_found", "")
	}
}

// openSession records a session as the sessions service does, without a
// provider to make its sandbox.
func openSession(t *testing.T, st *store.Store, tenant, id string) store.Session {
	t.Helper()
	sess, _, err := st.CreateSession(ctxFor(t), store.NewSession{ID: ids.SessionKey(tenant, id), Tenant: tenant, ClientID: id, VolumeSlug: "ws-" + id, IdleTTL: 30 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return sess
}

func deleteSession(t *testing.T, st *store.Store, key string) {
	t.Helper()
	ctx := ctxFor(t)
	if _, err := st.BeginDelete(ctx, key, time.Now().AddDate(1, 0, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.FinishDelete(ctx, key); err != nil {
		t.Fatal(err)
	}
}

const modulesBody = `{"modules":[{"path":"/workspace/lib/widgets.ts","description":"Lists every widget of the account, page by page","exports":["listAllWidgets"],"usage":"import { listAllWidgets } from './lib/widgets.ts'"}]}`

func (e *toolsEnv) search(token, sid, query string) docsearch.Answer {
	e.t.Helper()
	res := e.post("/v1/sessions/"+sid+"/search_docs", token, fmt.Sprintf(`{"query":%q}`, query))
	wantStatus(e.t, res, http.StatusOK)
	var ans docsearch.Answer
	if err := json.Unmarshal(res.body, &ans); err != nil {
		e.t.Fatal(err)
	}
	return ans
}

func countKind(ans docsearch.Answer, kind string) int {
	n := 0
	for _, r := range ans.Results {
		if r.Kind == kind {
			n++
		}
	}
	return n
}

// Code modules are searchable only while their session's volume lives:
// after the session is deleted (or deleted and started again, with a new
// empty volume) they are neither returned nor kept.
func TestCodeModulesLiveWithTheVolume(t *testing.T) {
	e := newToolsEnv(t)
	ctx := ctxFor(t)
	wantError(t, e.post("/v1/sessions/s1/code_modules", tokenAcme, modulesBody), http.StatusNotFound, "not_found", "")
	sess := openSession(t, e.store, "acme", "s1")
	res := e.post("/v1/sessions/s1/code_modules", tokenAcme, modulesBody)
	wantStatus(t, res, http.StatusOK)
	if got := res.json(t); fmt.Sprint(got["upserted"]) != "[lib/widgets.ts]" {
		t.Fatalf("answer %s", res.body)
	}
	ans := e.search(tokenAcme, "s1", "list all widgets")
	if len(ans.Results) == 0 || ans.Results[0].Kind != "code_module" || ans.Results[0].Path != "lib/widgets.ts" ||
		ans.Results[0].Usage != "import { listAllWidgets } from './lib/widgets.ts'" || ans.Results[0].Exports[0] != "listAllWidgets" {
		t.Fatalf("search with a module: %+v", ans)
	}
	if countKind(e.search(tokenGlobex, "s1", "list all widgets"), "code_module") != 0 {
		t.Fatal("another tenant's session of the same id sees the module")
	}
	// A package filter narrows the docs; the session's modules stay.
	res = e.post("/v1/sessions/s1/search_docs", tokenAcme, `{"query":"list widgets","package":"requests"}`)
	if !strings.Contains(string(res.body), `"kind":"code_module"`) || strings.Contains(string(res.body), `"kind":"doc"`) {
		t.Fatalf("search of another package: %s", res.body)
	}

	deleteSession(t, e.store, sess.ID)
	if countKind(e.search(tokenAcme, "s1", "list all widgets"), "code_module") != 0 {
		t.Fatal("a deleted session's module is returned")
	}
	if mods, err := e.store.CodeModules(ctx, sess.ID); err != nil || len(mods) != 0 {
		t.Fatalf("stale entries kept: %+v, %v", mods, err)
	}
	wantError(t, e.post("/v1/sessions/s1/code_modules", tokenAcme, modulesBody), http.StatusGone, "gone", "")

	// The id used again: a new volume, without the old entries.
	openSession(t, e.store, "acme", "s1")
	wantStatus(t, e.post("/v1/sessions/s1/code_modules", tokenAcme, modulesBody), http.StatusOK)
	deleteSession(t, e.store, sess.ID)
	again := openSession(t, e.store, "acme", "s1")
	if countKind(e.search(tokenAcme, "s1", "list all widgets"), "code_module") != 0 {
		t.Fatal("a module of the session's previous life is returned")
	}
	if mods, _ := e.store.CodeModules(ctx, again.ID); len(mods) != 0 {
		t.Fatalf("stale entries of the previous life kept: %+v", mods)
	}
}

func TestCodeModulesBadInput(t *testing.T) {
	e := newToolsEnv(t)
	openSession(t, e.store, "acme", "s1")
	mod := func(fields string) string { return `{"modules":[{` + fields + `}]}` }
	many := make([]string, docsearch.MaxModules+1)
	for i := range many {
		many[i] = fmt.Sprintf(`{"path":"m%d.ts","description":"d"}`, i)
	}
	for _, tc := range []struct{ body, field string }{
		{`{}`, "modules"},
		{`{"modules":[]}`, "modules"},
		{`{"modules":[` + strings.Join(many, ",") + `]}`, "modules"},
		{mod(`"description":"d"`), "modules[0].path"},
		{mod(`"path":"../etc/passwd","description":"d"`), "modules[0].path"},
		{mod(`"path":"/etc/passwd","description":"d"`), "modules[0].path"},
		{mod(`"path":"lib//a.ts","description":"d"`), "modules[0].path"},
		{mod(`"path":"a.ts"`), "modules[0].description"},
		{mod(`"path":"a.ts","description":"d","exports":[""]`), "modules[0].exports[0]"},
		{fmt.Sprintf(mod(`"path":"a.ts","description":%q`), strings.Repeat("d", docsearch.MaxModuleDescription+1)), "modules[0].description"},
		{`{"modules":[{"path":"a.ts","description":"d"},{"path":"/workspace/a.ts","description":"e"}]}`, "modules[1].path"},
		{mod(`"path":"a.ts","description":"d","source":"x"`), "source"},
		{`{"modules":{}}`, "modules"},
	} {
		wantError(t, e.post("/v1/sessions/s1/code_modules", tokenAcme, tc.body), http.StatusBadRequest, "invalid_argument", tc.field)
	}
}
