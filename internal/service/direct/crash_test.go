package direct_test

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandstep/sandstep/client"
	"github.com/sandstep/sandstep/internal/service/sandboxes"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/providers"
)

// serveProcess is a `sandstep serve` in a process of its own, so that the
// test can kill it with SIGKILL.
type serveProcess struct {
	t        *testing.T
	cfg, url string
	cmd      *exec.Cmd
	log      bytes.Buffer
}

func (s *serveProcess) start() {
	s.t.Helper()
	root, _ := filepath.Abs("../../..")
	s.cmd = exec.Command(filepath.Join(pluginDir, "sandstep"), "serve", "--config", s.cfg, "--log-level", "warn")
	s.cmd.Env = append(os.Environ(), "SANDSTEP_TEMPLATE="+filepath.Join(root, "template.yaml"), "SANDSTEP_NODE_MODULES="+filepath.Join(root, "node_modules"))
	s.cmd.Stdout, s.cmd.Stderr = &s.log, &s.log
	// Its own group, so that the cleanup ends whatever of it is left.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://")); err == nil {
			conn.Close()
			return
		}
		if time.Now().After(deadline) || s.cmd.ProcessState != nil {
			s.t.Fatalf("serve did not start:\n%s", s.log.String())
		}
	}
}

// kill ends the server with SIGKILL, as a crash or the OOM killer would.
func (s *serveProcess) kill() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		s.t.Fatal(err)
	}
	_ = s.cmd.Wait()
}

