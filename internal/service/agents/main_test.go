package agents_test

import (
	"bufio"
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
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/emulation/asl"
	"github.com/sandstep/sandstep/internal/emulation/localstack"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/apitest"
	"github.com/sandstep/sandstep/internal/testkit/testbin"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
	"github.com/sandstep/sandstep/internal/testkit/testdns"
	"github.com/sandstep/sandstep/internal/testkit/testhttp"
	"github.com/sandstep/sandstep/internal/testkit/testlog"
	"github.com/sandstep/sandstep/providers"
)

// pluginDir holds the local provider plugin; toolsDir is mounted in every
// test sandbox at /opt/sandstep/tools, on PATH: the Python client in
// python/, and the fake agent CLI, claude.
var pluginDir, toolsDir string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sandstep-agents-test-")
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
	for _, d := range []string{"python"} {
		if err := os.MkdirAll(filepath.Join(toolsDir, d), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	src, err := os.ReadFile("../../../clients/python/sandstep.py")
	if err == nil {
		err = os.WriteFile(filepath.Join(toolsDir, "python", "sandstep.py"), src, 0o644)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(toolsDir, "claude"), []byte(fakeClaude), 0o755)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return testddb.RunTests(m)
}

const (
	tokenAcme = "acme-token-2b7c1e9d5a3f4c8e"
	// modelKey is the real key: only the model server may ever see it.
	modelKey = "sk-ant-test-4f1b9c2e7d3a8b6f0e5c"
)

func hashOf(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// modelServer is an Anthropic-compatible Messages API on 127.0.0.1 that
// records the key of every request, the usage it reported, and the bytes
// it received.
type modelServer struct {
	url   string
	mu    sync.Mutex
	keys  []string
	usage modelUsage
	ln    *testhttp.CountingListener
}

// modelUsage is what the model reported, summed over its answers.
type modelUsage struct{ input, output, cacheRead, cacheWrite int64 }

// Each answer's usage, as Anthropic's API reports it.
const (
	answerInput      = 12
	answerOutput     = 9
	answerCacheRead  = 2048
	answerCacheWrite = 512
)

func startModel(t *testing.T) *modelServer {
	m := &modelServer{}
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := testhttp.Count(plain)
	m.ln = ln
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model    string `json:"model"`
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" || json.NewDecoder(r.Body).Decode(&req) != nil || len(req.Messages) == 0 {
			http.Error(w, `{"type":"error","error":{"type":"invalid_request_error"}}`, http.StatusBadRequest)
			return
		}
		m.mu.Lock()
		m.keys = append(m.keys, r.Header.Get("x-api-key"))
		m.mu.Unlock()
		if r.Header.Get("x-api-key") != modelKey {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		m.mu.Lock()
		m.usage.input += answerInput
		m.usage.output += answerOutput
		m.usage.cacheRead += answerCacheRead
		m.usage.cacheWrite += answerCacheWrite
		m.mu.Unlock()
		json.NewEncoder(w).Encode(map[string]any{
			"id": "msg_1", "type": "message", "role": "assistant", "model": req.Model, "stop_reason": "end_turn",
			"content": []map[string]string{{"type": "text", "text": "Kestrels hover by facing into the wind. (" + strconv.Itoa(len(req.Messages[0].Content)) + " chars read)"}},
			"usage": map[string]int{"input_tokens": answerInput, "output_tokens": answerOutput,
				"cache_read_input_tokens": answerCacheRead, "cache_creation_input_tokens": answerCacheWrite},
		})
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	m.url = "http://" + ln.Addr().String()
	return m
}

func (m *modelServer) seen() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.keys...)
}

func (m *modelServer) reported() modelUsage {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.usage
}

// env is a local stack (DynamoDB Local, the local provider, both state
// machines) serving the API on 127.0.0.1, which sandboxes reach as
// sandstep.test, with the agent "claude" configured on the fake CLI.
type env struct {
	t     testing.TB
	stack *localstack.Stack
	url   string
	st    *store.Store
	model *modelServer
	logs  *testlog.Buffer
	// inner is the API as the sandboxes reach it (sandstep.test): its own
	// listener, which counts the bytes they sent and their exec requests.
	inner      *testhttp.CountingListener
	innerExecs atomic.Int64
}

