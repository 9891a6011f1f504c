package fakedeno_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/testkit/fakedeno"
	"github.com/sandstep/sandstep/internal/testkit/testbin"
)

const testToken = "ddo_fake_test_token_8c1e42a7"

// startFake serves a fake Deno whose proxy sends the given hosts to
// 127.0.0.1 servers. Without bubblewrap the test is skipped, or fails under
// CI.
func startFake(t testing.TB, hosts map[string]string) *fakedeno.Running {
	t.Helper()
	root, err := testbin.Root()
	if err != nil {
		t.Fatal(err)
	}
	deno := filepath.Join(root, testbin.DenoPath)
	if _, err := os.Stat(deno); err != nil {
		deno = ""
	}
	f, err := fakedeno.Start(fakedeno.Options{Token: testToken, Hosts: hosts, DenoPath: deno}, "", "")
	if errors.Is(err, fakedeno.ErrNoBubblewrap) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Errorf("closing the fake: %v", err)
		}
	})
	return f
}

// headerLog is a server recording the Authorization header of each request.
type headerLog struct {
	mu   sync.Mutex
	seen []string
}

func (h *headerLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.seen = append(h.seen, r.Header.Get("Authorization"))
	h.mu.Unlock()
	_, _ = w.Write([]byte("ok"))
}

func (h *headerLog) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.seen)
}

