package api_test

import (
	"net/http"
	"strings"
	"testing"
)

// The console is public static files, each with a Content-Security-Policy
// that allows only the console's own script, style and origin.
func TestConsoleIsServed(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct{ path, ct, has string }{
		{"/", "text/html", `<script src="console/app.js"`},
		{"/console/app.js", "text/javascript", "sessionStorage"},
		{"/console/style.css", "text/css", "--accent"},
		{"/console/icon.svg", "image/svg+xml", "<svg"},
	} {
		res := e.get(tc.path, "")
		wantStatus(t, res, http.StatusOK)
		if ct := res.header.Get("Content-Type"); !strings.HasPrefix(ct, tc.ct) {
			t.Errorf("%s: Content-Type %q, want %s", tc.path, ct, tc.ct)
		}
		if !strings.Contains(string(res.body), tc.has) {
			t.Errorf("%s does not contain %q", tc.path, tc.has)
		}
		csp := res.header.Get("Content-Security-Policy")
		for _, d := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, d) {
				t.Errorf("%s: CSP %q lacks %q", tc.path, csp, d)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("%s: CSP %q allows inline or eval", tc.path, csp)
		}
		if res.header.Get("X-Content-Type-Options") != "nosniff" || res.header.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("%s: headers %v", tc.path, res.header)
		}
	}
	// No inline script or style anywhere in the page: the CSP would block it.
	page := string(e.get("/", "").body)
	if strings.Contains(page, "<script>") || strings.Contains(page, "style=") || strings.Contains(page, "<style") {
		t.Error("the page has inline script or style")
	}
	// Only the listed files; the page itself only at /.
	for _, p := range []string{"/console/index.html", "/console/nope.js", "/console/", "/console/../openapi.json"} {
		wantError(t, e.get(p, ""), http.StatusNotFound, "not_found", "")
	}
	// The token never travels in a URL: the script sends it only as a header.
	js := string(e.get("/console/app.js", "").body)
	if strings.Contains(js, "?token") || strings.Contains(js, "&token") || strings.Contains(js, "localStorage") {
		t.Error("app.js puts the token in a URL or in localStorage")
	}
}

// Behind API Gateway the console and the description come from the same
// handler, through the ApiFunction, on the $default stage and on a named
// one (whose prefix the page's relative links keep).
func TestConsoleThroughTheLambda(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct{ stage, path string }{{"$default", "/"}, {"prod", "/prod/"}, {"prod", "/prod/console/app.js"}, {"$default", "/v1/openapi.json"}} {
		ev := gatewayEvent(http.MethodGet, tc.path, "", "", "", false)
		ev.RequestContext.Stage = tc.stage
		res := e.viaLambda(ev)
		wantStatus(t, res, http.StatusOK)
		if res.header.Get("Content-Security-Policy") == "" || len(res.body) == 0 {
			t.Errorf("%s on %s: %v, %d bytes", tc.path, tc.stage, res.header, len(res.body))
		}
	}
	page := string(e.viaLambda(gatewayEvent(http.MethodGet, "/", "", "", "", false)).body)
	if strings.Contains(page, `src="/`) || strings.Contains(page, `href="/`) {
		t.Error("the page links its files by absolute path, which a stage prefix would break")
	}
}
