package local

import (
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/testkit/testdns"
	"github.com/sandstep/sandstep/internal/testkit/testhttp"
	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/egress"
)

// nonLoopback returns a non-loopback IPv4 address of this machine.
func nonLoopback(t *testing.T) string {
	t.Helper()
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("this machine has no non-loopback IPv4 address to test with")
	}
	t.Skip("this machine has no non-loopback IPv4 address to test with")
	return ""
}

// netEnv is a provider whose sandboxes may reach fixture (allow_private)
// and resolve names with dns.
type netEnv struct {
	*testEnv
	dns     *testdns.Server
	fixture *testhttp.Recorder
}

func newNetEnv(t *testing.T, mod func(*Settings)) *netEnv {
	t.Helper()
	fixture := testhttp.Start(t, testhttp.Options{})
	dns := testdns.Start(t, map[string][]string{
		"fixture.test": {"127.0.0.1"},
		"evil.test":    {"127.0.0.1"},
		"*.wild.test":  {"127.0.0.1"},
		"wild.test":    {"127.0.0.1"},
		"exact.test":   {"127.0.0.1"},
		"other.test":   {"127.0.0.1"},
		"example.com":  {"127.0.0.1"},
	})
	e := newEnvDefaults(t, func(ls *Settings) {
		ls.DNSServers = []string{dns.Addr()}
		if mod != nil {
			mod(ls)
		}
	}, func(d *providers.SandboxDefaults) { d.AllowPrivate = []string{fixture.Addr()} })
	return &netEnv{testEnv: e, dns: dns, fixture: fixture}
}

// curl runs curl in the sandbox and returns "<status> <denial reason>" or
// "fail" when no HTTP answer came back at all.
func (e *netEnv) curl(id, args string) string {
	e.t.Helper()
	r := e.exec(id, providers.ExecRequest{Shell: `curl -s -o /dev/null -m 10 -D /tmp/h -w '%{http_code}' ` + args + `; echo " $(grep -i '^x-sandstep-egress-denied:' /tmp/h | cut -d' ' -f2 | tr -d '\r;')"; rm -f /tmp/h`, Timeout: 30 * time.Second})
	out := strings.TrimSpace(r.stdout)
	if strings.HasPrefix(out, "000") {
		return "fail"
	}
	return out
}

// TestNetworkOwnNamespace: whatever its policy, a sandbox has only a
// loopback of its own; nothing goes anywhere directly.
func TestNetworkOwnNamespace(t *testing.T) {
	e := newNetEnv(t, nil)
	wide, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer wide.Close()
	go func() {
		for {
			c, err := wide.Accept()
			if err != nil {
				return
			}
			t.Errorf("a sandbox reached a service on all interfaces directly (from %s)", c.RemoteAddr())
			c.Close()
		}
	}()
	widePort := wide.Addr().(*net.TCPAddr).Port
	host := nonLoopback(t)
	for _, mode := range []providers.NetworkMode{providers.NetworkNone, providers.NetworkAll, providers.NetworkAllowlist} {
		pol := providers.NetworkPolicy{Mode: mode}
		if mode == providers.NetworkAllowlist {
			pol.AllowHosts = []string{"127.0.0.1", host}
		}
		sb := e.create(providers.CreateSpec{Network: pol})
		if out := e.sh(sb.ID, "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '"); out != "lo\n" {
			t.Errorf("%s: interfaces %q, want only lo", mode, out)
		}
		for _, target := range []string{
			e.fixture.Addr(), // allowed, but only through the proxy
			fmt.Sprintf("%s:%d", host, widePort),
			"169.254.169.254:80",
			"1.1.1.1:443",
		} {
			h, p, _ := net.SplitHostPort(target)
			script := fmt.Sprintf(`timeout 5 bash -c 'echo x > /dev/tcp/%s/%s' 2>/dev/null && echo connected || echo blocked`, h, p)
			if out := strings.TrimSpace(e.sh(sb.ID, script)); out != "blocked" {
				t.Errorf("%s: a direct connection to %s: %s", mode, target, out)
			}
		}
		proxyVar := strings.TrimSpace(e.sh(sb.ID, `echo "$HTTPS_PROXY"`))
		if mode == providers.NetworkNone && proxyVar != "" {
			t.Errorf("network none: HTTPS_PROXY is %q", proxyVar)
		}
		if mode != providers.NetworkNone && proxyVar != egressURL {
			t.Errorf("%s: HTTPS_PROXY is %q, want %s", mode, proxyVar, egressURL)
		}
	}
	if n := len(e.fixture.Got("/")); n != 0 {
		t.Errorf("the fixture got %d direct requests", n)
	}
}

