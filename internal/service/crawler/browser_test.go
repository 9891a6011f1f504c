package crawler

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/internal/testkit/fixturesite"
)

// requireBrowser returns the Chromium to test with. Under CI=true a missing
// browser fails the test: the project's dependency script installs Debian's
// chromium package.
func requireBrowser(t *testing.T) {
	t.Helper()
	if FindBrowser("") != "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no chromium, chromium-browser or google-chrome in PATH (install the Debian package chromium)")
	}
	t.Skip("no chromium in PATH (apt-get install chromium); skipping the browser test")
}

func pageByURL(out Output, url string) (Page, bool) {
	for _, p := range out.Pages {
		if p.URL == url {
			return p, true
		}
	}
	return Page{}, false
}

func TestRenderAutoRunsScripts(t *testing.T) {
	requireBrowser(t)
	site := fixturesite.Start(t, fixturesite.Options{})
	alpha := site.Hosts[0]
	out, lines := run(t, t.Context(), Input{
		AllowPrivate: site.AllowPrivate(),
		Sources:      []Source{{N: 1, URL: alpha.Page(fixturesite.PathJS)}, {N: 2, URL: alpha.Page("/a")}},
		Limits:       Limits{PageTimeoutMS: 60000},
		Render:       RenderAuto,
	})
	if !strings.HasPrefix(lines[0].Message, "browser found") {
		t.Errorf("browser line = %+v", lines[0])
	}
	app, ok := pageByURL(out, alpha.Page(fixturesite.PathJS))
	if !ok {
		t.Fatalf("no page for the JavaScript page; skipped %+v", out.Skipped)
	}
	if app.Mode != "browser" || !strings.Contains(app.Content, fixturesite.JSText) || app.Status != 200 {
		t.Errorf("JavaScript page: mode %s status %d content %.300q", app.Mode, app.Status, app.Content)
	}
	// A page with its text in the HTML is not worth a browser.
	if a, _ := pageByURL(out, alpha.Page("/a")); a.Mode != "http" {
		t.Errorf("/a was rendered (mode %s) though HTTP gave its text", a.Mode)
	}
	if out.Stats.Mode != "browser" {
		t.Errorf("stats mode = %s", out.Stats.Mode)
	}
	if n := site.Hits(alpha.Page(fixturesite.PathImage)); n != 0 {
		t.Errorf("the browser fetched the page's image %d times; images are blocked", n)
	}
}

func TestRenderAlways(t *testing.T) {
	requireBrowser(t)
	site := fixturesite.Start(t, fixturesite.Options{})
	alpha := site.Hosts[0]
	out, lines := run(t, t.Context(), Input{
		AllowPrivate: site.AllowPrivate(),
		Sources:      []Source{{N: 1, URL: alpha.Page("/a")}, {N: 2, URL: alpha.Page(fixturesite.PathChallenge)}, {N: 3, URL: alpha.Page(fixturesite.PathRedirect)}},
		Limits:       Limits{PageTimeoutMS: 60000},
		Render:       RenderAlways,
	})
	if lines[0].Status != StatusRunning || lines[1].Stage != StageBrowser || lines[1].Status != StatusComplete {
		t.Errorf("browser lines = %+v, %+v", lines[0], lines[1])
	}
	a, ok := pageByURL(out, alpha.Page("/a"))
	if !ok || a.Mode != "browser" || !strings.HasPrefix(a.Content, alpha.Marker("/a")) || strings.Contains(a.Content, fixturesite.FooterText) {
		t.Errorf("/a rendered: %+v", a)
	}
	// A real browser does not get past the fixture's challenge either.
	if r := skipReason(out, alpha.Page(fixturesite.PathChallenge)); r != "challenge" {
		t.Errorf("challenge: reason %q", r)
	}
	if s, _ := skipOf(out, alpha.Page(fixturesite.PathRedirect)); s.Reason != "duplicate" || s.Message != "the same page as "+alpha.Page("/a") {
		t.Errorf("redirect to /a: %+v", s)
	}
}

func TestRenderNeverKeepsHTTP(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{})
	alpha := site.Hosts[0]
	out, lines := run(t, t.Context(), Input{
		AllowPrivate: site.AllowPrivate(),
		Sources:      []Source{{N: 1, URL: alpha.Page(fixturesite.PathJS)}},
		Render:       RenderNever,
	})
	if lines[0] != (Progress{Stage: StageBrowser, Status: StatusComplete, Message: "render=never: HTTP mode"}) {
		t.Errorf("browser line = %+v", lines[0])
	}
	if len(out.Pages) != 1 || out.Pages[0].Mode != "http" || strings.Contains(out.Pages[0].Content, fixturesite.JSText) {
		t.Errorf("pages = %+v", out.Pages)
	}
}

func TestNoBrowserFallsBackToHTTP(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{})
	alpha := site.Hosts[0]
	out, lines := run(t, t.Context(), Input{
		AllowPrivate: site.AllowPrivate(),
		Sources:      []Source{{N: 1, URL: alpha.Page(fixturesite.PathJS)}},
		Render:       RenderAuto,
		BrowserPath:  filepath.Join(t.TempDir(), "no-such-chromium"),
	})
	if lines[0] != (Progress{Stage: StageBrowser, Status: StatusComplete, Message: "no browser: HTTP mode"}) {
		t.Errorf("browser line = %+v", lines[0])
	}
	if len(out.Pages) != 1 || out.Pages[0].Mode != "http" || out.Stats.Mode != "http" {
		t.Errorf("pages = %+v stats %+v", out.Pages, out.Stats)
	}
}

func TestBrowserThatWillNotStart(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{})
	alpha := site.Hosts[0]
	fake := filepath.Join(t.TempDir(), "chromium")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho 'cannot open display' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, lines := run(t, t.Context(), Input{
		AllowPrivate: site.AllowPrivate(),
		Sources:      []Source{{N: 1, URL: alpha.Page("/a")}},
		Render:       RenderAlways,
		BrowserPath:  fake,
	})
	if lines[1].Stage != StageBrowser || lines[1].Status != StatusError || !strings.HasSuffix(lines[1].Message, "HTTP mode") {
		t.Errorf("browser lines = %+v", lines[:2])
	}
	if len(out.Pages) != 1 || out.Pages[0].Mode != "http" {
		t.Errorf("pages = %+v", out.Pages)
	}

	// In auto mode the browser starts with the first page that needs it;
	// its failure is reported then, and the page is kept as HTTP gave it.
	out, lines = run(t, t.Context(), Input{
		AllowPrivate: site.AllowPrivate(),
		Sources:      []Source{{N: 1, URL: alpha.Page(fixturesite.PathJS)}},
		Render:       RenderAuto,
		BrowserPath:  fake,
	})
	var failed bool
	for _, p := range lines {
		failed = failed || (p.Stage == StageBrowser && p.Status == StatusError)
	}
	if !failed {
		t.Errorf("no browser error line in %+v", lines)
	}
	if len(out.Pages) != 1 || out.Pages[0].Mode != "http" || out.Pages[0].Content != "Loading..." {
		t.Errorf("pages = %+v", out.Pages)
	}
}
