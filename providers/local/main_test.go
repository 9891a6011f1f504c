package local

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/testkit/testbin"
	"github.com/sandstep/sandstep/providers"
)

// The test binary is also the sandbox agent: sandboxes started by the tests
// run it with a role argument.
func TestMain(m *testing.M) {
	RunSandboxRole()
	code := m.Run()
	if agentDir != "" {
		os.RemoveAll(agentDir)
	}
	os.Exit(code)
}

// envAgent is the dedicated agent newEnv's providers use ("" = the test
// binary); see useDedicatedAgent.
var envAgent string

// agentDir holds the agent buildAgent built, removed by TestMain.
var agentDir string

var buildAgent = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "sandstep-agent-")
	if err != nil {
		return "", err
	}
	agentDir = dir
	if _, err := testbin.Build(dir, testbin.LocalAgent); err != nil {
		return "", err
	}
	return filepath.Join(dir, testbin.LocalAgent), nil
})

// useDedicatedAgent builds cmd/sandstep-local-agent (once per test binary)
// and makes the providers newEnv configures until t ends use it, as the
// plugin does in production: the benchmarks measure the real start.
func useDedicatedAgent(t testing.TB) string {
	t.Helper()
	path, err := buildAgent()
	if err != nil {
		t.Fatalf("building the agent: %v", err)
	}
	envAgent = path
	t.Cleanup(func() { envAgent = "" })
	return path
}

// requireBwrap skips without bubblewrap, and fails under CI=true.
func requireBwrap(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("bubblewrap is not installed (Debian package bubblewrap): %v", err)
		}
		t.Skipf("bubblewrap is not installed (Debian package bubblewrap): %v", err)
	}
}

type testEnv struct {
	t        testing.TB
	p        *Provider
	agent    string // the dedicated agent binary, "" for the test binary
	dir      string
	ctx      context.Context
	extra    Settings
	defaults providers.SandboxDefaults
}

// newEnv configures a provider on a fresh state_dir. A state_dir below the
// test's own temp dir proves that it need not be reachable by sandbox uids.
func newEnv(t testing.TB, mod func(*Settings)) *testEnv {
	t.Helper()
	return newEnvDefaults(t, mod, nil)
}

// newEnvDefaults is newEnv with sandbox defaults changed by dmod.
func newEnvDefaults(t testing.TB, mod func(*Settings), dmod func(*providers.SandboxDefaults)) *testEnv {
	t.Helper()
	requireBwrap(t)
	// A uid range of its own, so that counting a sandbox's host processes
	// by uid sees no other test's (or other program's) sandboxes.
	ls := DefaultSettings()
	ls.StateDir, ls.UIDRangeStart, ls.UIDRangeSize = t.TempDir(), 2_010_000_000+rand.IntN(1_000_000)*64, 64
	if mod != nil {
		mod(&ls)
	}
	e := &testEnv{t: t, dir: ls.StateDir, ctx: context.Background(), extra: ls, agent: envAgent,
		defaults: providers.SandboxDefaults{Lifetime: 10 * time.Minute, ExecTimeout: time.Minute}}
	if dmod != nil {
		dmod(&e.defaults)
	}
	p, err := e.configure()
	if err != nil {
		// The probe's verdict: bwrap is there but cannot make a sandbox
		// (no user namespaces, say).
		if providers.CodeOf(err) == providers.FailedPrecondition && os.Getenv("CI") != "true" {
			t.Skipf("no sandboxes on this machine: %v", err)
		}
		t.Fatalf("Configure: %v", err)
	}
	e.p = p
	t.Cleanup(func() {
		sbs, _ := e.p.List(context.Background(), providers.ListFilter{})
		for _, sb := range sbs {
			_ = e.p.Terminate(context.Background(), sb.ID)
		}
		e.p.Close()
	})
	return e
}

// newProvider is another plugin process on the same state_dir.
func (e *testEnv) newProvider() *Provider {
	e.t.Helper()
	p, err := e.configure()
	if err != nil {
		e.t.Fatalf("Configure: %v", err)
	}
	return p
}

func (e *testEnv) configure() (*Provider, error) {
	b, err := json.Marshal(e.extra)
	if err != nil {
		return nil, err
	}
	p := New()
	// Else the test binary is the agent (TestMain): no dedicated agent
	// lies next to it.
	p.agentBinary = e.agent
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return p, p.Configure(ctx, providers.Config{
		Settings: b,
		Defaults: e.defaults,
	})
}

func (e *testEnv) create(spec providers.CreateSpec) providers.Sandbox {
	e.t.Helper()
	sb, err := e.p.Create(e.ctx, spec)
	if err != nil {
		e.t.Fatalf("Create: %v", err)
	}
	return sb
}

type execOut struct {
	providers.ExecResult
	stdout, stderr string
}

func (e *testEnv) exec(id string, req providers.ExecRequest) execOut {
	e.t.Helper()
	var out, errb bytes.Buffer
	req.Stdout, req.Stderr = &out, &errb
	res, err := e.p.Exec(e.ctx, id, req)
	if err != nil {
		e.t.Fatalf("Exec(%q %q): %v", req.Argv, req.Shell, err)
	}
	return execOut{res, out.String(), errb.String()}
}

// sh runs a shell command that must succeed and returns its stdout.
func (e *testEnv) sh(id, script string) string {
	e.t.Helper()
	r := e.exec(id, providers.ExecRequest{Shell: script})
	if r.ExitCode != 0 {
		e.t.Fatalf("%q exited %d (signal %q, timed out %v); stderr: %s", script, r.ExitCode, r.Signal, r.TimedOut, r.stderr)
	}
	return r.stdout
}

func (e *testEnv) write(id, path string, content []byte) {
	e.t.Helper()
	if err := e.p.WriteFile(e.ctx, id, providers.WriteFileRequest{Path: path, Content: bytes.NewReader(content)}); err != nil {
		e.t.Fatalf("WriteFile(%s): %v", path, err)
	}
}

func (e *testEnv) read(id string, req providers.ReadFileRequest) []byte {
	e.t.Helper()
	var buf bytes.Buffer
	n, err := e.p.ReadFile(e.ctx, id, req, &buf)
	if err != nil {
		e.t.Fatalf("ReadFile(%s): %v", req.Path, err)
	}
	if n != int64(buf.Len()) {
		e.t.Errorf("ReadFile(%s) reported %d bytes, wrote %d", req.Path, n, buf.Len())
	}
	return buf.Bytes()
}

func wantCode(t testing.TB, what string, err error, code providers.Code) {
	t.Helper()
	if got := providers.CodeOf(err); got != code {
		t.Errorf("%s: error %v (code %s), want code %s", what, err, got, code)
	}
}

// lines splits output into trimmed non-empty lines.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func dirNames(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// worldReadableDir is a host directory every uid could read, were it not
// for the sandbox's mount namespace (t.TempDir's parent is private).
func worldReadableDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sandstep-host-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
