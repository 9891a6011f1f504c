package localstack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/crawler/spec"
	"github.com/sandstep/sandstep/internal/testkit/apitest"
	"github.com/sandstep/sandstep/internal/testkit/fixturesite"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
	"github.com/sandstep/sandstep/internal/testkit/testdns"
	"github.com/sandstep/sandstep/providers"
)

// controlPlane is what no sandbox may reach: the real API (the stack's
// handler, counting the requests that arrive), DynamoDB Local, a service
// on every interface reached by this machine's own address, and the cloud
// metadata address.
type controlPlane struct {
	api      *httptest.Server
	ddb      string // host:port
	wide     string // host:port, this machine's non-loopback address
	mu       sync.Mutex
	apiHits  []string
	wideHits int
}

func newControlPlane(t *testing.T, s *stack) *controlPlane {
	t.Helper()
	cp := &controlPlane{}
	validated := apitest.Validate(t, s.Handler)
	cp.api = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cp.mu.Lock()
		cp.apiHits = append(cp.apiHits, r.URL.Path)
		cp.mu.Unlock()
		validated.ServeHTTP(w, r)
	}))
	t.Cleanup(cp.api.Close)
	inst, err := testddb.Shared()
	if err != nil {
		t.Fatal(err)
	}
	cp.ddb = strings.TrimPrefix(inst.Endpoint(), "http://")
	host := ""
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			host = n.IP.String()
			break
		}
	}
	if host == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("no non-loopback IPv4 address on this machine")
		}
		t.Skip("no non-loopback IPv4 address on this machine")
	}
	wide, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	go http.Serve(wide, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		cp.mu.Lock()
		cp.wideHits++
		cp.mu.Unlock()
	}))
	t.Cleanup(func() { wide.Close() })
	cp.wide = fmt.Sprintf("%s:%d", host, wide.Addr().(*net.TCPAddr).Port)
	return cp
}

func (cp *controlPlane) port(hostport string) string {
	_, p, _ := net.SplitHostPort(hostport)
	return p
}

func (cp *controlPlane) noHits(t *testing.T) {
	t.Helper()
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if len(cp.apiHits) != 0 || cp.wideHits != 0 {
		t.Errorf("the control plane was reached from a sandbox: API %v, the service on every interface %d times", cp.apiHits, cp.wideHits)
	}
}

