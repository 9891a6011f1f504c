package crawler

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/internal/testkit/fixturesite"
	"github.com/sandstep/sandstep/internal/testkit/testdns"
	"github.com/sandstep/sandstep/internal/testkit/testhttp"
	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/egress"
)

// newCounter is a service on the host's loopback that no crawl may reach
// (the API, DynamoDB Local), with a page worth crawling.
func newCounter(t testing.TB) *testhttp.Recorder {
	return testhttp.Start(t, testhttp.Options{Body: func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "<html><body><p>secret internal page with plenty of text to be taken for content.</p></body></html>")
	}})
}

// policyProxy runs the egress proxy a provider would, with names resolved
// by dns, and makes the crawler see it as the sandbox's way out.
func policyProxy(t testing.TB, dns *testdns.Server, allowPrivate []string) {
	t.Helper()
	var servers []string
	if dns != nil {
		servers = []string{dns.Addr()}
	}
	r, err := egress.NewResolver(servers)
	if err != nil {
		t.Fatal(err)
	}
	pol, err := egress.NewPolicy(providers.NetworkAll, nil, allowPrivate)
	if err != nil {
		t.Fatal(err)
	}
	p := &egress.Proxy{Resolver: r, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	s := p.Session("crawler-test", pol, nil, nil, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { ln.Close(); s.Close() })
	old := hostEnv
	hostEnv = func(k string) string {
		if k == egress.ProxyEnv {
			return "http://" + ln.Addr().String()
		}
		return ""
	}
	t.Cleanup(func() { hostEnv = old })
}

type blockedCase struct {
	url, addr string
}

// checkBlocked asserts that every case was skipped for the policy, naming
// the address refused, and that the allowed page was crawled.
func checkBlocked(t *testing.T, out Output, allowed string, cases []blockedCase) {
	t.Helper()
	if len(out.Pages) != 1 || out.Pages[0].URL != allowed {
		t.Errorf("pages %v, want only %s", urls(out.Pages), allowed)
	}
	for _, c := range cases {
		var got *Skipped
		for i := range out.Skipped {
			if out.Skipped[i].URL == c.url {
				got = &out.Skipped[i]
			}
		}
		switch {
		case got == nil:
			t.Errorf("%s is not among the skipped: %+v", c.url, out.Skipped)
		case got.Reason != ReasonPolicy || got.Address != c.addr || !strings.HasPrefix(got.Message, "egress denied: "):
			t.Errorf("%s skipped as %+v, want reason %q at %s", c.url, *got, ReasonPolicy, c.addr)
		}
	}
}

// TestPolicySkips: seeds on private addresses, a name that resolves to
// 127.0.0.1 and a redirect from an allowed page to a loopback service are
// never fetched; each is skipped with reason "policy" and the address.
// The crawler enforces this itself where no proxy does (hosted
// providers), and through the provider's proxy where there is one.
func TestPolicySkips(t *testing.T) {
	for _, viaProxy := range []bool{false, true} {
		name := "crawler enforces"
		if viaProxy {
			name = "through the policy proxy"
		}
		t.Run(name, func(t *testing.T) {
			site := fixturesite.Start(t, fixturesite.Options{Hosts: 1})
			alpha := site.Hosts[0]
			api := newCounter(t)
			// Names: localhost resolves to 127.0.0.1 through /etc/hosts
			// where the crawler resolves; the proxy asks dns.
			named := "localhost"
			if viaProxy {
				dns := testdns.Start(t, map[string][]string{"evil.test": {"127.0.0.1"}})
				named = "evil.test"
				policyProxy(t, dns, site.AllowPrivate())
			}
			apiAddr := "127.0.0.1:" + api.Port()
			cases := []blockedCase{
				{api.URL + "/seed", apiAddr},
				{"http://" + named + ":" + api.Port() + "/by-name", apiAddr},
				{"http://169.254.169.254/latest/meta-data/", "169.254.169.254:80"},
				{alpha.RedirectTo(api.URL + "/redirected"), apiAddr},
				{"http://[::ffff:127.0.0.1]:" + api.Port() + "/mapped", apiAddr},
			}
			sources := []Source{{N: 1, URL: alpha.Page("/a")}}
			for i, c := range cases {
				sources = append(sources, Source{N: i + 2, URL: c.url})
			}
			out, _ := run(t, t.Context(), Input{
				AllowPrivate: site.AllowPrivate(),
				Sources:      sources,
				Limits:       Limits{MaxPagesPerHost: 10},
			})
			checkBlocked(t, out, alpha.Page("/a"), cases)
			if hits := api.Paths(); len(hits) != 0 {
				t.Errorf("the loopback service got %v", hits)
			}
		})
	}
}

// TestPolicyHoldsInTheBrowser: a page's scripts and subresources go through
// the same policy, where the crawler runs the browser's proxy itself and
// where the provider's proxy is used.
func TestPolicyHoldsInTheBrowser(t *testing.T) {
	requireBrowser(t)
	for _, viaProxy := range []bool{false, true} {
		t.Run(fmt.Sprintf("proxy=%v", viaProxy), func(t *testing.T) {
			api := newCounter(t)
			page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, `<html><head><title>Script page</title></head><body><div id="t"></div>
<img src="%[1]s/img.png">
<script>
fetch(%[1]q + "/fetch").catch(() => {});
fetch("http://localhost:%[2]s/by-name").catch(() => {});
document.getElementById("t").innerText = "The script wrote this paragraph, which is long enough to be taken for the page's content by the extractor.";
</script></body></html>`, api.URL, api.Port())
			}))
			defer page.Close()
			allow := []string{strings.TrimPrefix(page.URL, "http://")}
			if viaProxy {
				dns := testdns.Start(t, nil)
				policyProxy(t, dns, allow)
			}
			out, _ := run(t, t.Context(), Input{
				AllowPrivate: allow,
				Sources:      []Source{{N: 1, URL: page.URL + "/"}},
				Render:       RenderAlways,
			})
			if len(out.Pages) != 1 || out.Pages[0].Mode != "browser" || !strings.Contains(out.Pages[0].Content, "The script wrote this") {
				t.Fatalf("pages %+v skipped %+v: want the page rendered", out.Pages, out.Skipped)
			}
			if hits := api.Paths(); len(hits) != 0 {
				t.Errorf("the page's scripts reached the loopback service: %v", hits)
			}
		})
	}
}

// TestProxyFailureIsAFetchError: when the egress proxy cannot reach an
// allowed address it answers 502 itself; the crawler reports that as the
// page failing to load, with the proxy's reason, not as a status the site
// sent.
func TestProxyFailureIsAFetchError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close() // nothing listens there now
	policyProxy(t, nil, []string{closed})
	u := "http://" + closed + "/gone"
	out, _ := run(t, t.Context(), Input{Sources: []Source{{N: 1, URL: u}}, AllowPrivate: []string{closed}})
	if len(out.Skipped) != 1 || out.Skipped[0].Reason != ReasonFetchError || !strings.Contains(out.Skipped[0].Message, "refused") {
		t.Fatalf("skipped %+v, want one %s saying the connection was refused", out.Skipped, ReasonFetchError)
	}
}
