package sessions_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandstep/sandstep/internal/service/ids"
)

const fixtureDocs = `# Fixture A

## Answer

require("sandstep-fixture-a").answer is 42, the answer to everything.

## Installing

The package is installed in every session sandbox from the snapshot.
`

// newToolsEnv is a stack with one dependency whose docs are a fixture
// page on 127.0.0.1, indexed before it returns.
func newToolsEnv(t *testing.T) *env {
	t.Helper()
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/a.md" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, fixtureDocs)
	}))
	t.Cleanup(site.Close)
	pkg := fixturePackage(t, "sandstep-fixture-a")
	e := newEnv(t, envConfig{deps: fmt.Sprintf("[[sessions.dependencies]]\npackage = %q\ndocs = [%q]\n", pkg, site.URL+"/a.md")})
	// `serve` indexes at start, in the background.
	ctx := ctxFor(t)
	for deadline := time.Now().Add(time.Minute); ; {
		m, err := e.st.GetDocsMeta(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !m.IndexedAt.IsZero() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the docs were not indexed at start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return e
}

// bearer adds a token to every request of the MCP client.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

func connectMCP(t *testing.T, e *env, token, sid string) (*mcp.ClientSession, error) {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "sandstep-test", Version: "1"}, nil)
	cs, err := client.Connect(ctxFor(t), &mcp.StreamableClientTransport{
		Endpoint:   e.srv.URL + "/mcp?session_id=" + sid,
		HTTPClient: &http.Client{Transport: bearer{token: token, next: http.DefaultTransport}},
		MaxRetries: -1,
	}, nil)
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (*mcp.CallToolResult, map[string]any) {
	t.Helper()
	res, err := cs.CallTool(ctxFor(t), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var out map[string]any
	if !res.IsError {
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s: structured content %s: %v", name, raw, err)
		}
		text := res.Content[0].(*mcp.TextContent).Text
		if string(toJSON(t, out)) != string(toJSON(t, mustJSON(t, text))) {
			t.Fatalf("%s: text and structured content differ: %s vs %s", name, text, raw)
		}
	}
	return res, out
}

func mustJSON(t *testing.T, s string) any {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("not JSON: %s", s)
	}
	return v
}

// The MCP SDK's own client lists both tools and calls them, bound to the
// session in the URL and the tenant of the token.
func TestMCPListsAndCallsBothTools(t *testing.T) {
	e := newToolsEnv(t)
	cs, err := connectMCP(t, e, tokenAcme, "mcp1")
	if err != nil {
		t.Fatal(err)
	}
	if init := cs.InitializeResult(); init.ServerInfo.Name != "sandstep" || !strings.Contains(init.Instructions, "search_docs") ||
		!strings.Contains(init.Instructions, "sandstep-fixture-a") {
		t.Fatalf("initialize: %+v", init)
	}
	list, err := cs.ListTools(ctxFor(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
		if s, _ := json.Marshal(tl.InputSchema); !strings.Contains(string(s), `"required"`) {
			t.Fatalf("%s: schema %s", tl.Name, s)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"run_code", "search_docs"}) {
		t.Fatalf("tools %v", names)
	}

	res, out := callTool(t, cs, "run_code", map[string]any{"language": "javascript",
		"code": "require('fs').writeFileSync('/workspace/who', 'acme');\nrequire('sandstep-fixture-a').answer"})
	if res.IsError || out["success"] != true || fmt.Sprint(out["result"]) != "42" {
		t.Fatalf("run_code: %+v %v", res, out)
	}
	res, out = callTool(t, cs, "search_docs", map[string]any{"query": "what is the answer", "k": 1})
	results, _ := out["results"].([]any)
	if res.IsError || len(results) != 1 {
		t.Fatalf("search_docs: %+v %v", res, out)
	}
	if r := results[0].(map[string]any); r["kind"] != "doc" || r["package"] != "sandstep-fixture-a" || r["title"] != "Fixture A > Answer" {
		t.Fatalf("search_docs result %v", r)
	}

	// Mistakes come back as tool errors the model can act on.
	res, _ = callTool(t, cs, "search_docs", map[string]any{"query": "x", "k": 1000})
	if !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "k must be a whole number from 1 to 20") {
		t.Fatalf("search_docs with k=1000: %+v", res)
	}
	res, _ = callTool(t, cs, "run_code", map[string]any{"code": "1", "language": "cobol"})
	if !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "cobol") {
		t.Fatalf("run_code in cobol: %+v", res)
	}
	res, out = callTool(t, cs, "run_code", map[string]any{"code": "exit 3", "language": "shell"})
	if !res.IsError || out != nil {
		t.Fatalf("a failing run is a tool error: %+v", res)
	}

	// Another tenant's session of the same id is another session.
	other, err := connectMCP(t, e, tokenGlobex, "mcp1")
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := callTool(t, other, "run_code", map[string]any{"code": "cat /workspace/who", "language": "shell"}); !res.IsError {
		t.Fatalf("globex reads acme's workspace: %+v", res)
	}
	// And the tools need a token and a session id.
	if _, err := connectMCP(t, e, "wrong-token", "mcp1"); err == nil {
		t.Fatal("connected with a wrong token")
	}
	r := e.do(http.MethodPost, "/mcp", tokenAcme, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	wantError(t, r, http.StatusBadRequest, "invalid_argument", "session_id")
}

// A session's code modules go with its volume when the TTL cleanup
// deletes it.
func TestCodeModulesGoWithTheTTLCleanup(t *testing.T) {
	e := newToolsEnv(t)
	ctx := ctxFor(t)
	wantOK(t, e.run(tokenAcme, "mods", "shell", "mkdir -p /workspace/lib && echo 'export const answer = () => 42' > /workspace/lib/answer.ts"))
	r := e.do(http.MethodPost, "/v1/sessions/mods/code_modules", tokenAcme, map[string]any{"modules": []map[string]any{{
		"path": "lib/answer.ts", "description": "Returns the answer", "exports": []string{"answer"}, "usage": "import { answer } from './lib/answer.ts'",
	}}})
	if r.status != http.StatusOK {
		t.Fatalf("code_modules: %d %s", r.status, r.body)
	}
	search := func() string {
		r := e.do(http.MethodPost, "/v1/sessions/mods/search_docs", tokenAcme, map[string]any{"query": "returns the answer"})
		if r.status != http.StatusOK {
			t.Fatalf("search_docs: %d %s", r.status, r.body)
		}
		return string(r.body)
	}
	if got := search(); !strings.Contains(got, `"kind":"code_module"`) || !strings.Contains(got, `"path":"lib/answer.ts"`) {
		t.Fatalf("search while the volume lives: %s", got)
	}
	key := ids.SessionKey("acme", "mods")
	sess, err := e.st.GetSession(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	e.stack.Reaper.Now = func() time.Time { return sess.IdleExpiresAt.Add(time.Second) }
	c, err := e.stack.Reaper.Pass(ctx)
	if err != nil || c.SessionsExpired != 1 {
		t.Fatalf("pass: %+v, %v", c, err)
	}
	// Deleted by the cleanup itself, before any search looked.
	if mods, err := e.st.CodeModules(ctx, key); err != nil || len(mods) != 0 {
		t.Fatalf("modules after the cleanup: %+v, %v", mods, err)
	}
	if got := search(); strings.Contains(got, `"kind":"code_module"`) || !strings.Contains(got, `"kind":"doc"`) {
		t.Fatalf("search after the volume is gone: %s", got)
	}
}