// TestNetworkPolicyThroughTheProxy is the boundary through the one way
// out: the fixture in allow_private is reachable, nothing else of this
// machine is, directly, through a name that resolves to 127.0.0.1 or
// through a redirect from the fixture; and "none" has no way out at all.
func TestNetworkPolicyThroughTheProxy(t *testing.T) {
	e := newNetEnv(t, nil)
	api := testhttp.Start(t, testhttp.Options{}) // stands for the API and DynamoDB Local: any service on the host's loopback
	host := nonLoopback(t)
	wide, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer wide.Close()
	wideHits := 0
	var wideMu sync.Mutex
	go http.Serve(wide, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wideMu.Lock()
		wideHits++
		wideMu.Unlock()
	}))
	widePort := wide.Addr().(*net.TCPAddr).Port

	for _, mode := range []providers.NetworkMode{providers.NetworkAll, providers.NetworkAllowlist, providers.NetworkNone} {
		t.Run(string(mode), func(t *testing.T) {
			pol := providers.NetworkPolicy{Mode: mode}
			if mode == providers.NetworkAllowlist {
				// Every target below is listed: only the private-address
				// rule can stop them.
				pol.AllowHosts = []string{"127.0.0.1", "fixture.test", "evil.test", "169.254.169.254", host}
			}
			sb := e.create(providers.CreateSpec{Network: pol})
			proxy := "--noproxy '' "
			if mode == providers.NetworkNone {
				// No variables: name the address the proxy would have.
				proxy = "-x " + egressURL + " --noproxy '' "
			}
			ok := "200"
			denied := func(reason string) string { return "403 " + reason }
			if mode == providers.NetworkNone {
				ok = "fail"
				denied = func(string) string { return "fail" }
			}
			for _, c := range []struct{ what, url, want string }{
				{"the fixture", "http://" + e.fixture.Addr() + "/fixture", ok},
				{"the fixture by name", "http://fixture.test:" + e.fixture.Port() + "/byname", ok},
				{"a loopback service", api.URL + "/direct", denied(egress.ReasonPrivate)},
				{"a loopback service through a name", "http://evil.test:" + api.Port() + "/name", denied(egress.ReasonPrivate)},
				{"the metadata service", "http://169.254.169.254/latest/meta-data/", denied(egress.ReasonPrivate)},
				{"the host's own address", fmt.Sprintf("http://%s:%d/wide", host, widePort), denied(egress.ReasonHostAddress)},
				{"a redirect from the fixture to a loopback service", "-L '" + e.fixture.URL + "/hop?to=" + url.QueryEscape(api.URL+"/redirected") + "'", denied(egress.ReasonPrivate)},
				{"a redirect from the fixture to the metadata service", "-L '" + e.fixture.URL + "/hop2?to=" + url.QueryEscape("http://169.254.169.254/") + "'", denied(egress.ReasonPrivate)},
				{"TLS to a loopback service", "https://127.0.0.1:" + api.Port() + "/tls", "fail"},
			} {
				if got := e.curl(sb.ID, proxy+c.url); got != c.want {
					t.Errorf("%s: %s, want %s", c.what, got, c.want)
				}
			}
		})
	}
	for _, path := range []string{"/direct", "/name", "/redirected", "/tls"} {
		if n := len(api.Got(path)); n != 0 {
			t.Errorf("the loopback service got %d requests for %s", n, path)
		}
	}
	wideMu.Lock()
	defer wideMu.Unlock()
	if wideHits != 0 {
		t.Errorf("the service on all interfaces got %d requests", wideHits)
	}
}

