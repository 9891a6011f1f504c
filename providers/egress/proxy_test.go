package egress

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/testkit/testdns"
	"github.com/sandstep/sandstep/internal/testkit/testhttp"
	"github.com/sandstep/sandstep/providers"
)

// hostAddr returns a non-loopback address of this machine, or "" when it
// has none.
func hostAddr(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

// proxyFor serves a session on 127.0.0.1 and returns its URL.
func proxyFor(t *testing.T, p *Proxy, s *Session) *url.URL {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.Serve(ln); err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.Close()
		<-done
	})
	return &url.URL{Scheme: "http", Host: ln.Addr().String()}
}

func client(proxy *url.URL, roots *x509.CertPool) *http.Client {
	return &http.Client{
		Transport: &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: roots}},
		Timeout:   20 * time.Second,
	}
}

// outcome fetches u through the proxy and describes what came back:
// "200", or the denial's reason and range.
func outcome(t *testing.T, c *http.Client, u string) string {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		if strings.Contains(err.Error(), "Forbidden") {
			return "403 (CONNECT)"
		}
		return "error: " + err.Error()
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if d, ok := ParseDenied(resp.Header.Get(DeniedHeader)); ok {
		return fmt.Sprintf("%d %s %s", resp.StatusCode, d.Reason, d.Range)
	}
	return fmt.Sprint(resp.StatusCode)
}

