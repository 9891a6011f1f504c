package sessions_test

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sandstep/sandstep/internal/testkit/fakedeno"
	"github.com/sandstep/sandstep/internal/testkit/testbin"
)

// denoTokenEnv holds the token of the fake Deno the deno stacks use; it
// is set for the whole test process (TestMain), as parallel tests cannot
// set variables of their own.
const (
	denoTokenEnv = "SANDSTEP_TEST_DENO_TOKEN"
	denoToken    = "ddo_sessions_test_61f0c2a9"
)

// startDeno serves a fake Deno for one test. Deno runs 5 sandboxes per
// organisation unless it raises the limit; the 10 concurrent first runs
// of the snapshot test need more, as such an organisation would: 0 means
// 16.
func startDeno(t testing.TB, hosts map[string]string, maxSandboxes int) *fakedeno.Running {
	t.Helper()
	need(t, "bwrap", "the fake Deno runs commands with bubblewrap (Debian package bubblewrap)")
	if maxSandboxes == 0 {
		maxSandboxes = 16
	}
	opts := fakedeno.Options{Token: denoToken, MaxSandboxes: maxSandboxes, Hosts: hosts}
	if root, err := testbin.Root(); err == nil {
		if p := filepath.Join(root, testbin.DenoPath); fileExistsHere(p) {
			opts.DenoPath = p
		}
	}
	f, err := fakedeno.Start(opts, "", "")
	if errors.Is(err, fakedeno.ErrNoBubblewrap) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Errorf("closing the fake Deno: %v", err)
		}
	})
	return f
}

