package deno_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/testkit/fakedeno"
	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/deno"
)

// pluginPids returns the processes of the Deno plugin this test process
// started.
func pluginPids(t *testing.T) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || exe != pluginPath {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, not ")".
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(os.Getpid()) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killPlugin kills the plugin processes with SIGKILL.
func killPlugin(t *testing.T) {
	t.Helper()
	pids := pluginPids(t)
	if len(pids) == 0 {
		t.Fatal("no plugin process to kill")
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
}

// waitFor polls cond every 50ms for at most d.
func waitFor(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// TestKill9MidExec: the plugin killed with SIGKILL during a command loses
// that command's answer, not the sandbox: it runs on at Deno (a duration,
// not the socket, bounds it), the restarted plugin reaches it by id, and
// Terminate ends it.
func TestKill9MidExec(t *testing.T) {
	f := startFake(t, fakedeno.Options{})
	p := startPlugin(t, f, providers.SandboxDefaults{})
	ctx := t.Context()
	sb, err := p.Create(ctx, providers.CreateSpec{Lifetime: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	execOut(t, p, sb.ID, "echo before > /workspace/f")
	done := make(chan error, 1)
	go func() {
		_, err := p.Exec(context.WithoutCancel(ctx), sb.ID, providers.ExecRequest{Shell: "sleep 30", Timeout: time.Minute})
		done <- err
	}()
	time.Sleep(300 * time.Millisecond) // the command runs
	killPlugin(t)
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the exec the kill interrupted reports success")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the exec the kill interrupted never returned")
	}
	if got := execOut(t, p, sb.ID, "cat /workspace/f"); got != "before\n" {
		t.Fatalf("after the restart the sandbox reads %q", got)
	}
	if err := p.Terminate(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if ids := f.Running(); len(ids) > 0 {
		t.Fatalf("still running: %v", ids)
	}
}

// TestKill9MidBuildIsTakenOver: a snapshot build whose process is killed
// with SIGKILL leaves its build volume behind; its builder sandbox dies
// with the socket. The next process ensuring that snapshot does not wait
// for it forever: once no builder has run for a while, it builds the
// snapshot itself. (The first build runs in a process of its own, this
// test binary again: the plugin's host would retry the call in a new
// plugin process.)
func TestKill9MidBuildIsTakenOver(t *testing.T) {
	f := startFake(t, fakedeno.Options{})
	first := exec.Command(os.Args[0], "-test.run=^TestBuildHelperProcess$")
	first.Env = append(os.Environ(), "DENO_BUILD_HELPER="+string(settingsFor(f, nil)))
	first.Stdout, first.Stderr = os.Stderr, os.Stderr
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = first.Wait(); close(exited) }()
	defer func() { _ = first.Process.Kill(); <-exited }()
	if !waitFor(30*time.Second, func() bool { return len(f.Running()) == 1 }) {
		t.Fatalf("the build did not start a builder: running %v", f.Running())
	}
	time.Sleep(200 * time.Millisecond) // the setup runs
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	if !waitFor(10*time.Second, func() bool { return len(f.Running()) == 0 }) {
		t.Fatalf("the builder outlived the process that built: running %v", f.Running())
	}

	next := inProcess(t, f)
	deno.SetBuildStale(next, time.Second)
	spec := crashSpec
	spec.Setup = []string{"echo second >> /opt/builds"}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := next.EnsureSnapshot(ctx, spec); err != nil {
		t.Fatalf("EnsureSnapshot after the builder's process died: %v", err)
	}
	sb, err := next.Create(ctx, providers.CreateSpec{Snapshot: spec.Slug})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Terminate(context.WithoutCancel(ctx), sb.ID)
	if out := execOut(t, next, sb.ID, "cat /opt/builds"); out != "second\n" {
		t.Fatalf("the snapshot holds %q, want the second build's work alone", out)
	}
}

// crashSpec is the build TestBuildHelperProcess starts and never ends.
var crashSpec = providers.SnapshotSpec{Slug: "deps-crash", Setup: []string{"echo first >> /opt/builds; sleep 600"}, Timeout: 5 * time.Minute}

// TestBuildHelperProcess is the process TestKill9MidBuildIsTakenOver kills:
// with DENO_BUILD_HELPER set (the provider's settings) it builds crashSpec.
func TestBuildHelperProcess(t *testing.T) {
	settings := os.Getenv("DENO_BUILD_HELPER")
	if settings == "" {
		t.Skip("the helper process of TestKill9MidBuildIsTakenOver")
	}
	p := deno.New()
	if err := p.Configure(t.Context(), providers.Config{Settings: []byte(settings), Secrets: map[string]string{"token": testToken}}); err != nil {
		t.Fatal(err)
	}
	_, err := p.EnsureSnapshot(t.Context(), crashSpec)
	t.Fatalf("the build ended: %v", err)
}
