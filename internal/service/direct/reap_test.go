package direct_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/client"
	"github.com/sandstep/sandstep/internal/service/sandboxes"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/providers"
)

// TestArtifactsServedWithTheirType: files the sandbox writes to its
// artifacts folder are served over HTTP with their content type, by the
// sandbox's URL token (which a first visit turns into a cookie); a path
// that escapes the folder, by ".." or by a symlink, is refused. The
// folder's own link lists it, as JSON or as a page of links.
func TestArtifactsServedWithTheirType(t *testing.T) {
	e := newEnv(t, "")
	ctx := ctxFor(t)
	acme := e.client(tokenAcme)
	sb, err := acme.CreateSandbox(ctx, client.CreateRequest{TTLSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	png := "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
	if err := acme.WriteFile(ctx, sb.ID, "/workspace/artifacts/charts/plot.png", strings.NewReader(png)); err != nil {
		t.Fatal(err)
	}
	script := `mkdir -p /workspace/artifacts/charts && cd /workspace/artifacts &&
printf '<h1>Report</h1>' > report.html && printf 'a,b\n1,2\n' > data.csv && printf x > '<i>&"odd #1?.txt' &&
echo secret > /workspace/secret.txt && ln -s /workspace/secret.txt leak.txt && ln -s /workspace outside`
	if code, err := acme.Run(ctx, sb.ID, client.ExecRequest{Command: script}, nil, nil); err != nil || code != 0 {
		t.Fatalf("writing artifacts: %d %v", code, err)
	}
	got, err := acme.Get(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	r := e.do("GET", "/v1/sandboxes/"+sb.ID, tokenAcme, nil)
	links := r.json(t)["links"].(map[string]any)
	artifacts := links["artifacts"].(string) // ".../artifacts?token=..."
	_, token, _ := strings.Cut(artifacts, "?token=")
	if token == "" || got.ID != sb.ID {
		t.Fatalf("no URL token in %q", artifacts)
	}
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	list := func(link, accept string) (int, http.Header, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", e.url+link, nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		res, err := browser.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header, b
	}
	if status, _, body := list("/v1/sandboxes/"+sb.ID+"/artifacts", ""); status != 404 {
		t.Errorf("the folder without a token: %d %s", status, body)
	}
	status, _, body := list(artifacts, "")
	var listing struct {
		Artifacts []struct {
			Path        string
			ContentType string `json:"content_type"`
			URL         string
			Size        int64
		}
		Truncated bool
	}
	if err := json.Unmarshal(body, &listing); status != 200 || err != nil {
		t.Fatalf("the folder's link: %d %v %s", status, err, body)
	}
	var paths []string
	for _, a := range listing.Artifacts {
		paths = append(paths, fmt.Sprintf("%s %d %s", a.Path, a.Size, a.ContentType))
	}
	wantPaths := []string{`<i>&"odd #1?.txt 1 text/plain; charset=utf-8`, "charts/plot.png 16 image/png",
		"data.csv 8 text/csv; charset=utf-8", "report.html 15 text/html; charset=utf-8"}
	if !slices.Equal(paths, wantPaths) || listing.Truncated {
		t.Errorf("listing %q (truncated %v), want %q", paths, listing.Truncated, wantPaths)
	}
	// The Go client lists the same, by the tenant's token.
	if files, cut, err := acme.Artifacts(ctx, sb.ID); err != nil || cut || len(files) != len(listing.Artifacts) || files[1].URL != listing.Artifacts[1].URL {
		t.Errorf("the client's listing: %+v %v %v", files, cut, err)
	}
	// Each url works with the cookie the listing's visit left, the odd
	// name's too, escaped.
	for _, a := range listing.Artifacts {
		if status, _, b := list(a.URL, ""); status != 200 || int64(len(b)) != a.Size {
			t.Errorf("%s at %s: %d, %d bytes", a.Path, a.URL, status, len(b))
		}
	}
	// A browser gets a page whose every name is escaped.
	status, header, body := list(artifacts, "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
	page := string(body)
	if status != 200 || header.Get("Content-Type") != "text/html; charset=utf-8" || !strings.Contains(header.Get("Content-Security-Policy"), "sandbox") ||
		!strings.Contains(page, `<a href="/v1/sandboxes/`+sb.ID+`/artifacts/charts/plot.png">charts/plot.png</a>`) ||
		!strings.Contains(page, `&lt;i&gt;&amp;&#34;odd #1?.txt`) || strings.Contains(page, "<i>") {
		t.Errorf("the page: %d %v\n%s", status, header, page)
	}
	fetch := func(path string, withToken bool) (int, string, string) {
		t.Helper()
		u := e.url + "/v1/sandboxes/" + sb.ID + "/artifacts/" + path
		if withToken {
			u += "?token=" + token
		}
		res, err := browser.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header.Get("Content-Type"), string(b)
	}
	for _, c := range []struct{ path, ctype, body string }{
		{"report.html", "text/html; charset=utf-8", "<h1>Report</h1>"},
		{"data.csv", "text/csv; charset=utf-8", "a,b\n1,2\n"},
		{"charts/plot.png", "image/png", png},
	} {
		status, ctype, body := fetch(c.path, c.path == "report.html")
		if status != 200 || ctype != c.ctype || body != c.body {
			t.Errorf("%s: %d %q %q", c.path, status, ctype, body)
		}
	}
	for _, p := range []string{"../secret.txt", "..%2Fsecret.txt", "charts/../../secret.txt", "leak.txt", "outside/secret.txt"} {
		status, _, body := fetch(p, true)
		if status != 400 || !strings.Contains(body, `"field":"path"`) || strings.Contains(body, "secret\n") {
			t.Errorf("escaping path %s: %d %s", p, status, body)
		}
	}
	if status, _, _ := fetch("missing.txt", true); status != 404 {
		t.Errorf("missing artifact: %d", status)
	}
	res, err := http.Get(e.url + "/v1/sandboxes/" + sb.ID + "/artifacts/report.html")
	if err != nil || res.StatusCode != 404 {
		t.Errorf("without a token: %v %v", res.StatusCode, err)
	}
	res, err = http.Get(e.url + "/v1/sandboxes/" + sb.ID + "/artifacts/report.html?token=" + strings.Repeat("a", len(token)))
	if err != nil || res.StatusCode != 404 {
		t.Errorf("with a wrong token: %v %v", res.StatusCode, err)
	}
	if err := acme.TerminateSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if status, _, _ := fetch("report.html", true); status != 404 {
		t.Errorf("after terminate, the link still works: %d", status)
	}
	if status, _, _ := list(artifacts, ""); status != 404 {
		t.Errorf("after terminate, the folder's link still works: %d", status)
	}
}

// TestIdleDespiteNetworkPolling: a sandbox whose only life is a process
// inside polling the network (and a background exec that did not opt in to
// keep it alive) is warned of and then reaped as idle; one that an API
// call touched is kept; one past its TTL expires.
func TestIdleDespiteNetworkPolling(t *testing.T) {
	e := newEnv(t, "idle_timeout = \"5m\"\nexpiring_notice = \"1m\"")
	ctx := ctxFor(t)
	acme := e.client(tokenAcme)
	busy, err := acme.CreateSandbox(ctx, client.CreateRequest{TTLSeconds: 3600})
	if err != nil {
		t.Fatal(err)
	}
	used, err := acme.CreateSandbox(ctx, client.CreateRequest{TTLSeconds: 3600})
	if err != nil {
		t.Fatal(err)
	}
	short, err := acme.CreateSandbox(ctx, client.CreateRequest{TTLSeconds: 120})
	if err != nil {
		t.Fatal(err)
	}
	// The poller reaches sandstep itself, the one host it may reach, and
	// counts its answers; it never stops on its own.
	poll := `nohup sh -c 'i=0; while :; do python3 -c "import urllib.request as u; u.urlopen(\"` + e.inner + `/healthz\", timeout=5).read()" && i=$((i+1)) && echo $i > /tmp/polls; sleep 0.2; done' > /dev/null 2>&1 &`
	if code, err := acme.Run(ctx, busy.ID, client.ExecRequest{Command: poll}, nil, nil); err != nil || code != 0 {
		t.Fatalf("starting the poller: %d %v", code, err)
	}
	if _, err := acme.Exec(ctx, busy.ID, client.ExecRequest{Command: "sleep 3600", Background: true}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var n bytes.Buffer
		_, _ = acme.ReadFile(ctx, busy.ID, "/tmp/polls", &n)
		if atoi(n.String()) >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the poller reached the network %q times", n.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	pass := func() {
		t.Helper()
		if _, err := e.stack.Reaper.Pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	e.clock.Advance(4*time.Minute + 30*time.Second)
	if _, err := acme.Get(ctx, used.ID); err != nil { // an API call: activity
		t.Fatal(err)
	}
	pass()
	// The checks read the store: an API call would be activity.
	b := record(t, e, busy.ID)
	if b.State != "running" {
		t.Fatalf("reaped before its idle timeout: %+v", b)
	}
	if s := record(t, e, short.ID); s.State != "terminated" {
		t.Errorf("a sandbox past its TTL: %+v", s)
	}
	if !hasEvent(t, e, busy.ID, "sandbox.expiring") {
		t.Errorf("no sandbox.expiring event before the idle end")
	}
	e.clock.Advance(time.Minute)
	pass()
	b = record(t, e, busy.ID)
	if b.State != "terminated" || !strings.Contains(b.Reason, "idle") {
		t.Errorf("a sandbox busy only with its own network polling: %+v", b)
	}
	if !hasEvent(t, e, busy.ID, "sandbox.expired") || !hasEvent(t, e, short.ID, "sandbox.expired") {
		t.Errorf("no sandbox.expired events")
	}
	if u, _ := acme.Get(ctx, used.ID); u.Status != "running" {
		t.Errorf("a sandbox used through the API 1.5 minutes ago was reaped: %+v", u)
	}
	if n := e.liveSandboxes(); n != 1 {
		t.Errorf("%d live sandboxes, want 1", n)
	}
}

func atoi(s string) int {
	n := 0
	fmt.Sscan(strings.TrimSpace(s), &n)
	return n
}

func record(t *testing.T, e *env, id string) store.DirectSandbox {
	t.Helper()
	d, err := e.st.DirectGet(ctxFor(t), id)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func hasEvent(t *testing.T, e *env, id, typ string) bool {
	t.Helper()
	for _, ev := range record(t, e, id).Events {
		if ev.Type == typ {
			return true
		}
	}
	return false
}

// TestOrphanedChildrenAreReaped: a child whose parent's sandbox ended
// behind the cascade's back (only the parent's ledger entry closed, as a
// crash mid-cascade leaves it) is terminated by the next cleanup pass, and
// its record closes, its token dead.
func TestOrphanedChildrenAreReaped(t *testing.T) {
	e := newEnv(t, "")
	ctx := ctxFor(t)
	acme := e.client(tokenAcme)
	parent, err := acme.CreateSandbox(ctx, client.CreateRequest{TTLSeconds: 3600})
	if err != nil {
		t.Fatal(err)
	}
	var tok bytes.Buffer
	if _, err := acme.Run(ctx, parent.ID, client.ExecRequest{Command: "printf %s \"$SANDSTEP_TOKEN\""}, &tok, nil); err != nil {
		t.Fatal(err)
	}
	agent := e.client(tok.String())
	child, err := agent.CreateSandbox(ctx, client.CreateRequest{TTLSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	grandchild, err := e.client(childToken(t, e, child.ID)).CreateSandbox(ctx, client.CreateRequest{TTLSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	// The parent alone goes, through the owner package, as a release that
	// died before it reached the children would leave it.
	p := record(t, e, parent.ID)
	if err := e.stack.App.Phases.Sandboxes.Release(ctx, sandboxes.TenantOwner("acme"), sandboxes.Ref{Name: p.Ledger}, "test"); err != nil {
		t.Fatal(err)
	}
	if n := e.liveSandboxes(); n != 2 {
		t.Fatalf("%d live sandboxes, want the 2 orphans", n)
	}
	for range 2 { // one pass per generation: a grandchild's parent is gone once its parent was reaped
		if _, err := e.stack.Reaper.Pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.liveSandboxes(); n != 0 {
		t.Errorf("%d sandboxes live after the cleanup", n)
	}
	for _, id := range []string{parent.ID, child.ID, grandchild.ID} {
		if r := record(t, e, id); r.State != "terminated" {
			t.Errorf("record of %s: %s", id, r.State)
		}
	}
	if _, err := agent.CreateSandbox(ctx, client.CreateRequest{}); err == nil {
		t.Errorf("the ended parent's token still creates sandboxes")
	}
}

// childToken reads a sandbox's SANDSTEP_TOKEN from inside it.
func childToken(t *testing.T, e *env, id string) string {
	t.Helper()
	d := record(t, e, id)
	var out bytes.Buffer
	if _, err := e.stack.Provider.Exec(ctxFor(t), d.ProviderID, providers.ExecRequest{Shell: "printf %s \"$SANDSTEP_TOKEN\"", Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	return out.String()
}
