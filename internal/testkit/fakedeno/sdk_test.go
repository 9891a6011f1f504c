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
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "testdata/sdk_check.mjs")
	cmd.Env = append(os.Environ(),
		"SDK_MODULE="+mod,
		"DENO_DEPLOY_ENDPOINT="+f.ConsoleURL,
		"DENO_SANDBOX_ENDPOINT="+f.SandboxURL,
		"DENO_DEPLOY_TOKEN="+testToken,
		"RUN_ID=r"+strings.ToLower(strings.ReplaceAll(t.Name(), "Test", ""))[:8],
		"SECRET_HOST=api.example.test",
		"SECRET_VALUE="+secretValue,
		"SECRET_URL=http://api.example.test:"+port+"/v1",
	)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("the SDK script failed: %v\nstderr:\n%s\nstdout:\n%s", err, stderr.String(), raw)
	}
	line := ""
	for l := range strings.Lines(string(raw)) {
		if r, ok := strings.CutPrefix(l, "RESULT "); ok {
			line = r
		}
	}
	raw = []byte(line)
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
		t.Fatalf("the SDK script's output is not JSON: %v\n%s\nstderr: %s", err, raw, stderr.String())
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
	for _, v := range []string{string(raw), stderr.String()} {
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

func filepathRoot(t *testing.T) string {
	root, err := testbin.Root()
	if err != nil {
		t.Fatal(err)
	}
	return root
}
