package direct_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstep/sandstep/client"
	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/emulation/localstack"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/apitest"
	"github.com/sandstep/sandstep/internal/testkit/testbin"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
	"github.com/sandstep/sandstep/internal/testkit/testdns"
	"github.com/sandstep/sandstep/internal/testkit/testlog"
	"github.com/sandstep/sandstep/providers"
)

// pluginDir holds the local provider plugin; toolsDir is every test
// sandbox's tools_dir, with the Python client in python/ as make
// sandbox-tools puts it.
var pluginDir, toolsDir string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sandstep-direct-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if pluginDir, err = testbin.Build(filepath.Join(dir, "plugins"), testbin.LocalPlugin, testbin.CLI); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	toolsDir = filepath.Join(dir, "tools")
	if err := os.MkdirAll(filepath.Join(toolsDir, "python"), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	src, err := os.ReadFile("../../../clients/python/sandstep.py")
	if err == nil {
		err = os.WriteFile(filepath.Join(toolsDir, "python", "sandstep.py"), src, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return testddb.RunTests(m)
}

// Test tenants and their tokens.
const (
	tokenAcme   = "acme-token-2b7c1e9d5a3f4c8e"
	tokenGlobex = "globex-token-9d1f3a7c5e2b4d6f"
)

func hashOf(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// testClock is the stack's clock of lifetimes, limits and idleness: the
// real time plus an offset the test moves.
type testClock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

// env is a local stack (DynamoDB Local, the local provider) serving the
// API on 127.0.0.1, where sandboxes reach it as sandstep.test through their
// way out.
type env struct {
	t     testing.TB
	stack *localstack.Stack
	url   string // as the test reaches it
	inner string // as sandboxes reach it
	st    *store.Store
	clock *testClock
	logs  *testlog.Buffer
	srv   *http.Server
}

func need(t testing.TB, tool, why string) {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing: %s", tool, why)
		}
		t.Skipf("%s is missing: %s", tool, why)
	}
}

func newEnv(t testing.TB, sandboxes string) *env {
	t.Helper()
	need(t, "bwrap", "the local provider runs sandboxes with bubblewrap (Debian package bubblewrap)")
	db := testddb.ForTests(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	dns := testdns.Start(t, map[string][]string{"sandstep.test": {"127.0.0.1"}})
	inner := "http://sandstep.test:" + strconv.Itoa(port)
	roPaths, _ := json.Marshal([]string{"/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc/alternatives", "/etc/ssl/certs", "/etc/ca-certificates"})
	cfgText := fmt.Sprintf(`
[server]
data_dir = %q
[provider]
name = "local"
plugin_dir = %q
[provider.local]
ro_paths = %s
tools_dir = %q
dns_servers = [%q]
[sandbox]
lifetime = "10m"
network = "all"
allow_private = ["127.0.0.1:%d"]
[auth]
dev_token_env = ""
[[auth.tokens]]
tenant = "acme"
sha256 = %q
[[auth.tokens]]
tenant = "globex"
sha256 = %q
[sandboxes]
api_url = %q
%s
`, t.TempDir(), pluginDir, roPaths, toolsDir, dns.Addr(), port, hashOf(tokenAcme), hashOf(tokenGlobex), inner, sandboxes)
	cfg, err := config.Parse([]byte(cfgText), "config.toml", "../../..")
	if err != nil {
		t.Fatal(err)
	}
	logs := &testlog.Buffer{}
	st := store.New(db.Client, db.Prefix)
	clock := &testClock{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := localstack.Start(ctx, localstack.Options{
		Config: cfg, Template: "../../../template.yaml", Store: st, ReaperInterval: -1, Now: clock.Now,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	// Every answer a test gets is checked against openapi.json.
	srv := &http.Server{Handler: apitest.Validate(t, s.Handler)}
	go srv.Serve(ln)
	e := &env{t: t, stack: s, url: "http://127.0.0.1:" + strconv.Itoa(port), inner: inner, st: st, clock: clock, logs: logs, srv: srv}
	t.Cleanup(e.close)
	return e
}

func (e *env) close() {
	e.srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.stack.Shutdown(ctx); err != nil {
		e.t.Errorf("shutdown: %v", err)
	}
}

func (e *env) client(token string) *client.Client { return client.New(e.url, token, nil) }

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// response is a finished HTTP exchange.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("response %d is not a JSON object: %v\n%s", r.status, err, r.body)
	}
	return m
}

func (e *env) do(method, path, token string, body any) response {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, _ := json.Marshal(b)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctxFor(e.t), method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return response{status: res.StatusCode, header: res.Header, body: b}
}

// liveSandboxes counts the sandboxes the provider runs for this stack.
func (e *env) liveSandboxes() int {
	e.t.Helper()
	list, err := e.stack.Provider.List(ctxFor(e.t), providersFilter())
	if err != nil {
		e.t.Fatal(err)
	}
	return len(list)
}

func providersFilter() providers.ListFilter {
	return providers.ListFilter{Labels: map[string]string{providers.LabelOwner: "sandstep"}}
}
