package local

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/version"
	"github.com/sandstep/sandstep/providers"
)

// waitGone polls Get until the sandbox is reported gone.
func waitGone(t *testing.T, e *testEnv, id string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		_, err := e.p.Get(e.ctx, id)
		if providers.CodeOf(err) == providers.NotFound {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s still reported after %s: %v", id, within, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestLifetimeExpiry(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(providers.CreateSpec{Lifetime: time.Second})
	if d := time.Until(sb.ExpiresAt); d <= 0 || d > time.Second {
		t.Errorf("ExpiresAt %s away, want within 1s", d)
	}
	e.sh(sb.ID, "nohup sleep 4600 >/dev/null 2>&1 &")
	rec, _ := e.p.lookup(e.p.s, sb.ID)
	waitGone(t, e, sb.ID, 30*time.Second)
	if processAlive(rec.rec.InitPID, rec.rec.InitStart) {
		t.Errorf("the expired sandbox's pid 1 is alive")
	}
	if os.Geteuid() == 0 {
		if left := hostProcsOf(rec.rec.UID); len(left) != 0 {
			t.Errorf("processes of the expired sandbox remain: %v", left)
		}
	}
	if _, err := os.Stat(filepath.Join(e.dir, "sandboxes", sb.ID)); !os.IsNotExist(err) {
		t.Errorf("the expired sandbox's directory is still there: %v", err)
	}
}

func TestIdleTimeout(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(providers.CreateSpec{IdleTimeout: 700 * time.Millisecond})
	// A request that runs longer than the idle timeout is activity.
	if out := e.sh(sb.ID, "sleep 1.5; echo done"); out != "done\n" {
		t.Errorf("long exec: %q", out)
	}
	if _, err := e.p.Get(e.ctx, sb.ID); err != nil {
		t.Fatalf("right after an exec the sandbox is gone: %v", err)
	}
	waitGone(t, e, sb.ID, 30*time.Second)
}

func TestPluginRestart(t *testing.T) {
	e := newEnv(t, nil)
	live := e.create(providers.CreateSpec{Name: "survivor", Labels: map[string]string{"k": "v"}})
	e.write(live.ID, "/workspace/note", []byte("before restart"))
	dead := e.create(providers.CreateSpec{Name: "casualty"})
	deadRec, _ := e.p.lookup(e.p.s, dead.ID)
	// The first plugin goes away; one of its sandboxes dies meanwhile.
	e.p.Close()
	if err := syscall.Kill(deadRec.rec.InitPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for processAlive(deadRec.rec.InitPID, deadRec.rec.InitStart) {
		time.Sleep(5 * time.Millisecond)
	}

	p2 := e.newProvider()
	defer p2.Close()
	got, err := p2.Get(e.ctx, live.ID)
	if err != nil || got.Name != "survivor" || got.Labels["k"] != "v" || !got.ExpiresAt.Equal(live.ExpiresAt) {
		t.Fatalf("the new plugin's Get = %+v, %v", got, err)
	}
	e2 := *e
	e2.p = p2
	if out := e2.sh(live.ID, "cat /workspace/note"); out != "before restart" {
		t.Errorf("exec through the new plugin reads %q", out)
	}
	list, err := p2.List(e.ctx, providers.ListFilter{})
	if err != nil || len(list) != 1 || list[0].ID != live.ID {
		t.Errorf("the new plugin lists %+v, %v", list, err)
	}
	_, err = p2.Get(e.ctx, dead.ID)
	wantCode(t, "Get of the sandbox that died", err, providers.NotFound)
	if _, err := os.Stat(filepath.Join(e.dir, "sandboxes", dead.ID+".json")); !os.IsNotExist(err) {
		t.Errorf("the dead sandbox's record survived the reload: %v", err)
	}
	// Its name is free again, the live one's is not.
	again := e2.create(providers.CreateSpec{Name: "casualty"})
	_, err = p2.Create(e.ctx, providers.CreateSpec{Name: "survivor"})
	wantCode(t, "Create with the live sandbox's name", err, providers.AlreadyExists)
	for _, id := range []string{live.ID, again.ID} {
		if err := p2.Terminate(e.ctx, id); err != nil {
			t.Errorf("Terminate(%s) through the new plugin: %v", id, err)
		}
	}
}

func TestNamesAndLabels(t *testing.T) {
	e := newEnv(t, nil)
	a := e.create(providers.CreateSpec{Name: "session-1", Labels: map[string]string{providers.LabelOwner: "sandstep", providers.LabelSession: "1"}})
	b := e.create(providers.CreateSpec{Labels: map[string]string{providers.LabelOwner: "sandstep", providers.LabelSession: "2"}})
	e.create(providers.CreateSpec{Labels: map[string]string{providers.LabelOwner: "someone-else"}})

	_, err := e.p.Create(e.ctx, providers.CreateSpec{Name: "session-1"})
	wantCode(t, "Create with a live name", err, providers.AlreadyExists)

	ids := func(f providers.ListFilter) string {
		t.Helper()
		sbs, err := e.p.List(e.ctx, f)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		var out []string
		for _, sb := range sbs {
			out = append(out, sb.ID)
		}
		sort.Strings(out)
		return strings.Join(out, ",")
	}
	both := []string{a.ID, b.ID}
	sort.Strings(both)
	if got := ids(providers.ListFilter{Labels: map[string]string{providers.LabelOwner: "sandstep"}}); got != strings.Join(both, ",") {
		t.Errorf("List by owner = %s", got)
	}
	if got := ids(providers.ListFilter{Labels: map[string]string{providers.LabelOwner: "sandstep", providers.LabelSession: "2"}}); got != b.ID {
		t.Errorf("List by owner and session = %s", got)
	}
	if got := ids(providers.ListFilter{Name: "session-1"}); got != a.ID {
		t.Errorf("List by name = %s", got)
	}
	if err := e.p.Terminate(e.ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if got := ids(providers.ListFilter{Name: "session-1"}); got != "" {
		t.Errorf("List by name after Terminate = %s", got)
	}
	e.create(providers.CreateSpec{Name: "session-1"})
}

func TestManySandboxes(t *testing.T) {
	e := newEnv(t, nil)
	const n = 20
	var wg sync.WaitGroup
	sbs := make([]providers.Sandbox, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			sbs[i], errs[i] = e.p.Create(e.ctx, providers.CreateSpec{Name: fmt.Sprintf("many-%d", i)})
		})
	}
	wg.Wait()
	uids := map[int]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Create #%d: %v", i, errs[i])
		}
		rec, _ := e.p.lookup(e.p.s, sbs[i].ID)
		uids[rec.rec.UID] = true
	}
	if os.Geteuid() == 0 && len(uids) != n {
		t.Errorf("%d sandboxes share %d uids", n, len(uids))
	}
	for i := range n {
		wg.Go(func() {
			var out strings.Builder
			r, err := e.p.Exec(e.ctx, sbs[i].ID, providers.ExecRequest{Shell: "echo $((6*7)) > /workspace/x; cat /workspace/x", Stdout: &out})
			if err != nil || r.ExitCode != 0 || out.String() != "42\n" {
				errs[i] = fmt.Errorf("exec: %+v, %v, %q", r, err, out.String())
			}
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Errorf("sandbox #%d: %v", i, errs[i])
		}
	}
	for i := range n {
		wg.Go(func() { errs[i] = e.p.Terminate(e.ctx, sbs[i].ID) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Errorf("Terminate #%d: %v", i, errs[i])
		}
	}
	if list, _ := e.p.List(e.ctx, providers.ListFilter{}); len(list) != 0 {
		t.Errorf("%d sandboxes listed after terminating all", len(list))
	}
}

func TestConfigure(t *testing.T) {
	requireBwrap(t)
	configure := func(settings string) error {
		p := New()
		defer p.Close()
		return p.Configure(context.Background(), providers.Config{Settings: []byte(settings)})
	}
	dir := t.TempDir()
	for settings, code := range map[string]providers.Code{
		`{}`: providers.InvalidArgument,
		`{"state_dir": "` + dir + `", "no_such_key": 1}`:               providers.InvalidArgument,
		`{"state_dir": "` + dir + `", "max_processes": -1}`:            providers.InvalidArgument,
		`{"state_dir": "` + dir + `", "ro_paths": ["usr"]}`:            providers.InvalidArgument,
		`{"state_dir": "` + dir + `", "ro_paths": ["/tmp"]}`:           providers.InvalidArgument,
		`{"state_dir": "` + dir + `", "bwrap_path": "/no/such/bwrap"}`: providers.FailedPrecondition,
		`{"state_dir": "` + dir + `", "bwrap_path": "/bin/false"}`:     providers.FailedPrecondition,
	} {
		wantCode(t, settings, configure(settings), code)
	}
	err := configure(`{"state_dir": "` + dir + `", "bwrap_path": "/no/such/bwrap"}`)
	if err == nil || !strings.Contains(err.Error(), "bubblewrap") {
		t.Errorf("a missing bwrap is reported as %v; it should name the package to install", err)
	}
	_, err = New().Create(context.Background(), providers.CreateSpec{})
	wantCode(t, "Create before Configure", err, providers.FailedPrecondition)

	// A relative state_dir is taken from the working directory.
	p := New()
	defer p.Close()
	b := []byte(`{"state_dir": "rel-state"}`)
	t.Chdir(dir)
	if err := p.Configure(context.Background(), providers.Config{Settings: b}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "rel-state", "sandboxes")); err != nil {
		t.Errorf("relative state_dir: %v", err)
	}
	info, _ := p.Info(context.Background())
	if info.Name != "local" || info.Version != version.Version || !info.Capabilities.Supports(providers.NetworkNone) ||
		!info.Capabilities.Supports(providers.NetworkAll) || !info.Capabilities.Supports(providers.NetworkAllowlist) ||
		!info.Capabilities.FileAPI || info.Capabilities.PublicURL || !info.Capabilities.HostScopedSecrets {
		t.Errorf("Info = %+v", info)
	}
}

