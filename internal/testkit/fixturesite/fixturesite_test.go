package fixturesite

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func get(t *testing.T, client *http.Client, url string) (*http.Response, string) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp, string(b)
}

func TestSite(t *testing.T) {
	site := Start(t, Options{HugeBytes: 1 << 20})
	if len(site.Hosts) != 3 || site.Hosts[0].URL == site.Hosts[1].URL {
		t.Fatalf("hosts = %+v", site.Hosts)
	}
	alpha, beta := site.Hosts[0], site.Hosts[1]
	client := &http.Client{}

	resp, body := get(t, client, alpha.Page("/"))
	if resp.StatusCode != 200 || !strings.Contains(body, alpha.Marker("/")) || !strings.Contains(body, `href="`+beta.URL+`/"`) {
		t.Errorf("index: %d %s", resp.StatusCode, body)
	}
	_, body = get(t, client, alpha.Page("/a"))
	for _, l := range Layout["/a"] {
		if !strings.Contains(body, `href="`+l+`"`) {
			t.Errorf("/a does not link %s", l)
		}
	}
	if _, b := get(t, client, alpha.Page(PathHuge)); len(b) != 1<<20 {
		t.Errorf("huge page is %d bytes", len(b))
	}
	if r, _ := get(t, client, alpha.Page(PathPDF)); r.Header.Get("Content-Type") != "application/pdf" {
		t.Errorf("PDF content type %q", r.Header.Get("Content-Type"))
	}
	if r, b := get(t, client, alpha.Page(PathChallenge)); r.StatusCode != 503 || !strings.Contains(b, "Just a moment...") {
		t.Errorf("challenge: %d", r.StatusCode)
	}
	if r, _ := get(t, client, alpha.Page(PathNotFound)); r.StatusCode != 404 {
		t.Errorf("unknown path: %d", r.StatusCode)
	}
	if r, b := get(t, client, alpha.Page(PathRedirect)); r.Request.URL.Path != "/a" || !strings.Contains(b, alpha.Marker("/a")) {
		t.Errorf("redirect landed on %s", r.Request.URL)
	}
	if _, err := client.Get(alpha.Page(PathLoop)); err == nil || !strings.Contains(err.Error(), "redirects") {
		t.Errorf("redirect loop: %v", err)
	}
	if _, b := get(t, client, alpha.Page(PathJS)); strings.Contains(b, "<p>"+JSText) || !strings.Contains(b, "Loading...") {
		t.Errorf("JS page shows its text without the script: %s", b)
	}
	if r, b := get(t, client, alpha.Page(PathGzip)); !r.Uncompressed || !strings.Contains(b, alpha.Marker(PathGzip)) {
		t.Errorf("gzip page: uncompressed=%v", r.Uncompressed)
	}
	if _, b := get(t, client, alpha.Page(PathLatin1)); strings.Contains(b, LatinText) || !strings.Contains(b, "Cr\xe8me") {
		t.Errorf("latin-1 page is not in latin-1")
	}

	if n := site.Hits(alpha.Page("/")); n != 1 {
		t.Errorf("hits of / = %d", n)
	}
	if n := site.Hits(alpha.Page(PathLoop)) + site.Hits(alpha.Page("/loop/b")); n != 10 {
		t.Errorf("the loop was requested %d times, want 10 (net/http gives up after 10 requests)", n)
	}
	if site.Hits(beta.Page("/")) != 0 || site.TotalHits() < 10 {
		t.Errorf("beta / hits %d, total %d", site.Hits(beta.Page("/")), site.TotalHits())
	}
}

func TestSlowPageEndsWithTheClient(t *testing.T) {
	site := Start(t, Options{Hosts: 2})
	client := &http.Client{Timeout: 200 * time.Millisecond}
	_, err := client.Get(site.Hosts[0].Page(PathSlow))
	var ue interface{ Timeout() bool }
	if !errors.As(err, &ue) || !ue.Timeout() {
		t.Errorf("slow page: %v, want a client timeout", err)
	}
}
