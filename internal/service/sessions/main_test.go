package sessions_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/emulation/localstack"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/apitest"
	"github.com/sandstep/sandstep/internal/testkit/fakedeno"
	"github.com/sandstep/sandstep/internal/testkit/testbin"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
	"github.com/sandstep/sandstep/internal/testkit/testlog"
	"github.com/sandstep/sandstep/providers"
)

// pluginDir holds the local provider plugin, built once for the package.
var pluginDir string

// toolsDir is every test sandbox's tools_dir: it holds Deno, as make build
// puts it in bin/sandbox, when make deps installed it.
var (
	toolsDir  string
	toolsOnce sync.Once
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sandstep-sessions-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	toolsDir = filepath.Join(dir, "tools")
	os.Setenv(denoTokenEnv, denoToken)
	if pluginDir, err = testbin.Build(filepath.Join(dir, "plugins"), testbin.LocalPlugin, testbin.DenoPlugin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Sandboxes bring their own /tmp, so what they read from the host
	// lives elsewhere.
	fixtures, err := os.MkdirTemp("/var/tmp", "sandstep-sessions-fixtures-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(fixtures)
	fixtureDir = fixtures
	return testddb.RunTests(m)
}

// need fails under CI=true, and skips otherwise, when a tool is missing.
func need(t testing.TB, tool, why string) {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing: %s", tool, why)
		}
		t.Skipf("%s is missing: %s", tool, why)
	}
}

// Test tenants and their tokens.
const (
	tokenAcme   = "acme-token-5b1f0a6d2c9e7b31"
	tokenGlobex = "globex-token-8d6a42c1e0b7f3a9"
)