func TestRlimits(t *testing.T) { execPaths(t, testRlimits) }

func testRlimits(t *testing.T, shim bool) {
	e := newEnv(t, func(ls *Settings) {
		ls.MaxCPUSeconds = 7
		ls.MaxAddressSpaceMB = 2048
		ls.MaxOpenFiles = 100
		ls.MaxFileSizeMB = 1
		ls.MaxProcesses = 50
	})
	e.p.noExecGroups = shim
	sb := e.create(providers.CreateSpec{})
	if out := e.sh(sb.ID, "bash -c 'echo $(ulimit -t) $(ulimit -v) $(ulimit -n) $(ulimit -f) $(ulimit -u)'"); out != "7 2097152 100 1024 50\n" {
		t.Errorf("limits in the sandbox: %q", out)
	}
	r := e.exec(sb.ID, providers.ExecRequest{Shell: "head -c 2000000 /dev/zero > /workspace/big"})
	if r.Signal != "SIGXFSZ" && r.ExitCode != 128+25 {
		t.Errorf("writing past max_file_size_mb: %+v", r.ExecResult)
	}
	err := e.p.WriteFile(e.ctx, sb.ID, providers.WriteFileRequest{Path: "/workspace/big2", Content: bytes.NewReader(make([]byte, 2<<20))})
	wantCode(t, "WriteFile past max_file_size_mb", err, providers.ResourceExhausted)

	// The defaults leave CPU time and address space unlimited.
	d := newEnv(t, nil)
	sb = d.create(providers.CreateSpec{})
	if out := d.sh(sb.ID, "bash -c 'echo $(ulimit -t) $(ulimit -v) $(ulimit -u) $(ulimit -n)'"); out != "unlimited unlimited 256 1024\n" {
		t.Errorf("default limits in the sandbox: %q", out)
	}
}

func TestToolsDirIsMountedReadOnly(t *testing.T) {
	tools := t.TempDir()
	if err := os.WriteFile(filepath.Join(tools, "tool.sh"), []byte("#!/bin/sh\necho tool ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tools, 0o755); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(ls *Settings) { ls.ToolsDir = tools })
	sb := e.create(providers.CreateSpec{})
	if out := e.sh(sb.ID, ToolsPath+"/tool.sh"); strings.TrimSpace(out) != "tool ran" {
		t.Errorf("tool output %q", out)
	}
	if out := e.sh(sb.ID, "touch "+ToolsPath+"/x 2>/dev/null && echo writable || echo read-only"); strings.TrimSpace(out) != "read-only" {
		t.Errorf("tools dir is %s", out)
	}
}