// TestNetworkAllowlist: exactly the listed hosts, wildcards and ports
// included.
func TestNetworkAllowlist(t *testing.T) {
	other := testhttp.Start(t, testhttp.Options{})
	e := newNetEnv(t, nil)
	e.p.mu.Lock()
	e.p.defaults.AllowPrivate = []string{"127.0.0.1"}
	e.p.mu.Unlock()
	sb := e.create(providers.CreateSpec{Network: providers.NetworkPolicy{Mode: providers.NetworkAllowlist,
		AllowHosts: []string{"*.wild.test", "exact.test:" + e.fixture.Port()}}})
	notAllowed := "403 " + egress.ReasonNotAllowed
	for _, c := range []struct{ url, want string }{
		{"http://a.wild.test:" + e.fixture.Port() + "/1", "200"},
		{"http://b.c.wild.test:" + other.Port() + "/2", "200"},
		{"http://wild.test:" + e.fixture.Port() + "/3", notAllowed},
		{"http://exact.test:" + e.fixture.Port() + "/4", "200"},
		{"http://exact.test:" + other.Port() + "/5", notAllowed},
		{"http://other.test:" + e.fixture.Port() + "/6", notAllowed},
		{"http://127.0.0.1:" + e.fixture.Port() + "/7", notAllowed},
		{"https://other.test:" + other.Port() + "/8", "fail"}, // CONNECT refused
	} {
		if got := e.curl(sb.ID, "--noproxy '' "+c.url); got != c.want {
			t.Errorf("%s: %s, want %s", c.url, got, c.want)
		}
	}
	for _, p := range []string{"/3", "/5", "/6", "/7", "/8"} {
		if len(e.fixture.Got(p))+len(other.Got(p)) != 0 {
			t.Errorf("%s arrived although the allowlist does not admit it", p)
		}
	}
	// An invalid allowlist is the caller's error.
	_, err := e.p.Create(e.ctx, providers.CreateSpec{Network: providers.NetworkPolicy{Mode: providers.NetworkAllowlist, AllowHosts: []string{"https://x/"}}})
	wantCode(t, "Create with a malformed allowlist", err, providers.InvalidArgument)
	_, err = e.p.Create(e.ctx, providers.CreateSpec{Network: providers.NetworkPolicy{Mode: "bogus"}})
	wantCode(t, "Create with an unknown network mode", err, providers.InvalidArgument)
}

