package crawler

import (
	"net/http"
	"strings"
	"testing"
)

func TestIsChallenge(t *testing.T) {
	article := strings.Repeat("A long article paragraph about kestrels and their habitat. ", 10)
	for _, tc := range []struct {
		name   string
		status int
		header http.Header
		body   string
		title  string
		text   string
		want   bool
	}{
		{"cloudflare managed challenge", 503, nil, `<script>window._cf_chl_opt={cType:'managed'}</script>`, "Just a moment...", "", true},
		{"cloudflare challenge platform on 200", 200, nil, `<script src="/cdn-cgi/challenge-platform/h/b/orchestrate/jsch/v1"></script>`, "example.com", "", true},
		{"cf-mitigated header", 403, http.Header{"Cf-Mitigated": {"challenge"}}, "", "", "", true},
		{"checking your browser", 200, nil, `<h1>Checking your browser before accessing example.com</h1>`, "", "Checking your browser before accessing example.com", true},
		{"just a moment title on a 403", 403, nil, `<html></html>`, "Just a moment...", "", true},
		{"recaptcha wall", 200, nil, `<div class="g-recaptcha" data-sitekey="x"></div>`, "Please verify", "Please verify.", true},
		{"turnstile on 429", 429, nil, `<div class="cf-turnstile"></div>` + article, "Rate limited", article, true},
		{"ddos-guard", 403, nil, `<title>DDoS-Guard</title>`, "DDoS-Guard", "", true},
		{"article", 200, nil, `<p>` + article + `</p>`, "Kestrels", article, false},
		{"article with a recaptcha contact form", 200, nil, `<p>` + article + `</p><div class="g-recaptcha"></div>`, "Kestrels", article, false},
		{"article titled just a moment", 200, nil, `<p>` + article + `</p>`, "Just a moment: a history of pauses", article, false},
		{"plain 503", 503, nil, `<h1>Service Unavailable</h1>`, "503 Service Unavailable", "Service Unavailable", false},
		{"plain 404", 404, nil, `<h1>Not found</h1>`, "Not found", "Not found", false},
	} {
		if got := isChallenge(tc.status, tc.header, []byte(tc.body), tc.title, tc.text); got != tc.want {
			t.Errorf("%s: isChallenge = %v, want %v", tc.name, got, tc.want)
		}
	}
}