func fileExistsHere(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// with is base with the fields extra sets: strings appended, the rest
// replaced.
func with(base, extra envConfig) envConfig {
	base.sessions += "\n" + extra.sessions
	base.deps += extra.deps
	base.sandbox += "\n" + extra.sandbox
	base.local += "\n" + extra.local
	if extra.dir != "" {
		base.dir = extra.dir
	}
	if extra.db != nil {
		base.db = extra.db
	}
	if extra.deno != nil {
		base.deno = extra.deno
	}
	return base
}

// TestOnDeno runs the sessions' must-shows with provider "deno" against
// the fake Deno: the same tests as on "local", a one-line provider swap.
func TestOnDeno(t *testing.T) {
	for name, body := range map[string]func(*testing.T, envConfig){
		"WorkspaceOutlivesIdleSandbox":        workspaceOutlivesIdleSandbox,
		"CleanupDeletesExactlyTheExpired":     cleanupDeletesExactlyTheExpired,
		"CleanupNeverDeletesARunningSession":  cleanupNeverDeletesARunningSession,
		"RunOnASessionBeingDeleted":           runOnASessionBeingDeleted,
		"TypeScript":                          typeScript,
		"SnapshotBuiltOnceAndReused":          snapshotBuiltOnceAndReused,
		"ChangedDependenciesLeaveOneSnapshot": changedDependenciesLeaveOneSnapshot,
	} {
		t.Run(name, func(t *testing.T) {
			// Each has its own fake Deno and stack; together they are a
			// third of the package's time, which parallel runs halve.
			t.Parallel()
			// Session sandboxes outlive the stack on Deno, as they outlive
			// a Lambda invocation: the fake's Close stops them.
			body(t, envConfig{deno: startDeno(t, nil, 0)})
		})
	}
}

// TestSecretScopedToItsHostOnDeno: on Deno a dependency's secret with
// hosts is a Deno secret. The sandbox's environment and the run's output
// show only the placeholder; the fake's egress proxy puts the value into
// the request to the secret's host, and a request to another host carries
// the placeholder. Neither logs nor events carry the value.
func TestSecretScopedToItsHostOnDeno(t *testing.T) {
	need(t, "curl", "the runs call the fixture APIs with curl")
	var mu sync.Mutex
	seen := map[string][]string{}
	record := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen[name] = append(seen[name], r.Header.Get("Authorization"))
			mu.Unlock()
			fmt.Fprintln(w, "ok")
		})
	}
	api := httptest.NewServer(record("api"))
	defer api.Close()
	other := httptest.NewServer(record("other"))
	defer other.Close()
	_, apiPort, _ := net.SplitHostPort(api.Listener.Addr().String())
	_, otherPort, _ := net.SplitHostPort(other.Listener.Addr().String())
	f := startDeno(t, map[string]string{"api.example.test": api.Listener.Addr().String(), "other.example.test": other.Listener.Addr().String()}, 0)

	secret := "sk-deno-scoped-" + strings.Repeat("7c", 8)
	t.Setenv("SANDSTEP_TEST_SECRET", secret)
	pkg := fixturePackage(t, "sandstep-fixture-a")
	e := newEnv(t, envConfig{
		deno:    f,
		sandbox: "network = \"all\"",
		deps:    fmt.Sprintf("[[sessions.dependencies]]\npackage = %q\nsecret_env = \"SANDSTEP_TEST_SECRET\"\nhosts = [\"api.example.test\"]\n", pkg),
	})
	// The environment comes out reversed: the service redacts the value
	// from what runs print, so only a form it does not know shows whether
	// the sandbox holds the value at all.
	rev := func(s string) string {
		r := []rune(s)
		slices.Reverse(r)
		return string(r)
	}
	env := rev(wantOK(t, e.run(tokenAcme, "scoped", "shell", "env | rev")))
	if !strings.Contains(env, "SANDSTEP_TEST_SECRET=DENO_SECRET_PLACEHOLDER_") || strings.Contains(env, secret) {
		t.Fatalf("the sandbox's environment holds the value or no Deno placeholder:\n%s", env)
	}
	call := `curl -s -H "Authorization: Bearer $SANDSTEP_TEST_SECRET" http://%s:%s/`
	runs := []map[string]any{
		e.run(tokenAcme, "scoped", "shell", fmt.Sprintf(call, "api.example.test", apiPort)),
		e.run(tokenAcme, "scoped", "shell", fmt.Sprintf(call, "other.example.test", otherPort)),
		e.run(tokenAcme, "scoped", "javascript", "Deno.env.get('SANDSTEP_TEST_SECRET').split('').reverse().join('')"),
	}
	for _, r := range runs {
		wantOK(t, r)
		if b := toJSON(t, r); strings.Contains(string(b), secret) || strings.Contains(string(b), "[REDACTED:") {
			t.Errorf("a run's answer carries the value (or had it redacted): %s", b)
		}
	}
	if v, _ := runs[2]["result"].(string); !strings.HasPrefix(rev(v), "DENO_SECRET_PLACEHOLDER_") {
		t.Errorf("code reads the variable as %q, want the placeholder", rev(v))
	}
	mu.Lock()
	apiSaw, otherSaw := seen["api"], seen["other"]
	mu.Unlock()
	if len(apiSaw) != 1 || apiSaw[0] != "Bearer "+secret {
		t.Errorf("the secret's host saw %q, want the value", apiSaw)
	}
	if len(otherSaw) != 1 || !strings.HasPrefix(otherSaw[0], "Bearer DENO_SECRET_PLACEHOLDER_") {
		t.Errorf("another host saw %q, want the placeholder", otherSaw)
	}
	var substituted []string
	for _, eg := range f.EgressLog() {
		substituted = append(substituted, fmt.Sprintf("%s:%s", eg.Host, strings.Join(eg.Substituted, ",")))
		if eg.Refused {
			t.Errorf("the fake's proxy refused %s", eg.Host)
		}
	}
	if want := "api.example.test:" + apiPort + ":SANDSTEP_TEST_SECRET"; len(substituted) != 2 || substituted[0] != want || substituted[1] != "other.example.test:"+otherPort+":" {
		t.Errorf("the fake's proxy recorded %q, want the value put in for the secret's host only", substituted)
	}
	if strings.Contains(e.logs.String(), secret) {
		t.Errorf("the secret's value is in the logs")
	}
	if r := e.do(http.MethodGet, "/v1/sessions/scoped/events", tokenAcme, nil); strings.Contains(string(r.body), secret) {
		t.Errorf("the secret's value is in the events")
	}
}
