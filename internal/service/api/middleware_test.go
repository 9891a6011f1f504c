package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/internal/emulation/ddblocal"
	"github.com/sandstep/sandstep/internal/emulation/samtemplate"
	"github.com/sandstep/sandstep/internal/service/api"
	"github.com/sandstep/sandstep/providers"
)

// panickyProvider panics where a provider answers, as a bug would.
type panickyProvider struct{}

func (panickyProvider) Info(context.Context) (providers.Info, error) {
	panic("provider table is nil (secret-ish detail)")
}

// logLines returns the request log lines whose path is path.
func (e *testEnv) logLines(path string) []map[string]any {
	e.t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(e.logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			e.t.Fatalf("log line %q: %v", l, err)
		}
		if m["msg"] == "http request" && m["path"] == path {
			out = append(out, m)
		}
	}
	return out
}

func TestPanicBecomesAJSON500AndIsLogged(t *testing.T) {
	e := newEnv(t, func(o *api.Options) { o.Provider = panickyProvider{} })
	res := e.get("/v1/providers", tokenAcme)
	er := wantError(t, res, http.StatusInternalServerError, "internal", "")
	if er["message"] != "internal error" || strings.Contains(string(res.body), "secret-ish") {
		t.Fatalf("500 answer = %s", res.body)
	}
	lines := e.logLines("/v1/providers")
	if len(lines) != 1 {
		t.Fatalf("%d log lines for the request:\n%s", len(lines), e.logs.String())
	}
	l := lines[0]
	if l["level"] != "ERROR" || l["status"] != float64(500) || l["tenant"] != "acme" || l["route"] != "GET /v1/providers" ||
		l["error"] != "panic: provider table is nil (secret-ish detail)" ||
		!strings.Contains(l["stack"].(string), "panickyProvider.Info") {
		t.Fatalf("log line = %v", l)
	}
	// The server goes on serving, on the same connection too.
	wantStatus(t, e.get("/healthz", ""), http.StatusOK)
	wantError(t, e.get("/v1/providers", tokenAcme), http.StatusInternalServerError, "internal", "")
}

func TestRouteErrorsAreJSONAndComeBeforeTheToken(t *testing.T) {
	e := newEnv(t)
	// No route, and no method of a route: answered without a token, since
	// no route could take one.
	for _, path := range []string{"/nope", "/v1/jobs/", "/v1/jobs/x/", "/v1/jobs//cancel", "/v1/sessions/s1/runs", "/v1/sessions/s1/runs/r1/x"} {
		er := wantError(t, e.get(path, ""), http.StatusNotFound, "not_found", "")
		if !strings.Contains(er["message"].(string), "no such route") {
			t.Fatalf("%s: %v", path, er)
		}
	}
	res := e.do(http.MethodPatch, "/v1/sessions/s1/run", "", nil)
	wantError(t, res, http.StatusMethodNotAllowed, "method_not_allowed", "")
	if res.header.Get("Allow") != "POST" || res.header.Get("WWW-Authenticate") != "" {
		t.Fatalf("405 headers = %v", res.header)
	}
	// A route's own answers need the token first.
	wantError(t, e.get("/v1/jobs", ""), http.StatusUnauthorized, "unauthenticated", "")
	wantError(t, e.get("/v1/jobs?limit=0", ""), http.StatusUnauthorized, "unauthenticated", "")
	// "." and ".." are ids to refuse, not steps to another route.
	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, "/v1/jobs/.."},
		{http.MethodGet, "/v1/jobs/../events"},
		{http.MethodPost, "/v1/jobs/./cancel"},
		{http.MethodGet, "/v1/jobs/%2E%2E/report"},
	} {
		er := wantError(t, e.do(tc.method, tc.path, tokenAcme, nil), http.StatusNotFound, "not_found", "")
		if !strings.Contains(er["message"].(string), "job ") {
			t.Fatalf("%s %s: %v", tc.method, tc.path, er)
		}
	}
	// Every request is logged with its route.
	e.submit(tokenAcme, "logged")
	e.get("/v1/jobs/logged/events", tokenAcme)
	if l := e.logLines("/v1/jobs/logged/events"); len(l) != 1 || l[0]["route"] != "GET /v1/jobs/{id}/events" || l[0]["job_id"] != "logged" {
		t.Fatalf("log lines = %v", l)
	}
}

// Every route API Gateway sends to the ApiFunction is one the handler
// serves: the template and the mux cannot drift apart unnoticed.
func TestEveryTemplateRouteIsServed(t *testing.T) {
	path, err := ddblocal.FindTemplate()
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := samtemplate.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	fn, _ := tpl.Doc["Resources"].(map[string]any)["ApiFunction"].(map[string]any)
	evs, _ := fn["Properties"].(map[string]any)["Events"].(map[string]any)
	if len(evs) == 0 {
		t.Fatal("ApiFunction has no events")
	}
	e := newEnv(t)
	for name, ev := range evs {
		p := ev.(map[string]any)["Properties"].(map[string]any)
		method, route := p["Method"].(string), p["Path"].(string)
		for _, w := range []string{"{id}", "{sid}", "{run}", "{eid}", "{path+}"} {
			route = strings.ReplaceAll(route, w, "x1")
		}
		route = strings.ReplaceAll(route, "{port}", "8000")
		if method == "ANY" {
			method = http.MethodGet
		}
		route = strings.ReplaceAll(route, "{file}", "app.js") // the console's files have names of their own
		res := e.do(method, route, tokenAcme, nil)
		if res.status == http.StatusMethodNotAllowed || res.status == http.StatusNotFound && strings.Contains(string(res.body), "no such route") {
			t.Errorf("template route %s (%s %s) is not served: %d %s", name, method, route, res.status, res.body)
		}
	}
}