func testProxy(t *testing.T, dns *testdns.Server, roots *x509.CertPool) *Proxy {
	t.Helper()
	r, err := NewResolver([]string{dns.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	return &Proxy{Resolver: r, RootCAs: roots, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// TestProxyDeniesThePrivateAndTheHost is the boundary: through the proxy, a
// sandbox reaches the fixture that allow_private lists and nothing else of
// this machine or its private networks, directly, through a redirect from
// an allowed page, or through a name that resolves to 127.0.0.1.
func TestProxyDeniesThePrivateAndTheHost(t *testing.T) {
	fixture := testhttp.Start(t, testhttp.Options{})
	api := testhttp.Start(t, testhttp.Options{}) // stands for the API, DynamoDB Local, any service on loopback
	dns := testdns.Start(t, map[string][]string{
		"fixture.test":  {"127.0.0.1"},
		"evil.test":     {"127.0.0.1"},
		"mixed.test":    {"93.184.215.14", "127.0.0.1"},
		"metadata.test": {"169.254.169.254"},
	})
	allowPrivate := []string{"127.0.0.1:" + fixture.Port()}

	// A service on every interface, reached through the host's own
	// non-loopback address.
	wide, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer wide.Close()
	go http.Serve(wide, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "wide") }))
	widePort := wide.Addr().(*net.TCPAddr).Port

	for _, mode := range []providers.NetworkMode{providers.NetworkAll, providers.NetworkAllowlist, providers.NetworkNone} {
		t.Run(string(mode), func(t *testing.T) {
			var hosts []string
			if mode == providers.NetworkAllowlist {
				// The fixture, and everything the attacks below name: the
				// allowlist must not be what stops them.
				hosts = []string{"127.0.0.1", "127.0.0.2", "fixture.test", "evil.test", "mixed.test", "metadata.test", "169.254.169.254", "[fd00:ec2::254]"}
				if a := hostAddr(t); a != "" {
					hosts = append(hosts, a)
				}
			}
			pol, err := NewPolicy(mode, hosts, allowPrivate)
			if err != nil {
				t.Fatal(err)
			}
			p := testProxy(t, dns, nil)
			u := &Usage{}
			c := client(proxyFor(t, p, p.Session("sbx-test", pol, nil, nil, u)), nil)

			wantOK := "200"
			private := func(rng string) string { return "403 " + ReasonPrivate + " " + rng }
			hostDenied := "403 " + ReasonHostAddress + " host"
			if mode == providers.NetworkNone {
				wantOK = "403 " + ReasonNoNetwork + " "
				private = func(string) string { return "403 " + ReasonNoNetwork + " " }
				hostDenied = wantOK
			}
			cases := []struct{ what, url, want string }{
				{"the fixture in allow_private", fixture.URL + "/page", wantOK},
				{"the fixture by a name", "http://fixture.test:" + fixture.Port() + "/byname", wantOK},
				{"a loopback service", api.URL + "/direct", private("loopback")},
				{"a loopback service through a name", "http://evil.test:" + api.Port() + "/name", private("loopback")},
				{"a name with a public and a loopback address", "http://mixed.test:" + api.Port() + "/mixed", private("loopback")},
				{"loopback as an IPv4-mapped IPv6 address", "http://[::ffff:127.0.0.1]:" + api.Port() + "/mapped", private("loopback")},
				{"another loopback address", "http://127.0.0.2:" + fixture.Port() + "/other", private("loopback")},
				{"the metadata service", "http://169.254.169.254/latest/meta-data/", private("link-local")},
				{"the metadata service by a name", "http://metadata.test/latest/", private("link-local")},
				{"the IPv6 metadata service", "http://[fd00:ec2::254]/latest/", private("unique-local")},
				{"a redirect from the fixture to a loopback service", fixture.URL + "/redirect?to=" + url.QueryEscape(api.URL+"/redirected"), private("loopback")},
				{"a redirect to the metadata service", fixture.URL + "/redirect2?to=" + url.QueryEscape("http://169.254.169.254/"), private("link-local")},
			}
			if a := hostAddr(t); a != "" {
				cases = append(cases, struct{ what, url, want string }{"the host's own address", fmt.Sprintf("http://%s:%d/", a, widePort), hostDenied})
			} else if os.Getenv("CI") == "true" {
				t.Error("this machine has no non-loopback IPv4 address to test with")
			}
			for _, c2 := range cases {
				if got := outcome(t, c, c2.url); got != c2.want {
					t.Errorf("%s (%s): %s, want %s", c2.what, c2.url, got, c2.want)
				}
			}
			for _, path := range []string{"/direct", "/name", "/mixed", "/mapped", "/redirected"} {
				if len(api.Got(path)) != 0 {
					t.Errorf("the loopback service got %s", path)
				}
			}
			if len(fixture.Got("/other")) != 0 {
				t.Errorf("127.0.0.2 reached the fixture although only 127.0.0.1:%s is allowed", fixture.Port())
			}
			// CONNECT is held to the same rules.
			if got := outcome(t, c, "https://127.0.0.1:"+api.Port()+"/tls"); got != "403 (CONNECT)" {
				t.Errorf("CONNECT to a loopback service: %s", got)
			}
			snap := u.Snapshot()
			if snap.Denied == 0 {
				t.Errorf("usage counted no denials: %+v", snap)
			}
			if mode != providers.NetworkNone && (snap.BytesIn == 0 || snap.BytesOut == 0 || len(snap.Hosts) == 0) {
				t.Errorf("usage after allowed requests: %+v", snap)
			}
		})
	}
}

func TestProxyAllowlist(t *testing.T) {
	a := testhttp.Start(t, testhttp.Options{})
	b := testhttp.Start(t, testhttp.Options{})
	dns := testdns.Start(t, map[string][]string{"*.wild.test": {"127.0.0.1"}, "wild.test": {"127.0.0.1"}, "exact.test": {"127.0.0.1"}, "other.test": {"127.0.0.1"}})
	pol, err := NewPolicy(providers.NetworkAllowlist,
		[]string{"*.wild.test", "exact.test:" + a.Port()},
		[]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	p := testProxy(t, dns, nil)
	c := client(proxyFor(t, p, p.Session("sbx-allow", pol, nil, nil, nil)), nil)
	notAllowed := "403 " + ReasonNotAllowed + " "
	for _, tc := range []struct{ url, want string }{
		{"http://x.wild.test:" + a.Port() + "/1", "200"},
		{"http://deep.er.wild.test:" + b.Port() + "/2", "200"},
		{"http://wild.test:" + a.Port() + "/3", notAllowed}, // the wildcard is for subdomains only
		{"http://exact.test:" + a.Port() + "/4", "200"},
		{"http://exact.test:" + b.Port() + "/5", notAllowed}, // another port
		{"http://other.test:" + a.Port() + "/6", notAllowed},
		{"http://127.0.0.1:" + a.Port() + "/7", notAllowed}, // the address is not the name
		{"http://x.wild.test.evil:" + a.Port() + "/8", notAllowed},
	} {
		if got := outcome(t, c, tc.url); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.url, got, tc.want)
		}
	}
	for _, path := range []string{"/3", "/5", "/6", "/7", "/8"} {
		if len(a.Got(path))+len(b.Got(path)) != 0 {
			t.Errorf("a denied request arrived: %s", path)
		}
	}
}