// sdkModule finds @deno/sandbox, which make deps installs from the lockfile.
func sdkModule(t *testing.T) string {
	t.Helper()
	dirs := []string{os.Getenv("SANDSTEP_NODE_MODULES")}
	if root, err := testbin.Root(); err == nil {
		dirs = append(dirs, filepath.Join(root, "node_modules"))
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if p := filepath.Join(d, "@deno", "sandbox", "esm", "mod.js"); fileExists(p) {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("@deno/sandbox is not installed: make deps installs it (package-lock.json pins it)")
	}
	t.Skip("@deno/sandbox is not installed (make deps)")
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestOfficialSDKAgainstTheFake runs Deno's own SDK against the fake: create
// with a volume and a secret, spawn with streamed output, sh, files, deno,
// expose, extend, list, kill, snapshot, boot from the snapshot, deletes.
// When the SDK and the fake disagree, the fake is wrong.
func TestOfficialSDKAgainstTheFake(t *testing.T) {
	testbin.RequireTool(t, "node", "nodejs")
	testbin.RequireTool(t, "curl", "curl")
	mod := sdkModule(t)
	allowed := &headerLog{}
	srv := httptest.NewServer(allowed)
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	f := startFake(t, map[string]string{"api.example.test": srv.Listener.Addr().String()})

	const secretValue = "sk-live-REAL-7f3a9c0e51d2"
	raw, stderr := runSDK(t, mod, f, "testdata/sdk_check.mjs",
		"SECRET_HOST=api.example.test",
		"SECRET_VALUE="+secretValue,
		"SECRET_URL=http://api.example.test:"+port+"/v1",
	)
	var got struct {
		Volume struct {
			Slug     string
			Capacity int64
			Bootable bool
		}
		VolumeGot, ID, Sh, ReadBack, Env, Deno, URL string
		VolumeMissing, AfterDelete                  any
		RootBootable, Extended                      bool
		Spawn                                       struct {
			Stdout, Stderr string
			Code           int
			Success        bool
		}
		Binary      []int
		Dir, Listed []string
		Missing     string
		Stat        int64
		Snapshot    struct {
			Slug     string
			Bootable bool
		}
		SnapshotGot        string
		Snapshots          []string
		FromSnapshot       string
		DeleteWithSnapshot any
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("the SDK script's output is not JSON: %v\n%s\nstderr: %s", err, raw, stderr)
	}
	t.Logf("SDK saw: %s", raw)
	check := func(what string, ok bool) {
		t.Helper()
		if !ok {
			t.Errorf("%s: wrong (SDK saw %s)", what, raw)
		}
	}
	check("volume capacity is decimal bytes", got.Volume.Capacity == 1_000_000_000 && !got.Volume.Bootable)
	check("volumes.get by slug", got.VolumeGot == got.Volume.Slug)
	check("volumes.get of a missing slug is null", got.VolumeMissing == nil)
	check("a volume from builtin:debian-13 is bootable", got.RootBootable)
	check("sandbox id", strings.HasPrefix(got.ID, "sbx_ord_"))
	check("spawn stdout", strings.HasPrefix(got.Spawn.Stdout, "hello\nkey=DENO_SECRET_PLACEHOLDER_"))
	check("spawn reached the secret's host", strings.HasSuffix(got.Spawn.Stdout, "ok\n"))
	check("spawn stderr", got.Spawn.Stderr == "to-err\n")
	check("spawn status", got.Spawn.Code == 3 && !got.Spawn.Success)
	check("sh", got.Sh == "from-sh\n")
	check("text file", got.ReadBack == "written by the SDK")
	check("binary file", slices.Equal(got.Binary, []int{0, 1, 2, 255}))
	check("readDir", slices.Equal(got.Dir, []string{"hello.txt", "note.txt"}))
	check("missing file is NotFound", got.Missing == "NotFound")
	check("stat size", got.Stat == int64(len("written by the SDK")))
	check("env.get of a secret is its placeholder", strings.HasPrefix(got.Env, "DENO_SECRET_PLACEHOLDER_"))
	check("exposeHttp", strings.HasPrefix(got.URL, "https://") && strings.HasSuffix(got.URL, ".sandbox.fake.invalid"))
	check("extendTimeout", got.Extended)
	check("sandboxes.list", slices.Equal(got.Listed, []string{"running"}))
	check("snapshot", got.Snapshot.Slug != "" && got.Snapshot.Bootable && got.SnapshotGot == got.Snapshot.Slug)
	check("snapshots.list", slices.Contains(got.Snapshots, got.Snapshot.Slug))
	check("boot from the snapshot sees the root's files", strings.Contains(got.FromSnapshot, "bin.dat"))
	check("a volume with snapshots cannot be deleted", got.DeleteWithSnapshot != "deleted")
	check("volumes.get after delete is null", got.AfterDelete == nil)
	if fileExists(filepath.Join(filepathRoot(t), "node_modules/deno/deno")) {
		check("deno.run", got.Deno == "42\n")
	}
	for _, v := range []string{string(raw), stderr} {
		if strings.Contains(v, secretValue) {
			t.Errorf("the secret's value reached the sandbox's output: %s", v)
		}
	}
	if seen := allowed.all(); !slices.Contains(seen, "Bearer "+secretValue) {
		t.Errorf("the secret's host saw %q, want the real value", seen)
	}
	if ids := f.Running(); len(ids) > 0 {
		t.Errorf("sandboxes left running: %v", ids)
	}
}

// runSDK runs a script of testdata with node against the fake, the SDK's
// endpoints pointed at it, and returns the line it marked RESULT and its
// standard error.
func runSDK(t *testing.T, mod string, f *fakedeno.Running, script string, env ...string) ([]byte, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Env = append(os.Environ(),
		"SDK_MODULE="+mod,
		"DENO_DEPLOY_ENDPOINT="+f.ConsoleURL,
		"DENO_SANDBOX_ENDPOINT="+f.SandboxURL,
		"DENO_DEPLOY_TOKEN="+testToken,
		"RUN_ID=r"+strings.ToLower(strings.ReplaceAll(t.Name(), "Test", ""))[:8],
	)
	cmd.Env = append(cmd.Env, env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("the SDK script %s failed: %v\nstderr:\n%s\nstdout:\n%s", script, err, stderr.String(), raw)
	}
	line := ""
	for l := range strings.Lines(string(raw)) {
		if r, ok := strings.CutPrefix(l, "RESULT "); ok {
			line = r
		}
	}
	return []byte(line), stderr.String()
}

func filepathRoot(t *testing.T) string {
	root, err := testbin.Root()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// sdkError is how the SDK script describes an error it caught.
type sdkError struct {
	Name, Ctor string
	Status     int
	Code       any
}

// TestOfficialSDKEdges runs Deno's SDK through what the provider relies on
// beyond the happy path: connect by id (and that closing a socket stops
// only a session-mode sandbox), a process's signal, a missing program,
// single attach, no snapshot of an attached volume, the 30-minute and
// 5-sandbox limits, pagination, and the errors' shapes as the SDK reads
// them.
func TestOfficialSDKEdges(t *testing.T) {
	testbin.RequireTool(t, "node", "nodejs")
	mod := sdkModule(t)
	f := startFake(t, nil)
	raw, stderr := runSDK(t, mod, f, "testdata/sdk_edges.mjs")
	var got struct {
		BadTokenConsole, BadTokenCreate, SlugTaken, BadSlug, TooSmall *sdkError
		TooLong, SecondAttach, SnapshotAttached, DeleteAttached       *sdkError
		KillAfterExit, MissingProgram, ConnectAfterKill, Sixth        *sdkError
		SnapshotRightAfterKill                                        *sdkError
		FirstPage                                                     int
		HasMore                                                       bool
		Paged                                                         []string
		Killed                                                        struct {
			Code    int
			Signal  *string
			Success bool
		}
		SelfKilled struct {
			Code   int
			Signal *string
		}
		ConnectedID, ReadOverConnect, AfterCloses, Reconnected string
		AfterKill, DetachedSnapshot, SessionAfterClose         string
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("the SDK script's output is not JSON: %v\n%s\nstderr: %s", err, raw, stderr)
	}
	t.Logf("SDK saw: %s", raw)
	check := func(what string, ok bool) {
		t.Helper()
		if !ok {
			t.Errorf("%s: wrong (SDK saw %s)", what, raw)
		}
	}
	is := func(e *sdkError, ctor string, status int, code string) bool {
		return e != nil && e.Ctor == ctor && (status == 0 || e.Status == status) && (code == "" || e.Code == code)
	}
	check("a wrong token on the console is ApiError 401 INVALID_TOKEN", is(got.BadTokenConsole, "ApiError", 401, "INVALID_TOKEN"))
	check("a wrong token on create is InvalidTokenError", is(got.BadTokenCreate, "InvalidTokenError", 0, ""))
	check("a taken slug is ApiError 409", is(got.SlugTaken, "ApiError", 409, ""))
	check("a bad slug is ApiError 400", is(got.BadSlug, "ApiError", 400, ""))
	check("a volume under 300 MB is ApiError 400", is(got.TooSmall, "ApiError", 400, ""))
	check("pagination: a first page of 2 with more", got.FirstPage == 2 && got.HasMore)
	check("pagination: all three volumes", len(got.Paged) == 3)
	check("a create past 30 minutes is refused", is(got.TooLong, "ConnectionEstablishmentError", 400, ""))
	check("a second attach is ConnectionEstablishmentError 409", is(got.SecondAttach, "ConnectionEstablishmentError", 409, ""))
	check("no snapshot of an attached volume", is(got.SnapshotAttached, "ApiError", 409, ""))
	check("no delete of an attached volume", is(got.DeleteAttached, "ApiError", 409, ""))
	check("a killed process reports SIGTERM", got.Killed.Signal != nil && *got.Killed.Signal == "SIGTERM" && got.Killed.Code == 143 && !got.Killed.Success)
	check("a shell killing itself reports SIGTERM", got.SelfKilled.Signal != nil && *got.SelfKilled.Signal == "SIGTERM")
	check("a kill after the exit is no error", got.KillAfterExit == nil)
	check("a missing program fails the spawn with NotFound", got.MissingProgram != nil && got.MissingProgram.Ctor == "NotFound")
	check("connect by id", got.ConnectedID != "" && got.ReadOverConnect == "written before the reconnect")
	check("closing the sockets leaves a duration sandbox running", got.AfterCloses == "running" && got.Reconnected == "written before the reconnect")
	check("connect after the kill fails", got.ConnectAfterKill != nil && got.ConnectAfterKill.Ctor == "ConnectionEstablishmentError")
	check("a killed sandbox is listed stopped", got.AfterKill == "stopped")
	check("right after the kill the volume is still attached", is(got.SnapshotRightAfterKill, "ApiError", 409, ""))
	check("the volume is snapshotted once detached", got.DetachedSnapshot != "")
	check("a session sandbox stops with its primary socket", got.SessionAfterClose == "stopped")
	check("a sixth sandbox is refused with 429", is(got.Sixth, "ConnectionEstablishmentError", 429, ""))
	if ids := f.Running(); len(ids) > 0 {
		t.Errorf("sandboxes left running: %v", ids)
	}
}
