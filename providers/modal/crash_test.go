package modal_test

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/sandboxes"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/fakemodal"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
	"github.com/sandstep/sandstep/providers"
)

// TestPluginKilledMidCreateAndMidExec: the modal plugin process dies by
// SIGKILL while Modal makes a job's sandbox (the answer never reaches the
// host) and later while a command runs in it. The host restarts the
// plugin; the sandbox owner finds the sandbox the dead create made and
// ends it, a retried acquire makes exactly one, the exec cut short leaves
// that one sandbox adoptable and usable, and the release leaves nothing
// running on the fake.
func TestPluginKilledMidCreateAndMidExec(t *testing.T) {
	f := startFake(t, fakemodal.Options{Faults: fakemodal.Faults{SlowCreateAnswer: 3 * time.Second}})
	p := startPlugin(t, settingsFor(f.URL, nil), testSecrets(), nil)
	db := testddb.ForTests(t)
	m := sandboxes.New(sandboxes.Options{
		Store: store.New(db.Client, db.Prefix), Provider: p, ProviderName: "modal", Deployment: "crash-test",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	ctx := t.Context()
	owner := sandboxes.JobOwner("jb-crash", "acme")
	req := sandboxes.Request{Owner: owner, Spec: providers.CreateSpec{Name: "jb-crash", Lifetime: 5 * time.Minute}}

	// Mid-create: Modal has made the sandbox, its answer is on the way.
	pid := pluginPID(t)
	done := make(chan error, 1)
	go func() { _, err := m.Acquire(ctx, req); done <- err }()
	waitFor(t, "the fake to make the sandbox", func() bool { return f.Stats().Creates == 1 })
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := <-done
	var ce *sandboxes.CreateError
	if !errors.As(err, &ce) || providers.CodeOf(err) != providers.Unavailable {
		t.Fatalf("acquire whose plugin died = %v; want a CreateError with Unavailable", err)
	}
	if live := f.Sandboxes(); len(live) != 0 {
		t.Fatalf("the sandbox the dead create made is still running: %v", live)
	}

	// The job's retry makes exactly one sandbox.
	f.SetFaults(fakemodal.Faults{})
	lease, err := m.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("retried acquire: %v", err)
	}
	if live := f.Sandboxes(); len(live) != 1 || live[0] != lease.Sandbox.ID {
		t.Fatalf("running on the fake: %v; want only %s", live, lease.Sandbox.ID)
	}

	// Mid-exec: the plugin dies while a command runs.
	pid = pluginPID(t)
	execDone := make(chan error, 1)
	var out syncBuffer
	go func() {
		_, err := p.Exec(ctx, lease.Sandbox.ID, providers.ExecRequest{Shell: "echo started; sleep 60", Stdout: &out, Timeout: 2 * time.Minute})
		execDone <- err
	}()
	waitFor(t, "the command to start", func() bool { return out.String() == "started\n" })
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-execDone; providers.CodeOf(err) != providers.Unavailable {
		t.Fatalf("exec whose plugin died = %v; want Unavailable", err)
	}
	again, err := m.Acquire(ctx, req)
	if err != nil || !again.Adopted || again.Sandbox.ID != lease.Sandbox.ID {
		t.Fatalf("acquire after the exec's plugin died = %+v, %v; want %s adopted", again, err, lease.Sandbox.ID)
	}
	var echo bytes.Buffer
	if r, err := p.Exec(ctx, lease.Sandbox.ID, providers.ExecRequest{Shell: "echo alive", Stdout: &echo}); err != nil || r.ExitCode != 0 || echo.String() != "alive\n" {
		t.Fatalf("exec on the restarted plugin: %+v, %v, %q", r, err, echo.String())
	}
	if live := f.Sandboxes(); len(live) != 1 {
		t.Fatalf("running on the fake: %v; want the job's one sandbox", live)
	}
	if _, err := m.ReleaseOwner(ctx, owner, "job done"); err != nil {
		t.Fatal(err)
	}
	if live := f.Sandboxes(); len(live) != 0 {
		t.Fatalf("running after the release: %v", live)
	}
}

// pluginPID is the process id of the running modal plugin, a child of the
// test process.
func pluginPID(t *testing.T) int {
	t.Helper()
	var found int
	waitFor(t, "the plugin process", func() bool {
		matches, _ := filepath.Glob("/proc/[0-9]*/exe")
		for _, exe := range matches {
			target, err := os.Readlink(exe)
			if err != nil || target != pluginPath {
				continue
			}
			dir := filepath.Dir(exe)
			stat, err := os.ReadFile(filepath.Join(dir, "stat"))
			if err != nil {
				continue
			}
			// pid (comm) state ppid ...
			fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
			if len(fields) > 1 && fields[1] == strconv.Itoa(os.Getpid()) {
				found, _ = strconv.Atoi(filepath.Base(dir))
				return true
			}
		}
		return false
	})
	return found
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