// envOpts vary newEnvWith.
type envOpts struct {
	// config is more TOML.
	config string
	// wrap wraps the engines' invoker (faults, deliveries).
	wrap func(asl.Invoker) asl.Invoker
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

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, envOpts{})
}

func newEnvWith(t *testing.T, o envOpts) *env {
	t.Helper()
	need(t, "bwrap", "the local provider runs sandboxes with bubblewrap (Debian package bubblewrap)")
	need(t, "python3", "the fake agent and the Python client run in the sandbox (Debian package python3)")
	t.Setenv("TEST_MODEL_KEY", modelKey)
	db := testddb.ForTests(t)
	model := startModel(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	innerLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	innerPort := innerLn.Addr().(*net.TCPAddr).Port
	// The model is reached by a name, as api.anthropic.com would be: the
	// sandbox's own 127.0.0.1 is its own.
	dns := testdns.Start(t, map[string][]string{"sandstep.test": {"127.0.0.1"}, "model.test": {"127.0.0.1"}})
	inner := "http://sandstep.test:" + strconv.Itoa(innerPort)
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
allow_private = ["127.0.0.1:%d", %q]
[auth]
dev_token_env = ""
[[auth.tokens]]
tenant = "acme"
sha256 = %q
[sandboxes]
api_url = %q
[agents.claude]
command = 'claude -p "$(cat "$SANDSTEP_PROMPT_FILE")" --output-format stream-json --verbose'
setup = 'command -v claude'
output = "stream-json"
key_env = "TEST_MODEL_KEY"
key_var = "ANTHROPIC_API_KEY"
key_hosts = ["model.test"]
env = { ANTHROPIC_BASE_URL = %q }
`, t.TempDir(), pluginDir, roPaths, toolsDir, dns.Addr(), innerPort, strings.TrimPrefix(model.url, "http://"), hashOf(tokenAcme), inner, strings.Replace(model.url, "127.0.0.1", "model.test", 1)) + o.config
	cfg, err := config.Parse([]byte(cfgText), "config.toml", "../../..")
	if err != nil {
		t.Fatal(err)
	}
	logs := &testlog.Buffer{}
	st := store.New(db.Client, db.Prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := localstack.Start(ctx, localstack.Options{
		Config: cfg, Template: "../../../template.yaml", Store: st, ReaperInterval: -1,
		CancelGrace: 20 * time.Second, AgentSlice: 2 * time.Second, WrapInvoker: o.wrap,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: apitest.Validate(t, s.Handler)}
	go srv.Serve(ln)
	e := &env{t: t, stack: s, url: "http://127.0.0.1:" + strconv.Itoa(port), st: st, model: model, logs: logs, inner: testhttp.Count(innerLn)}
	innerSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/exec") {
			e.innerExecs.Add(1)
		}
		srv.Handler.ServeHTTP(w, r)
	})}
	go innerSrv.Serve(e.inner)
	t.Cleanup(func() {
		innerSrv.Close()
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if strings.Contains(logs.String(), modelKey) {
			t.Error("the model key is in the server's logs")
		}
	})
	return e
}

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

func (e *env) do(method, path string, body any) response {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tokenAcme)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return response{status: res.StatusCode, header: res.Header, body: b}
}

// event is an event as the API shows it.
type event map[string]any

func (ev event) typ() string { s, _ := ev["type"].(string); return s }

// stream reads the run's events as Server-Sent Events until the end frame,
// calling each for every event as it arrives.
func (e *env) stream(id string, each func(event)) []event {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/v1/agent-runs/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+tokenAcme)
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		b, _ := io.ReadAll(res.Body)
		e.t.Fatalf("events: %d %s", res.StatusCode, b)
	}
	var out []event
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && name == "progress":
			var ev event
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev); err != nil {
				e.t.Fatal(err)
			}
			out = append(out, ev)
			if each != nil {
				each(ev)
			}
		case strings.HasPrefix(line, "data: ") && name == "end":
			return out
		}
	}
	e.t.Fatalf("the event stream ended without an end frame (%v); events: %v", sc.Err(), out)
	return nil
}

// liveSandboxes counts the sandboxes the provider runs for this stack.
func (e *env) liveSandboxes() int {
	e.t.Helper()
	list, err := e.stack.Provider.List(context.Background(), providers.ListFilter{Labels: map[string]string{providers.LabelOwner: "sandstep"}})
	if err != nil {
		e.t.Fatal(err)
	}
	return len(list)
}
