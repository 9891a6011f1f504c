package conformance

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/sandstep/sandstep/internal/testkit/testdns"
)

// FixtureDomain is the domain the fixture's DNS server answers for: the
// name itself and every name below it resolve to 127.0.0.1.
const FixtureDomain = "cf-fixture.test"

// Fixture is what the network cases reach: two HTTP servers on this
// machine's 127.0.0.1 that record every visit, one of which the harness
// lists in the provider's allow_private (Listed) and one it does not
// (Unlisted), and a DNS server on 127.0.0.1 for providers that can be told
// to resolve with it. It is for providers whose sandboxes run on this
// machine; start it before the provider is configured:
//
//	fx, err := conformance.StartFixture()
//	defaults.AllowPrivate = []string{fx.Listed}
//	settings.DNSServers = []string{fx.DNS}   // where the provider has such a setting
//	conformance.Run(t, p, conformance.Options{Fixture: fx})
type Fixture struct {
	// Listed and Unlisted are "127.0.0.1:port" of the two servers.
	Listed, Unlisted string
	// DNS is "127.0.0.1:port" of the DNS server; names under
	// FixtureDomain resolve to 127.0.0.1. Set Options.FixtureDNS when the
	// provider resolves with it.
	DNS string

	listed, unlisted *http.Server
	dns              *testdns.Server

	mu     sync.Mutex
	visits map[string]int // "listed|unlisted /token" -> count
}

// StartFixture starts the fixture; Close stops it.
func StartFixture() (*Fixture, error) {
	fx := &Fixture{visits: map[string]int{}}
	serve := func(which string) (*http.Server, string, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, "", err
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fx.mu.Lock()
			fx.visits[which+" "+r.URL.Path]++
			fx.mu.Unlock()
			fmt.Fprintln(w, "ok")
		})}
		go srv.Serve(ln)
		return srv, ln.Addr().String(), nil
	}
	var err error
	if fx.listed, fx.Listed, err = serve("listed"); err != nil {
		return nil, err
	}
	if fx.unlisted, fx.Unlisted, err = serve("unlisted"); err != nil {
		fx.listed.Close()
		return nil, err
	}
	if fx.dns, err = testdns.Listen(map[string][]string{FixtureDomain: {"127.0.0.1"}, "*." + FixtureDomain: {"127.0.0.1"}}); err != nil {
		fx.listed.Close()
		fx.unlisted.Close()
		return nil, err
	}
	fx.DNS = fx.dns.Addr()
	return fx, nil
}

// Close stops the servers.
func (fx *Fixture) Close() {
	fx.listed.Close()
	fx.unlisted.Close()
	fx.dns.Close()
}

// visitsOf counts the requests for /token to the listed or unlisted
// server.
func (fx *Fixture) visitsOf(which, token string) int {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	return fx.visits[which+" /"+token]
}

func port(hostport string) string {
	_, p, _ := net.SplitHostPort(hostport)
	return p
}

// fetchScript fetches url with the sandbox's first HTTP client, through
// the proxy of its environment for every host (loopback included: the
// sandbox's own loopback is not this machine's), and prints the HTTP status
// ("000" when none came back) or "no-client". It always exits 0, so that
// it also works as a snapshot setup command.
func fetchScript(url string) string {
	return `u='` + url + `'
if command -v curl >/dev/null 2>&1; then
  NO_PROXY= no_proxy= curl -s -o /dev/null -m 20 -w '%{http_code}' "$u"; echo
elif command -v python3 >/dev/null 2>&1; then
  NO_PROXY= no_proxy= python3 -c 'import sys, urllib.request as r, urllib.error as e
try:
    print(r.urlopen(sys.argv[1], timeout=20).status)
except e.HTTPError as x:
    print(x.code)
except Exception:
    print("000")' "$u"
else echo no-client; fi
`
}

// directScript connects to host:port without any proxy and prints
// "connected" or "blocked" (or "no-client").
func directScript(hostport string) string {
	h, p, _ := net.SplitHostPort(hostport)
	return `if command -v bash >/dev/null 2>&1; then timeout 10 bash -c 'exec 3<>/dev/tcp/` + h + `/` + p + `' 2>/dev/null && echo connected || echo blocked
elif command -v python3 >/dev/null 2>&1; then python3 -c 'import socket; socket.create_connection(("` + h + `", ` + p + `), 10)' 2>/dev/null && echo connected || echo blocked
else echo no-client; fi
`
}

// fetch runs fetchScript in sandbox id and returns the status it printed.
func (f *fix) fetch(id, url string) string {
	f.t.Helper()
	out := strings.TrimSpace(f.sh(id, fetchScript(url)))
	if out == "no-client" {
		f.t.Skipf("the sandbox has no HTTP client (curl or python3) to test the network with")
	}
	return out
}

func (f *fix) direct(id, hostport string) string {
	f.t.Helper()
	out := strings.TrimSpace(f.sh(id, directScript(hostport)))
	if out == "no-client" {
		f.t.Skipf("the sandbox has no TCP client (bash or python3) to test the network with")
	}
	return out
}