func hashOf(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// fixtureDir holds npm packages the tests install offline: the sandboxes
// see it read-only, so that npm can read the tarballs from it.
var (
	fixtureDir  string
	fixtureOnce sync.Once
	fixtureErr  error
)

// fixturePackage returns a "file:" spec of an npm tarball holding a
// package named name that exports {answer: 42}.
func fixturePackage(t testing.TB, name string) string {
	t.Helper()
	need(t, "npm", "the dependency tests install a local npm package")
	fixtureOnce.Do(func() { fixtureErr = os.Chmod(fixtureDir, 0o755) })
	if fixtureErr != nil {
		t.Fatal(fixtureErr)
	}
	tgz := filepath.Join(fixtureDir, name+"-1.0.0.tgz")
	if _, err := os.Stat(tgz); err == nil {
		return "file:" + tgz
	}
	src := t.TempDir()
	pkg, _ := json.Marshal(map[string]string{"name": name, "version": "1.0.0", "main": "index.js"})
	if err := os.WriteFile(filepath.Join(src, "package.json"), pkg, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "index.js"), []byte("module.exports = { answer: 42 };\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("npm", "pack", "--pack-destination", fixtureDir)
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm pack: %v\n%s", err, out)
	}
	return "file:" + tgz
}

// env is a local stack with sessions enabled behind an HTTP server on
// 127.0.0.1, over tables of the test's own.
type env struct {
	t     testing.TB
	stack *localstack.Stack
	srv   *httptest.Server
	db    *testddb.TestEnv
	st    *store.Store
	logs  *testlog.Buffer
	dir   string
	cfg   *config.Config
}

// envConfig is what a test may change of the stack's configuration.
type envConfig struct {
	// sessions is appended to [sessions] (enabled = true is set).
	sessions string
	// deps are [[sessions.dependencies]] tables.
	deps string
	// dir is the data dir; "" makes a new one. A second stack on the same
	// dir sees the first one's snapshots and volumes.
	dir string
	// db reuses another env's tables.
	db *testddb.TestEnv
	// sandbox and local are appended to [sandbox] and [provider.local].
	sandbox, local string
	// deno, when set, makes the stack's provider "deno" against this fake
	// (startDeno) instead of "local".
	deno *fakedeno.Running
	// deployment is [provider] deployment ("" for the default).
	deployment string
}

func newEnv(t testing.TB, ec envConfig) *env {
	t.Helper()
	need(t, "bwrap", "the local provider runs sandboxes with bubblewrap (Debian package bubblewrap)")
	if ec.db == nil {
		ec.db = testddb.ForTests(t)
	}
	if ec.dir == "" {
		ec.dir = t.TempDir()
	}
	if !strings.Contains(ec.sessions, "sync_wait") {
		// Long enough that no run of a loaded machine answers 202 unless
		// the test wants it to.
		ec.sessions += "\nsync_wait = \"25s\""
	}
	roPaths, _ := json.Marshal(append([]string{"/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc/alternatives", "/etc/ssl/certs", "/etc/ca-certificates"}, fixtureDir))
	toolsOnce.Do(func() { testbin.LinkDeno(t, toolsDir) })
	provider := "local"
	if ec.deno != nil {
		provider = "deno"
		ec.local += fmt.Sprintf("\n[provider.deno]\ntoken_env = %q\nconsole_url = %q\nsandbox_url = %q\n", denoTokenEnv, ec.deno.ConsoleURL, ec.deno.SandboxURL)
	}
	if ec.deployment != "" {
		ec.deployment = fmt.Sprintf("deployment = %q", ec.deployment)
	}
	cfgText := fmt.Sprintf(`
[server]
data_dir = %q
[provider]
name = %q
plugin_dir = %q
%s
[provider.local]
ro_paths = %s
tools_dir = %q
%s
[sandbox]
lifetime = "10m"
%s
[auth]
dev_token_env = ""
[[auth.tokens]]
tenant = "acme"
sha256 = %q
[[auth.tokens]]
tenant = "globex"
sha256 = %q
[sessions]
enabled = true
%s
%s
`, ec.dir, provider, pluginDir, ec.deployment, roPaths, toolsDir, ec.local, ec.sandbox, hashOf(tokenAcme), hashOf(tokenGlobex), ec.sessions, ec.deps)
	cfg, err := config.Parse([]byte(cfgText), "config.toml", "../../..")
	if err != nil {
		t.Fatal(err)
	}
	logs := &testlog.Buffer{}
	st := store.New(ec.db.Client, ec.db.Prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := localstack.Start(ctx, localstack.Options{
		Config:         cfg,
		Template:       "../../../template.yaml",
		Store:          st,
		ReaperInterval: -1,
		Logger:         slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, stack: s, srv: httptest.NewServer(apitest.Validate(t, s.Handler)), db: ec.db, st: st, logs: logs, dir: ec.dir, cfg: cfg}
	t.Cleanup(e.close)
	return e
}

// close stops the stack; it may be called before the test ends.
func (e *env) close() {
	if e.stack == nil {
		return
	}
	e.srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.stack.Shutdown(ctx); err != nil {
		e.t.Errorf("shutdown: %v", err)
	}
	e.stack = nil
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
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
	default:
		raw, _ := json.Marshal(b)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctxFor(e.t), method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := e.srv.Client().Do(req)
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

// run posts code and returns the finished run; it fails the test on
// anything but 200, or 202 and then the finished run.
func (e *env) run(token, sid, language, code string) map[string]any {
	e.t.Helper()
	return e.finished(token, sid, e.do(http.MethodPost, "/v1/sessions/"+sid+"/run", token, map[string]any{"code": code, "language": language}))
}

// finished returns the run a POST .../run answered: at once (200), or,
// when it outlasted sync_wait (202: a session's first sandbox on a loaded
// machine), by polling it as a client would, for at most three minutes.
func (e *env) finished(token, sid string, r response) map[string]any {
	e.t.Helper()
	if r.status == http.StatusAccepted {
		run := r.json(e.t)
		id, _ := run["run_id"].(string)
		for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
			r = e.do(http.MethodGet, "/v1/sessions/"+sid+"/runs/"+id, token, nil)
			if r.status != http.StatusOK || r.json(e.t)["status"] != "running" {
				break
			}
		}
	}
	if r.status != http.StatusOK {
		e.t.Fatalf("run in %s: %d %s", sid, r.status, r.body)
	}
	return r.json(e.t)
}

// wantOK asserts a run succeeded and returns its stdout.
func wantOK(t testing.TB, run map[string]any) string {
	t.Helper()
	if run["success"] != true || run["status"] != "succeeded" {
		t.Fatalf("run failed: %v", run)
	}
	out, _ := run["stdout"].(string)
	return out
}

// wantError asserts an error response: status, code and field.
func wantError(t testing.TB, r response, status int, code, field string) string {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	e, _ := r.json(t)["error"].(map[string]any)
	gotField, _ := e["field"].(string)
	if e["code"] != code || gotField != field {
		t.Fatalf("error = %v, want code %q field %q", e, code, field)
	}
	msg, _ := e["message"].(string)
	if msg == "" {
		t.Fatalf("error without a message: %v", e)
	}
	return msg
}

// events returns the types of a session's events.
func (e *env) events(token, sid string) []string {
	e.t.Helper()
	r := e.do(http.MethodGet, "/v1/sessions/"+sid+"/events", token, nil)
	if r.status != http.StatusOK {
		e.t.Fatalf("events of %s: %d %s", sid, r.status, r.body)
	}
	var v struct {
		Events []struct {
			Type string `json:"type"`
		} `json:"events"`
	}
	if err := json.Unmarshal(r.body, &v); err != nil {
		e.t.Fatal(err)
	}
	var types []string
	for _, ev := range v.Events {
		types = append(types, ev.Type)
	}
	return types
}

// session reads a session over HTTP.
func (e *env) session(token, sid string) map[string]any {
	e.t.Helper()
	r := e.do(http.MethodGet, "/v1/sessions/"+sid, token, nil)
	if r.status != http.StatusOK {
		e.t.Fatalf("get %s: %d %s", sid, r.status, r.body)
	}
	return r.json(e.t)
}

// liveSandboxes lists the provider's live sandboxes of ours.
func (e *env) liveSandboxes() []providers.Sandbox {
	e.t.Helper()
	list, err := e.stack.Provider.List(ctxFor(e.t), providers.ListFilter{Labels: map[string]string{providers.LabelOwner: "sandstep"}})
	if err != nil {
		e.t.Fatal(err)
	}
	return list
}

// liveEntries lists the ledger's live entries.
func (e *env) liveEntries() []store.LedgerEntry {
	e.t.Helper()
	live, err := e.st.LedgerListLive(ctxFor(e.t), time.Now().AddDate(1, 0, 0), 0)
	if err != nil {
		e.t.Fatal(err)
	}
	return live
}

// toJSON re-encodes a decoded JSON value, for comparing results as text.
func toJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