func TestProxyHostScopedSecrets(t *testing.T) {
	plain := testhttp.Start(t, testhttp.Options{})
	secure := testhttp.Start(t, testhttp.Options{TLS: true})
	other := testhttp.Start(t, testhttp.Options{TLS: true})
	// httptest's certificate is for example.com: the proxy verifies the
	// upstream under that name.
	dns := testdns.Start(t, map[string][]string{"example.com": {"127.0.0.1"}, "plain.test": {"127.0.0.1"}, "other.example.com": {"127.0.0.1"}})
	upstreamRoots := x509.NewCertPool()
	upstreamRoots.AddCert(secure.Certificate())
	upstreamRoots.AddCert(other.Certificate())

	secret, err := NewSecret("API_KEY", "real-value-1234", []string{"example.com", "plain.test"})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := NewCA("sbx-secrets", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	pol, _ := NewPolicy(providers.NetworkAll, nil, []string{"127.0.0.1"})
	p := testProxy(t, dns, upstreamRoots)
	u := &Usage{}
	proxyURL := proxyFor(t, p, p.Session("sbx-secrets", pol, []Secret{secret}, ca, u))

	// The sandbox trusts its CA (and, for the tunnel to the other host,
	// that host's own certificate: no interception there).
	sandboxRoots := x509.NewCertPool()
	sandboxRoots.AppendCertsFromPEM(ca.CertPEM())
	sandboxRoots.AddCert(other.Certificate())
	c := client(proxyURL, sandboxRoots)

	get := func(u string, h map[string]string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", u, nil)
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	ph := secret.Placeholder
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("user:"+ph))

	// HTTPS to the scoped host: terminated with the sandbox's CA, the real
	// value in the headers upstream.
	resp := get("https://example.com:"+secure.Port()+"/scoped", map[string]string{"Authorization": "Bearer " + ph, "X-Api-Key": ph, "Proxy-Basic": basic})
	if resp.TLS == nil || resp.TLS.PeerCertificates[0].Issuer.CommonName != "sandstep sandbox sbx-secrets" {
		t.Errorf("the scoped host's certificate was not issued by the sandbox CA")
	}
	if got := secure.Header("/scoped", "Authorization"); got != "Bearer real-value-1234" {
		t.Errorf("Authorization upstream %q, want the real value", got)
	}
	if got := secure.Header("/scoped", "X-Api-Key"); got != "real-value-1234" {
		t.Errorf("X-Api-Key upstream %q", got)
	}
	// Plain HTTP to a scoped host, with the placeholder as a Basic password.
	get("http://plain.test:"+plain.Port()+"/basic", map[string]string{"Authorization": basic})
	if rs := plain.Got("/basic"); len(rs) != 1 {
		t.Fatal("the plain request did not arrive")
	} else if user, pass, ok := rs[0].BasicAuth(); !ok || user != "user" || pass != "real-value-1234" {
		t.Errorf("Basic credentials upstream %q %q %v", user, pass, ok)
	}
	// Another host: a plain tunnel, the placeholder unchanged.
	resp = get("https://other.example.com:"+other.Port()+"/elsewhere", map[string]string{"Authorization": "Bearer " + ph})
	if !resp.TLS.PeerCertificates[0].Equal(other.Certificate()) {
		t.Errorf("the tunnel to another host was intercepted")
	}
	if got := other.Header("/elsewhere", "Authorization"); got != "Bearer "+ph {
		t.Errorf("another host got %q, want the placeholder", got)
	}
	// A redirect does not carry the value anywhere: the client sends the
	// placeholder, and only the scoped host sees it replaced.
	get("http://plain.test:"+plain.Port()+"/hop?to="+url.QueryEscape("https://other.example.com:"+other.Port()+"/after"), map[string]string{"X-Key": ph})
	if got := other.Header("/after", "X-Key"); got != ph {
		t.Errorf("after a redirect another host got %q", got)
	}
	snap := u.Snapshot()
	for _, want := range []string{"example.com:" + secure.Port(), "other.example.com:" + other.Port(), "plain.test:" + plain.Port()} {
		if !strings.Contains(strings.Join(snap.Hosts, " "), want) {
			t.Errorf("usage hosts %v lack %s", snap.Hosts, want)
		}
	}
}

// TestProxyTunnel checks CONNECT for a protocol other than HTTP and the
// byte counts.
func TestProxyTunnel(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	dns := testdns.Start(t, nil)
	pol, _ := NewPolicy(providers.NetworkAll, nil, []string{echo.Addr().String()})
	p := testProxy(t, dns, nil)
	u := &Usage{}
	pu := proxyFor(t, p, p.Session("sbx-tunnel", pol, nil, nil, u))
	c, err := net.Dial("tcp", pu.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The first bytes of the tunnel travel with the CONNECT.
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %[1]s\r\n\r\nearly ", echo.Addr())
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	io.WriteString(c, "bytes")
	c.(*net.TCPConn).CloseWrite()
	got, _ := io.ReadAll(br)
	if string(got) != "early bytes" {
		t.Errorf("echo through the tunnel: %q", got)
	}
	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for u.Snapshot().BytesIn < 11 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if s := u.Snapshot(); s.BytesOut != 11 || s.BytesIn != 11 || s.Connections != 1 {
		t.Errorf("usage %+v, want 11 bytes each way over 1 connection", s)
	}
}

func TestProxyRefusesOriginForm(t *testing.T) {
	dns := testdns.Start(t, nil)
	pol, _ := NewPolicy(providers.NetworkAll, nil, nil)
	p := testProxy(t, dns, nil)
	pu := proxyFor(t, p, p.Session("sbx-origin", pol, nil, nil, nil))
	resp, err := http.Get(pu.String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("an origin-form request got %d", resp.StatusCode)
	}
}