// shOut runs a shell command in a sandbox and returns its trimmed stdout.
func shOut(t *testing.T, p providers.Provider, id, script string) string {
	t.Helper()
	var out, errb bytes.Buffer
	res, err := p.Exec(context.Background(), id, providers.ExecRequest{Shell: script, Stdout: &out, Stderr: &errb, Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exec %q exited %d: %s", script, res.ExitCode, errb.String())
	}
	return strings.TrimSpace(out.String())
}

// TestSandboxBoundary: from sandboxes with network all, allowlist and
// none, the API, DynamoDB Local, this machine's other addresses and the
// metadata service are out of reach: directly, through the proxy, through
// a redirect from an allowed page and through a name that resolves to
// 127.0.0.1. The fixture site in allow_private is reachable (except from
// none), and the crawler in the sandbox skips every blocked URL with
// reason "policy".
func TestSandboxBoundary(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{Hosts: 1})
	alpha := site.Hosts[0]
	dns := testdns.Start(t, map[string][]string{"evil.test": {"127.0.0.1"}, "meta.test": {"169.254.169.254"}, "fixture.test": {"127.0.0.1"}})
	s := newStackWith(t, stackOpts{allowPrivate: site.AllowPrivate(), dnsServers: []string{dns.Addr()}})
	cp := newControlPlane(t, s)
	apiAddr := strings.TrimPrefix(cp.api.URL, "http://")
	targets := map[string]string{
		"the API":                  apiAddr,
		"DynamoDB Local":           cp.ddb,
		"this machine's address":   cp.wide,
		"the metadata service":     "169.254.169.254:80",
		"the API by a name":        "evil.test:" + cp.port(apiAddr),
		"DynamoDB Local by a name": "evil.test:" + cp.port(cp.ddb),
		"the metadata by a name":   "meta.test:80",
	}
	ctx := context.Background()
	for _, mode := range []providers.NetworkMode{providers.NetworkAll, providers.NetworkAllowlist, providers.NetworkNone} {
		t.Run(string(mode), func(t *testing.T) {
			pol := providers.NetworkPolicy{Mode: mode}
			if mode == providers.NetworkAllowlist {
				// Everything is listed: only the private-address rule
				// stands between the sandbox and the control plane.
				pol.AllowHosts = []string{"127.0.0.1", "evil.test", "meta.test", "fixture.test", "169.254.169.254", strings.Split(cp.wide, ":")[0]}
			}
			sb, err := s.Provider.Create(ctx, providers.CreateSpec{Network: pol, Lifetime: 5 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Provider.Terminate(ctx, sb.ID)
			// none has no proxy variables: name the address one would have.
			proxy := "--noproxy ''"
			wantDenied, wantOK := "403", "200"
			if mode == providers.NetworkNone {
				proxy = "-x http://127.0.0.1:3128 --noproxy ''"
				wantDenied, wantOK = "000", "000"
			}
			curl := func(u string) string {
				return shOut(t, s.Provider, sb.ID, fmt.Sprintf(`curl -s -o /dev/null -m 10 -L -w '%%{http_code}' %s '%s'; true`, proxy, u))
			}
			for what, target := range targets {
				h, p, _ := net.SplitHostPort(target)
				direct := shOut(t, s.Provider, sb.ID, fmt.Sprintf(`timeout 5 bash -c 'echo x > /dev/tcp/%s/%s' 2>/dev/null && echo connected || echo blocked`, h, p))
				if direct != "blocked" {
					t.Errorf("%s directly (%s): %s", what, target, direct)
				}
				if got := curl("http://" + target + "/through-proxy"); got != wantDenied {
					t.Errorf("%s through the proxy (%s): %s, want %s", what, target, got, wantDenied)
				}
				if got := curl(alpha.RedirectTo("http://" + target + "/redirected")); got != wantDenied {
					t.Errorf("%s through a redirect from the fixture (%s): %s, want %s", what, target, got, wantDenied)
				}
			}
			if got := curl(alpha.Page("/a")); got != wantOK {
				t.Errorf("the fixture in allow_private: %s, want %s", got, wantOK)
			}
			if got := curl("http://fixture.test:" + cp.port(strings.TrimPrefix(alpha.URL, "http://")) + "/b"); got != wantOK {
				t.Errorf("the fixture by a name: %s, want %s", got, wantOK)
			}
			if mode != providers.NetworkAll {
				return
			}
			// The crawler, as a research job runs it.
			in := spec.Input{Render: spec.RenderNever, AllowPrivate: site.AllowPrivate(),
				Limits:  spec.Limits{MaxPagesPerHost: 20, MaxDurationMS: 60000},
				Sources: []spec.Source{{N: 1, URL: alpha.Page("/c")}}}
			for _, target := range targets {
				in.Sources = append(in.Sources, spec.Source{N: len(in.Sources) + 1, URL: "http://" + target + "/crawled"})
			}
			in.Sources = append(in.Sources, spec.Source{N: len(in.Sources) + 1, URL: alpha.RedirectTo(cp.api.URL + "/v1/jobs")})
			data, _ := json.Marshal(in)
			if err := s.Provider.WriteFile(ctx, sb.ID, providers.WriteFileRequest{Path: "/tmp/in.json", Content: bytes.NewReader(data)}); err != nil {
				t.Fatal(err)
			}
			shOut(t, s.Provider, sb.ID, "/opt/sandstep/tools/sandstep-crawler --input /tmp/in.json --output /tmp/out.json > /dev/null")
			var out spec.Output
			if err := json.Unmarshal([]byte(shOut(t, s.Provider, sb.ID, "cat /tmp/out.json")), &out); err != nil {
				t.Fatal(err)
			}
			if len(out.Pages) != 1 || out.Pages[0].URL != alpha.Page("/c") {
				t.Errorf("crawled %v, want only the fixture page", out.Pages)
			}
			policy := 0
			for _, sk := range out.Skipped {
				if sk.Reason == spec.ReasonPolicy && sk.Address != "" {
					policy++
				} else {
					t.Errorf("skipped %+v, want reason %q with the address", sk, spec.ReasonPolicy)
				}
			}
			if policy != len(targets)+1 {
				t.Errorf("%d URLs skipped for the policy, want %d: %+v", policy, len(targets)+1, out.Skipped)
			}
			got, err := s.Provider.Get(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Network.Denied == 0 || got.Network.Connections == 0 {
				t.Errorf("network usage %+v", got.Network)
			}
			for _, h := range got.Network.Hosts {
				if h != strings.TrimPrefix(alpha.URL, "http://") && !strings.HasPrefix(h, "fixture.test:") {
					t.Errorf("the sandbox contacted %s", h)
				}
			}
		})
	}
	cp.noHits(t)
}

// TestResearchSkipsPrivateSeeds: seed URLs on private addresses are taken
// by the API but never fetched; the job's results list them as denied by
// the network policy, with the address, and the report cites none.
func TestResearchSkipsPrivateSeeds(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{Hosts: 1})
	alpha := site.Hosts[0]
	s := newStackWith(t, stackOpts{config: "[research]\nrender = \"never\"\n", allowPrivate: site.AllowPrivate()})
	cp := newControlPlane(t, s)
	private := []string{
		cp.api.URL + "/v1/jobs",
		"http://" + cp.ddb + "/",
		"http://169.254.169.254/latest/meta-data/iam/security-credentials/",
		"http://" + cp.wide + "/",
		alpha.RedirectTo(cp.api.URL + "/v1/providers"),
	}
	id := "job-private-seeds"
	s.research(t, id, "light", "speed", append([]string{alpha.Page("/a")}, private...))
	code, rep := s.do(t, "GET", "/v1/jobs/"+id+"/report", nil)
	if code != http.StatusOK {
		t.Fatalf("report: %d %v", code, rep)
	}
	denied := map[string]string{}
	for _, nu := range rep["not_used"].([]any) {
		m := nu.(map[string]any)
		if m["reason"] == spec.ReasonPolicy {
			denied[fmt.Sprint(m["url"])] = fmt.Sprint(m["message"])
		}
	}
	for _, u := range private {
		if msg, ok := denied[u]; !ok {
			t.Errorf("%s is not in not_used with reason %q", u, spec.ReasonPolicy)
		} else if !strings.Contains(msg, "egress denied") {
			t.Errorf("%s: not_used message %q does not say why", u, msg)
		}
	}
	for _, src := range rep["sources"].([]any) {
		if u := fmt.Sprint(src.(map[string]any)["url"]); slices.Contains(private, u) {
			t.Errorf("%s is among the report's sources", u)
		}
	}
	msg := ""
	for _, e := range s.events(t, id) {
		if m := fmt.Sprint(e["message"]); strings.HasPrefix(m, "not fetched, by the sandbox's network policy") {
			msg = m
		}
	}
	for _, want := range []string{"169.254.169.254:80", cp.ddb, cp.wide} {
		if !strings.Contains(msg, want) {
			t.Errorf("the crawl:denied event %q lacks %s", msg, want)
		}
	}
	cp.noHits(t)
	s.noLiveSandboxes(t, id)
}