// TestServeKilledMidExec: `sandstep serve` is killed with SIGKILL while an
// exec streams its output to a client; once it is started again the
// client, resuming by itself, gets the whole output byte for byte, and the
// parent's termination still cascades to the child created before the
// crash.
func TestServeKilledMidExec(t *testing.T) {
	need(t, "bwrap", "the local provider runs sandboxes with bubblewrap (Debian package bubblewrap)")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.toml")
	err = os.WriteFile(cfg, fmt.Appendf(nil, `
[server]
addr = %q
data_dir = %q
[provider]
plugin_dir = %q
[provider.local]
tools_dir = %q
[auth]
dev_token_env = ""
[[auth.tokens]]
tenant = "acme"
sha256 = %q
`, addr, filepath.Join(dir, "data"), pluginDir, toolsDir, hashOf(tokenAcme)), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	s := &serveProcess{t: t, cfg: cfg, url: "http://" + addr}
	s.start()
	t.Cleanup(func() {
		// The sandboxes outlive a killed server by design: a clean stop
		// terminates them.
		if s.cmd.ProcessState == nil {
			_ = s.cmd.Process.Signal(syscall.SIGINT)
			_ = s.cmd.Wait()
		}
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	})
	ctx := ctxFor(t)
	acme := client.New(s.url, tokenAcme, nil)
	parent, err := acme.CreateSandbox(ctx, client.CreateRequest{TTLSeconds: 900})
	if err != nil {
		t.Fatal(err)
	}
	var tok bytes.Buffer
	if _, err := acme.Run(ctx, parent.ID, client.ExecRequest{Command: `printf %s "$SANDSTEP_TOKEN"`}, &tok, nil); err != nil {
		t.Fatal(err)
	}
	child, err := client.New(s.url, tok.String(), nil).CreateSandbox(ctx, client.CreateRequest{TTLSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	const lines = 60
	ex, err := acme.Exec(ctx, parent.ID, client.ExecRequest{Command: fmt.Sprintf("for i in $(seq 1 %d); do echo line $i; sleep 0.1; done", lines), Background: true})
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	got := &syncBuffer{}
	done := make(chan error, 1)
	reader := client.New(s.url, tokenAcme, nil)
	go func() {
		_, err := reader.Output(ctx, parent.ID, ex.ExecID, "stdout", 0, got)
		done <- err
	}()
	for deadline := time.Now().Add(time.Minute); got.Len() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no output before the crash")
		}
	}
	s.kill()
	before := got.Len()
	s.start()
	if err := <-done; err != nil {
		t.Fatalf("the output across the crash: %v\n%s", err, s.log.String())
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("the output across the crash is %q, want %q", got.Bytes(), want.Bytes())
	}
	if before == want.Len() {
		t.Errorf("the whole output had arrived before the crash: the resume was not exercised")
	}
	// Nothing stranded: both sandboxes are alive, owned and usable; the
	// parent's end still ends the child.
	if out, err := acme.Exec(ctx, child.ID, client.ExecRequest{Command: "echo alive"}); err != nil || out.Stdout == nil || *out.Stdout != "alive\n" {
		t.Fatalf("the child after the crash: %+v %v", out, err)
	}
	if err := acme.TerminateSandbox(ctx, parent.ID); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{parent.ID, child.ID} {
		if sb, err := acme.Get(ctx, id); err != nil || sb.Status != "terminated" {
			t.Errorf("sandbox %s after the parent's terminate: %+v %v", id, sb, err)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and readers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// TestInterruptedCreateIsCleanedUp: a create cut off after the provider made
// the sandbox but before its record said so (the server died in between)
// leaves a record "creating" that no client got; the cleanup terminates its
// sandbox and closes the record, and its parent's child slot is given back.
func TestInterruptedCreateIsCleanedUp(t *testing.T) {
	// No idle timeout: nothing but the create's interruption ends it.
	e := newEnv(t, `idle_timeout = "0s"`)
	ctx := ctxFor(t)
	acme := e.client(tokenAcme)
	parent, err := acme.CreateSandbox(ctx, client.CreateRequest{TTLSeconds: 7200})
	if err != nil {
		t.Fatal(err)
	}
	p := record(t, e, parent.ID)
	now := e.clock.Now()
	id := "crashedcreate01"
	rec := store.DirectSandbox{ID: id, Tenant: "acme", ParentID: parent.ID, Depth: 1, Ledger: "sbx-" + id,
		CreatedAt: now, LastActive: now, EndsAt: now.Add(time.Hour), URLToken: "t"}
	if err := e.st.DirectCreate(ctx, rec, store.ChildLimits{MaxAlive: 5, PerHour: 10}, now); err != nil {
		t.Fatal(err)
	}
	if _, err := e.stack.App.Phases.Sandboxes.Acquire(ctx, sandboxes.Request{Owner: sandboxes.SandboxOwner(p.Ledger, "acme"),
		Spec: providers.CreateSpec{Name: rec.Ledger, Lifetime: time.Hour, Labels: map[string]string{providers.LabelOwner: "sandstep"}}}); err != nil {
		t.Fatal(err)
	}
	if n := e.liveSandboxes(); n != 2 {
		t.Fatalf("%d live sandboxes, want the parent and the half-created child", n)
	}
	if alive, _ := e.st.DirectChildrenAlive(ctx, parent.ID); alive != 1 {
		t.Fatalf("the parent counts %d children", alive)
	}
	// Within the time a create may take, it is left alone.
	if _, err := e.stack.Reaper.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if r := record(t, e, id); r.State != store.DirectCreating {
		t.Fatalf("a create in flight was touched: %+v", r)
	}
	e.clock.Advance(20 * time.Minute)
	if _, err := acme.Get(ctx, parent.ID); err != nil { // the parent is in use
		t.Fatal(err)
	}
	if _, err := e.stack.Reaper.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if r := record(t, e, id); r.State != store.DirectTerminated {
		t.Errorf("the interrupted create's record: %+v", r)
	}
	if n := e.liveSandboxes(); n != 1 {
		t.Errorf("%d live sandboxes, want the parent alone", n)
	}
	if alive, _ := e.st.DirectChildrenAlive(ctx, parent.ID); alive != 0 {
		t.Errorf("the parent still counts %d children", alive)
	}
	if r := record(t, e, parent.ID); r.State != store.DirectRunning {
		t.Errorf("the parent: %+v", r)
	}
}