// TestNetworkSurvivesPluginRestart: the agent keeps the listener, so the
// next plugin process serves the way out again, and the counters go on.
func TestNetworkSurvivesPluginRestart(t *testing.T) {
	e := newNetEnv(t, nil)
	sb := e.create(providers.CreateSpec{Network: providers.NetworkPolicy{Mode: providers.NetworkAll}})
	fetch := "--noproxy '' http://" + e.fixture.Addr() + "/"
	if got := e.curl(sb.ID, fetch+"one"); got != "200" {
		t.Fatalf("before the restart: %s", got)
	}
	before, err := e.p.Get(e.ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	e.p.Close()
	// While no plugin runs, a client waits in the listen queue.
	p2 := e.newProvider()
	e.p = p2
	if got := e.curl(sb.ID, fetch+"two"); got != "200" {
		t.Fatalf("after the restart: %s", got)
	}
	after, err := p2.Get(e.ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("usage before %+v, after %+v", before.Network, after.Network)
	if before.Network.Connections != 1 || after.Network.Connections != 2 || after.Network.BytesIn <= before.Network.BytesIn ||
		len(after.Network.Hosts) != 1 || after.Network.Hosts[0] != e.fixture.Addr() {
		t.Errorf("usage before %+v, after %+v: want one connection more, and the fixture as the host", before.Network, after.Network)
	}
}

// TestHostScopedSecrets: the sandbox sees a placeholder; requests to the
// secret's host carry the value, over TLS the proxy terminates with the
// sandbox's CA; requests elsewhere carry the placeholder.
func TestHostScopedSecrets(t *testing.T) {
	scoped := testhttp.Start(t, testhttp.Options{TLS: true}) // httptest's certificate is for example.com
	other := testhttp.Start(t, testhttp.Options{})
	caFile := filepath.Join(t.TempDir(), "upstream.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: scoped.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	const value = "sk-live-9f2c4e1a77b3d05e"
	e := newNetEnv(t, func(ls *Settings) { ls.UpstreamCAFiles = []string{caFile} })
	e.p.mu.Lock()
	e.p.defaults.AllowPrivate = []string{scoped.Addr(), other.Addr()}
	e.p.mu.Unlock()
	sb := e.create(providers.CreateSpec{
		Network: providers.NetworkPolicy{Mode: providers.NetworkAll},
		Secrets: []providers.Secret{
			{Name: "API_KEY", Value: value, Hosts: []string{"example.com"}},
			{Name: "PLAIN_TOKEN", Value: "plain-visible-value"},
		},
	})
	env := e.sh(sb.ID, "env")
	placeholder := ""
	for _, l := range lines(env) {
		if v, ok := strings.CutPrefix(l, "API_KEY="); ok {
			placeholder = v
		}
	}
	if !strings.HasPrefix(placeholder, egress.PlaceholderPrefix) {
		t.Fatalf("API_KEY in the sandbox is %q, want a placeholder", placeholder)
	}
	if !strings.Contains(env, "PLAIN_TOKEN=plain-visible-value") {
		t.Errorf("a secret without hosts is not a plain variable")
	}
	b64 := e.sh(sb.ID, "env | base64 -w0; echo; cat /proc/self/environ | base64 -w0")
	for _, l := range lines(b64) {
		raw, _ := base64.StdEncoding.DecodeString(l)
		if strings.Contains(string(raw), value) {
			t.Errorf("the secret's value is in the sandbox's environment")
		}
	}
	if out := e.sh(sb.ID, "grep -rl "+value+" /etc /tmp /home /workspace 2>/dev/null; true"); strings.TrimSpace(out) != "" {
		t.Errorf("the secret's value is in files of the sandbox: %s", out)
	}

	// curl, with the system bundle the sandbox trusts, and Python's
	// standard library, which honours the proxy variables too.
	scopedURL := "https://example.com:" + scoped.Port()
	e.sh(sb.ID, `curl -sS --fail -o /dev/null -H "Authorization: Bearer $API_KEY" `+scopedURL+`/curl`)
	e.sh(sb.ID, `U=`+scopedURL+`/python python3 -c 'import os, urllib.request as u; u.urlopen(u.Request(os.environ["U"], headers={"X-Api-Key": os.environ["API_KEY"]})).read()'`)
	// Another host gets the placeholder, over plain HTTP as over a tunnel.
	e.sh(sb.ID, `curl -sS --fail -o /dev/null --noproxy '' -H "Authorization: Bearer $API_KEY" http://`+other.Addr()+`/other`)
	for _, c := range []struct {
		svc          *testhttp.Recorder
		path, header string
		want         string
	}{
		{scoped, "/curl", "Authorization", "Bearer " + value},
		{scoped, "/python", "X-Api-Key", value},
		{other, "/other", "Authorization", "Bearer " + placeholder},
	} {
		if n, got := len(c.svc.Got(c.path)), c.svc.Header(c.path, c.header); n != 1 || got != c.want {
			t.Errorf("%s: %d requests, %s %q, want %q", c.path, n, c.header, got, c.want)
		}
	}
	// The bundle is copied in, not bound from the state dir: its mount
	// names no host path.
	bundle := strings.TrimSpace(e.sh(sb.ID, "grep ' /etc/ssl/certs/ca-certificates.crt ' /proc/self/mountinfo"))
	if bundle == "" || strings.Contains(bundle, e.dir) || strings.Contains(bundle, stageDir) {
		t.Errorf("the bundle's mount: %q", bundle)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "sandboxes", sb.ID, egressFile)); err != nil {
		t.Errorf("no egress state beside the sandbox: %v", err)
	} else if fi, _ := os.Stat(filepath.Join(e.dir, "sandboxes", sb.ID, egressFile)); fi.Mode().Perm() != 0o600 {
		t.Errorf("the egress state (with the CA key) has mode %v", fi.Mode().Perm())
	}
}
