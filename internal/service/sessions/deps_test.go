package sessions_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sandstep/sandstep/internal/service/sessions"
	"github.com/sandstep/sandstep/providers"
)

func depsTable(specs ...string) string {
	var b strings.Builder
	for _, s := range specs {
		fmt.Fprintf(&b, "[[sessions.dependencies]]\npackage = %q\n", s)
	}
	return b.String()
}

// The snapshot of the dependencies is built once for many concurrent
// first runs, reused by a second stack on the same machine, and built
// anew when the dependency list changes.
func TestSnapshotBuiltOnceAndReused(t *testing.T) { snapshotBuiltOnceAndReused(t, envConfig{}) }

func snapshotBuiltOnceAndReused(t *testing.T, ec envConfig) {
	pkgA := fixturePackage(t, "sandstep-fixture-a")
	pkgB := fixturePackage(t, "sandstep-fixture-b")
	dir := t.TempDir()
	e := newEnv(t, with(ec, envConfig{dir: dir, deps: depsTable(pkgA)}))
	slug := e.stack.Sessions.SnapshotSlug()

	const n = 10
	var wg sync.WaitGroup
	results := make([]response, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = e.do(http.MethodPost, fmt.Sprintf("/v1/sessions/first%d/run", i), tokenAcme, map[string]any{
				"language": "javascript", "code": "require('sandstep-fixture-a').answer",
			})
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r.status != http.StatusOK {
			t.Fatalf("run %d: %d %s", i, r.status, r.body)
		}
		if v := r.json(t); v["success"] != true || string(toJSON(t, v["result"])) != "42" {
			t.Fatalf("run %d: %v", i, v)
		}
	}
	if got := e.stack.Sessions.SnapshotBuilds(); got != 1 {
		t.Fatalf("%d snapshot builds for %d concurrent first runs, want 1", got, n)
	}
	snap, err := e.stack.Provider.GetSnapshot(ctxFor(t), slug)
	if err != nil {
		t.Fatal(err)
	}
	if v := e.session(tokenAcme, "first0"); v["snapshot"] != slug || v["dependencies"] != sessions.DepsSnapshot {
		t.Fatalf("session = %v, want snapshot %s", v, slug)
	}
	db := e.db
	e.close()

	// A second start of the same configuration finds the snapshot.
	again := newEnv(t, with(ec, envConfig{dir: dir, db: db, deps: depsTable(pkgA)}))
	if err := again.stack.Sessions.EnsureSnapshot(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	if again.stack.Sessions.SnapshotSlug() != slug || again.stack.Sessions.SnapshotBuilds() != 0 {
		t.Fatalf("second start: slug %s, %d builds; want %s reused", again.stack.Sessions.SnapshotSlug(), again.stack.Sessions.SnapshotBuilds(), slug)
	}
	if same, err := again.stack.Provider.GetSnapshot(ctxFor(t), slug); err != nil || !same.CreatedAt.Equal(snap.CreatedAt) {
		t.Fatalf("snapshot after restart: %+v %v, was built at %v", same, err, snap.CreatedAt)
	}
	wantOK(t, again.run(tokenAcme, "first0", "javascript", "require('sandstep-fixture-a').answer"))
	again.close()

	// Another dependency list is another snapshot.
	changed := newEnv(t, with(ec, envConfig{dir: dir, db: db, deps: depsTable(pkgA, pkgB)}))
	run := changed.run(tokenAcme, "second", "javascript", "require('sandstep-fixture-a').answer + require('sandstep-fixture-b').answer")
	if wantOK(t, run); string(toJSON(t, run["result"])) != "84" {
		t.Fatalf("result = %v", run["result"])
	}
	if got := changed.stack.Sessions.SnapshotSlug(); got == slug || changed.stack.Sessions.SnapshotBuilds() != 1 {
		t.Fatalf("changed list: slug %s (was %s), %d builds; want a new snapshot built once", got, slug, changed.stack.Sessions.SnapshotBuilds())
	}
}

// noSnapshots is the local provider as a provider without snapshots
// would describe itself.
type noSnapshots struct{ providers.Provider }

func (p noSnapshots) Info(ctx context.Context) (providers.Info, error) {
	info, err := p.Provider.Info(ctx)
	info.Capabilities.Snapshots = false
	return info, err
}

// Without snapshots, each sandbox installs the dependencies when it
// starts, and the session says so.
func TestDependenciesInstalledAtStartWithoutSnapshots(t *testing.T) {
	pkg := fixturePackage(t, "sandstep-fixture-a")
	e := newEnv(t, envConfig{deps: depsTable(pkg)})
	svc, err := sessions.New(sessions.Options{
		Config: e.cfg, Store: e.st, Provider: noSnapshots{e.stack.Provider},
		Logger: slog.New(slog.NewJSONHandler(e.logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Shutdown(context.Background()) })
	run, err := svc.Run(ctxFor(t), "acme", "nosnap", sessions.RunRequest{Language: "javascript", Code: "require('sandstep-fixture-a').answer"})
	if err != nil {
		t.Fatal(err)
	}
	if !run.Result.Success || string(run.Result.Result) != "42" {
		t.Fatalf("run = %+v", run.Result)
	}
	v, err := svc.Get(ctxFor(t), "acme", "nosnap")
	if err != nil {
		t.Fatal(err)
	}
	evs, err := svc.Events(ctxFor(t), "acme", "nosnap", 0)
	if err != nil {
		t.Fatal(err)
	}
	started := evs[len(evs)-1]
	if v.Dependencies != sessions.DepsAtStart || v.Snapshot != "" || started.Type != sessions.EventSandboxStarted ||
		!strings.Contains(string(started.Data), `"dependencies":"installed_at_start"`) {
		t.Fatalf("view %+v, last event %s %s", v, started.Type, started.Data)
	}
	if svc.SnapshotBuilds() != 0 {
		t.Fatal("a snapshot was built for a provider without snapshots")
	}
}

// A dependency's secret without hosts reaches the sandbox as its value and
// never comes back: not in output, results, errors, events, run records
// or logs. (With hosts, on this provider, the sandbox only ever sees a
// placeholder: see TestSecretScopedToItsHost.)
func TestSecretsNeverLeak(t *testing.T) {
	pkg := fixturePackage(t, "sandstep-fixture-a")
	raw := make([]byte, 12)
	_, _ = rand.Read(raw)
	secret := "sk-test-" + hex.EncodeToString(raw) + `"\q`
	t.Setenv("SANDSTEP_TEST_SECRET", secret)
	e := newEnv(t, envConfig{deps: fmt.Sprintf("[[sessions.dependencies]]\npackage = %q\nsecret_env = \"SANDSTEP_TEST_SECRET\"\n", pkg)})

	var bodies []string
	for _, c := range []struct{ lang, code string }{
		{"shell", `echo "$SANDSTEP_TEST_SECRET"; echo "key=$SANDSTEP_TEST_SECRET" >&2; exit 3`},
		{"javascript", "console.log(process.env.SANDSTEP_TEST_SECRET);\n({key: process.env.SANDSTEP_TEST_SECRET})"},
		{"javascript", "throw new Error('leaking ' + process.env.SANDSTEP_TEST_SECRET)"},
		{"python", "import os\nprint(os.environ['SANDSTEP_TEST_SECRET'])\nraise ValueError(os.environ['SANDSTEP_TEST_SECRET'])"},
		{"python", "import os\n[os.environ['SANDSTEP_TEST_SECRET']] * 3"},
	} {
		r := e.do(http.MethodPost, "/v1/sessions/secret/run", tokenAcme, map[string]any{"language": c.lang, "code": c.code})
		if r.status != http.StatusOK {
			t.Fatalf("%d %s", r.status, r.body)
		}
		body := string(r.body)
		if !strings.Contains(body, "[REDACTED:SANDSTEP_TEST_SECRET]") {
			t.Errorf("%s run shows no redaction, so the secret did not reach the sandbox: %s", c.lang, body)
		}
		bodies = append(bodies, body)
		run := r.json(t)
		bodies = append(bodies, string(e.do(http.MethodGet, run["links"].(map[string]any)["self"].(string), tokenAcme, nil).body))
	}
	bodies = append(bodies,
		string(e.do(http.MethodGet, "/v1/sessions/secret/events", tokenAcme, nil).body),
		string(e.do(http.MethodGet, "/v1/sessions/secret", tokenAcme, nil).body),
		e.logs.String())
	for _, b := range bodies {
		for _, form := range []string{secret, strings.TrimSuffix(secret, `"\q`), `\"\\q`} {
			if strings.Contains(b, form) {
				t.Fatalf("the secret (%q form) leaked:\n%s", form, b)
			}
		}
	}
	// Nor into the ledger's labels or the session record.
	sess, err := e.st.GetSession(ctxFor(t), sessionKey("acme", "secret"))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := e.st.LedgerListByOwner(ctxFor(t), "session:"+sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(fmt.Sprint(sess, entries), strings.TrimSuffix(secret, `"\q`)) {
		t.Fatal("the secret is in the session's records")
	}
}

// A dependency snapshot that cannot be built says why (the build's last
// lines, credentials redacted) and is not built again for
// snapshot_retry_after; build_env reaches npm.
func TestSnapshotFailureSaysWhyOnce(t *testing.T) {
	// npm reads its registry from this variable; build_env hands it over.
	// The registry refuses connections, and npm is not to retry for a
	// minute first.
	const password = "pw-never-shown-7c1f"
	t.Setenv("NPM_CONFIG_REGISTRY", "http://builder:"+password+"@127.0.0.1:1/")
	t.Setenv("NPM_CONFIG_FETCH_RETRIES", "0")
	buildEnv := `build_env = ["NPM_CONFIG_REGISTRY", "NPM_CONFIG_FETCH_RETRIES"]`
	allow := `allow_private = ["127.0.0.1:1"]`
	deps := depsTable("sandstep-no-such-package@1.0.0")

	e := newEnv(t, envConfig{deps: deps, sandbox: allow, sessions: buildEnv + "\nsnapshot_retry_after = \"1h\""})
	first := e.do(http.MethodPost, "/v1/sessions/b1/run", tokenAcme, map[string]any{"language": "javascript", "code": "1"})
	msg := wantError(t, first, http.StatusServiceUnavailable, "unavailable", "")
	for _, want := range []string{
		"the dependency snapshot " + e.stack.Sessions.SnapshotSlug() + " could not be built",
		"npm error code ECONNREFUSED",
		// npm's own words: the registry of build_env was asked.
		"request to http://builder:***@127.0.0.1:1/sandstep-no-such-package failed",
		// The command as the provider quotes it, the credentials hidden.
		"NPM_CONFIG_REGISTRY='[REDACTED:NPM_CONFIG_REGISTRY]'",
		"runs until",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error lacks %q:\n%s", want, msg)
		}
	}
	if ra, _ := strconv.Atoi(first.header.Get("Retry-After")); ra < 3500 || ra > 3600 {
		t.Errorf("Retry-After = %q, want the hour of snapshot_retry_after", first.header.Get("Retry-After"))
	}
	// The next run, in another session, gets the same answer at once.
	second := e.do(http.MethodPost, "/v1/sessions/b2/run", tokenAcme, map[string]any{"language": "javascript", "code": "1"})
	if again := wantError(t, second, http.StatusServiceUnavailable, "unavailable", ""); !strings.Contains(again, "sandstep-no-such-package") {
		t.Errorf("second run: %s", again)
	}
	if n := e.stack.Sessions.SnapshotBuilds(); n != 1 {
		t.Errorf("%d builds: a failed build must be remembered", n)
	}
	for _, text := range []string{string(first.body), string(second.body), e.logs.String()} {
		if strings.Contains(text, password) {
			t.Fatalf("the registry password leaked:\n%s", text)
		}
	}
	if !strings.Contains(e.logs.String(), "dependency snapshot build failed") {
		t.Error("the failed build was not logged")
	}
	db := e.db
	e.close()

	// With snapshot_retry_after = "0s", every run builds again.
	retry := newEnv(t, envConfig{db: db, deps: deps, sandbox: allow, sessions: buildEnv + "\nsnapshot_retry_after = \"0s\""})
	for _, sid := range []string{"c1", "c2"} {
		r := retry.do(http.MethodPost, "/v1/sessions/"+sid+"/run", tokenAcme, map[string]any{"language": "javascript", "code": "1"})
		if m := wantError(t, r, http.StatusServiceUnavailable, "unavailable", ""); strings.Contains(m, "runs until") {
			t.Errorf("nothing is remembered with 0s: %s", m)
		}
	}
	if n := retry.stack.Sessions.SnapshotBuilds(); n != 2 {
		t.Errorf("%d builds for 2 runs with snapshot_retry_after = 0s", n)
	}
}

// build_env reaches the package manager's install scripts and no sandbox
// that runs code; a variable it names must be set.
func TestBuildEnvOnlyReachesTheBuild(t *testing.T) {
	need(t, "npm", "the dependency tests install a local npm package")
	fixtureOnce.Do(func() { fixtureErr = os.Chmod(fixtureDir, 0o755) })
	src := t.TempDir()
	pkg, _ := json.Marshal(map[string]any{"name": "sandstep-fixture-env", "version": "1.0.0", "main": "index.js",
		"scripts": map[string]string{"postinstall": `node -e "require('fs').writeFileSync('seen.json', JSON.stringify(process.env.SANDSTEP_TEST_BUILD_MARK || null))"`}})
	os.WriteFile(filepath.Join(src, "package.json"), pkg, 0o644)
	os.WriteFile(filepath.Join(src, "index.js"), []byte("module.exports = require('./seen.json');\n"), 0o644)
	cmd := exec.Command("npm", "pack", "--pack-destination", fixtureDir)
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm pack: %v\n%s", err, out)
	}
	spec := "file:" + filepath.Join(fixtureDir, "sandstep-fixture-env-1.0.0.tgz")

	t.Setenv("SANDSTEP_TEST_BUILD_MARK", "mark-from-build-env")
	e := newEnv(t, envConfig{deps: depsTable(spec), sessions: "build_env = [\"SANDSTEP_TEST_BUILD_MARK\"]"})
	run := e.run(tokenAcme, "env", "javascript", "[require('sandstep-fixture-env'), process.env.SANDSTEP_TEST_BUILD_MARK ?? null]")
	if wantOK(t, run); string(toJSON(t, run["result"])) != `["mark-from-build-env",null]` {
		t.Fatalf("result = %s, want the mark seen by the install only", toJSON(t, run["result"]))
	}

	t.Setenv("SANDSTEP_TEST_BUILD_MARK", "")
	_, err := sessions.New(sessions.Options{Config: e.cfg, Store: e.st})
	if err == nil || err.Error() != "sessions.build_env[0]: environment variable SANDSTEP_TEST_BUILD_MARK is not set or is empty" {
		t.Fatalf("New with the variable unset: %v", err)
	}
}
