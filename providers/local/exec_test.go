package local

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstep/sandstep/providers"
)

func TestCreateExecTerminate(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(providers.CreateSpec{Name: "job-1", Labels: map[string]string{providers.LabelJob: "job-1"}})
	if out := e.sh(sb.ID, "echo hello; id -u; hostname; pwd"); out != "hello\n1000\n"+sb.ID+"\n/workspace\n" {
		t.Errorf("output %q", out)
	}
	got, err := e.p.Get(e.ctx, sb.ID)
	if err != nil || got.Name != "job-1" || got.State != providers.StateRunning || got.Labels[providers.LabelJob] != "job-1" {
		t.Errorf("Get = %+v, %v", got, err)
	}
	if err := e.p.Terminate(e.ctx, sb.ID); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	_, err = e.p.Get(e.ctx, sb.ID)
	wantCode(t, "Get after Terminate", err, providers.NotFound)
	_, err = e.p.Exec(e.ctx, sb.ID, providers.ExecRequest{Argv: []string{"true"}})
	wantCode(t, "Exec after Terminate", err, providers.NotFound)
	if err := e.p.Terminate(e.ctx, sb.ID); err != nil {
		t.Errorf("second Terminate: %v", err)
	}
	for _, id := range []string{"sbx-0000000000000000", "../../etc", ""} {
		if err := e.p.Terminate(e.ctx, id); err != nil {
			t.Errorf("Terminate(%q) of an unknown id: %v", id, err)
		}
		_, err := e.p.Get(e.ctx, id)
		wantCode(t, fmt.Sprintf("Get(%q)", id), err, providers.NotFound)
	}
	if entries := dirNames(t, e.dir+"/sandboxes"); len(entries) != 0 {
		t.Errorf("state_dir/sandboxes after Terminate holds %v", entries)
	}
}

func TestExec(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(providers.CreateSpec{Env: map[string]string{"FROM_SPEC": "spec", "OVERRIDDEN": "spec"}})

	t.Run("exit codes", func(t *testing.T) {
		for _, code := range []int{0, 1, 7, 255} {
			r := e.exec(sb.ID, providers.ExecRequest{Shell: fmt.Sprintf("exit %d", code)})
			if r.ExitCode != code || r.Signal != "" || r.TimedOut {
				t.Errorf("exit %d: got %+v", code, r.ExecResult)
			}
		}
		r := e.exec(sb.ID, providers.ExecRequest{Shell: "kill -TERM $$"})
		if r.Signal != "SIGTERM" || r.ExitCode != 128+15 {
			t.Errorf("killed by SIGTERM: got %+v", r.ExecResult)
		}
		r = e.exec(sb.ID, providers.ExecRequest{Argv: []string{"no-such-command-xyz"}})
		if r.ExitCode != 127 || !strings.Contains(r.stderr, "no-such-command-xyz") {
			t.Errorf("missing command: got %+v, stderr %q", r.ExecResult, r.stderr)
		}
	})

	t.Run("stdout and stderr", func(t *testing.T) {
		r := e.exec(sb.ID, providers.ExecRequest{Argv: []string{"/bin/sh", "-c", `echo out1; echo err1 >&2; printf 'out2'; printf 'err2' >&2`}})
		if r.stdout != "out1\nout2" || r.stderr != "err1\nerr2" {
			t.Errorf("stdout %q, stderr %q", r.stdout, r.stderr)
		}
		// Argv is not split by a shell.
		r = e.exec(sb.ID, providers.ExecRequest{Argv: []string{"printf", "%s|", "a b", "$HOME", "*"}})
		if r.stdout != "a b|$HOME|*|" {
			t.Errorf("argv passed as %q", r.stdout)
		}
	})

	t.Run("env", func(t *testing.T) {
		r := e.exec(sb.ID, providers.ExecRequest{
			Shell: `echo "$FROM_SPEC $OVERRIDDEN $FROM_REQ $HOME $PATH"`,
			Env:   map[string]string{"OVERRIDDEN": "req", "FROM_REQ": "r e q"},
		})
		want := "spec req r e q /home/sandbox /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/sandstep/tools\n"
		if r.stdout != want {
			t.Errorf("env: %q, want %q", r.stdout, want)
		}
		// Nothing of the plugin's environment leaks in.
		if out := e.sh(sb.ID, "env | cut -d= -f1 | sort | tr '\\n' ' '"); strings.Contains(out, "GO") || strings.Contains(out, "CI ") {
			t.Errorf("sandbox environment has host variables: %s", out)
		}
	})

	t.Run("cwd", func(t *testing.T) {
		if out := e.sh(sb.ID, "pwd"); out != "/workspace\n" {
			t.Errorf("default cwd %q", out)
		}
		e.sh(sb.ID, "mkdir -p /tmp/sub/dir")
		r := e.exec(sb.ID, providers.ExecRequest{Argv: []string{"pwd"}, Cwd: "/tmp/sub/dir"})
		if r.stdout != "/tmp/sub/dir\n" {
			t.Errorf("cwd: %q", r.stdout)
		}
		_, err := e.p.Exec(e.ctx, sb.ID, providers.ExecRequest{Argv: []string{"pwd"}, Cwd: "/no/such/dir"})
		wantCode(t, "missing cwd", err, providers.InvalidArgument)
		_, err = e.p.Exec(e.ctx, sb.ID, providers.ExecRequest{Argv: []string{"pwd"}, Cwd: "tmp"})
		wantCode(t, "relative cwd", err, providers.InvalidArgument)
	})

	t.Run("stdin", func(t *testing.T) {
		in := make([]byte, 3<<20)
		for i := range in {
			in[i] = byte(i * 7)
		}
		var out bytes.Buffer
		res, err := e.p.Exec(e.ctx, sb.ID, providers.ExecRequest{Argv: []string{"cat"}, Stdin: bytes.NewReader(in), Stdout: &out})
		if err != nil || res.ExitCode != 0 || !bytes.Equal(out.Bytes(), in) {
			t.Errorf("cat of 3 MiB stdin: %+v, %v, %d bytes back", res, err, out.Len())
		}
		// A command that stops reading early still ends normally.
		r, err := e.p.Exec(e.ctx, sb.ID, providers.ExecRequest{Shell: "head -c 5", Stdin: bytes.NewReader(in), Stdout: &out})
		if err != nil || r.ExitCode != 0 {
			t.Errorf("head -c 5: %+v, %v", r, err)
		}
		// Without Stdin the command reads EOF at once.
		if got := e.sh(sb.ID, "cat; echo end"); got != "end\n" {
			t.Errorf("no stdin: %q", got)
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		for name, req := range map[string]providers.ExecRequest{
			"no command":    {},
			"argv and sh":   {Argv: []string{"true"}, Shell: "true"},
			"env with =":    {Argv: []string{"true"}, Env: map[string]string{"A=B": "c"}},
			"empty argv[0]": {Argv: []string{""}},
		} {
			_, err := e.p.Exec(e.ctx, sb.ID, req)
			wantCode(t, name, err, providers.InvalidArgument)
		}
		_, err := e.p.Exec(e.ctx, "sbx-0123456789abcdef", providers.ExecRequest{Argv: []string{"true"}})
		wantCode(t, "unknown sandbox", err, providers.NotFound)
	})
}

// syncWriter is a bytes.Buffer that tests may read while an exec writes.
type syncWriter struct {
	mu      sync.Mutex
	b       bytes.Buffer
	onWrite func(string)
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.b.Write(p)
	s := w.b.String()
	w.mu.Unlock()
	if w.onWrite != nil {
		w.onWrite(s)
	}
	return len(p), nil
}

func TestExecStreamsOutput(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(providers.CreateSpec{})
	// The command prints, then waits for a file that the test writes only
	// once it has seen that output: the exec can only end if output arrives
	// while the command runs.
	var once sync.Once
	out := &syncWriter{}
	out.onWrite = func(s string) {
		if strings.Contains(s, "waiting") {
			once.Do(func() {
				if err := e.p.WriteFile(e.ctx, sb.ID, providers.WriteFileRequest{Path: "/tmp/go", Content: strings.NewReader("go")}); err != nil {
					t.Errorf("WriteFile: %v", err)
				}
			})
		}
	}
	res, err := e.p.Exec(e.ctx, sb.ID, providers.ExecRequest{
		Shell:   "echo waiting; while [ ! -e /tmp/go ]; do sleep 0.01; done; echo released",
		Stdout:  out,
		Timeout: 30 * time.Second,
	})
	if err != nil || res.ExitCode != 0 || res.TimedOut {
		t.Fatalf("exec: %+v, %v", res, err)
	}
	if got := out.b.String(); got != "waiting\nreleased\n" {
		t.Errorf("output %q", got)
	}
}

// countProcs counts the sandbox's processes whose whole command line
// matches the pattern, looking from inside the sandbox.
func countProcs(e *testEnv, id, pattern string) int {
	e.t.Helper()
	out := e.sh(id, `n=0; for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < "$f" 2>/dev/null | grep -qx -- "`+pattern+` " && n=$((n+1)); done; echo $n`)
	var n int
	fmt.Sscan(out, &n)
	return n
}

func TestExecTimeoutKillsWholeTree(t *testing.T) { execPaths(t, testExecTimeoutKillsWholeTree) }

func testExecTimeoutKillsWholeTree(t *testing.T, shim bool) {
	e := newEnv(t, nil)
	e.p.noExecGroups = shim
	sb := e.create(providers.CreateSpec{})
	// A plain child, a double-forked grandchild in its own session and a
	// nohup'd one, all outliving the main process's timeout.
	script := `sleep 4201 &
( setsid sleep 4202 & ) 
( nohup sleep 4203 >/dev/null 2>&1 & )
setsid sh -c 'sleep 4204 & sleep 4205' &
echo started; sleep 4200`
	var out bytes.Buffer
	start := time.Now()
	res, err := e.p.Exec(e.ctx, sb.ID, providers.ExecRequest{Shell: script, Stdout: &out, Timeout: time.Second})
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	if !res.TimedOut || res.Signal != "SIGKILL" {
		t.Errorf("result %+v, want timed out and SIGKILL", res)
	}
	if out.String() != "started\n" {
		t.Errorf("output before the timeout %q", out.String())
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("exec with a 1s timeout took %s", d)
	}
	if n := countProcs(e, sb.ID, "sleep 42[0-9][0-9]"); n != 0 {
		t.Errorf("%d processes of the timed-out exec are still running", n)
	}
}

func TestBackgroundProcessOutlivesExec(t *testing.T) { execPaths(t, testBackgroundProcessOutlivesExec) }

func testBackgroundProcessOutlivesExec(t *testing.T, shim bool) {
	e := newEnv(t, nil)
	e.p.noExecGroups = shim
	sb := e.create(providers.CreateSpec{})
	// The deep-research pattern: start a worker in the background, return,
	// poll its output file from later execs.
	r := e.exec(sb.ID, providers.ExecRequest{Shell: `nohup sh -c 'echo started > /tmp/bg.out; while [ ! -e /tmp/stop ]; do sleep 0.05; done; echo done >> /tmp/bg.out; sleep 4300' >/dev/null 2>&1 &
echo launched`, Timeout: 10 * time.Second})
	if r.ExitCode != 0 || r.TimedOut || r.stdout != "launched\n" {
		t.Fatalf("launch: %+v %q", r.ExecResult, r.stdout)
	}
	// One that keeps the exec's stdout open does not hold the exec either,
	// and may go on writing to it after the exec has returned.
	r = e.exec(sb.ID, providers.ExecRequest{Shell: `sleep 4301 &
( i=0; while [ $i -lt 30 ]; do echo tick; i=$((i+1)); sleep 0.02; done; touch /tmp/ticked ) &
echo ok`, Timeout: 10 * time.Second})
	if r.ExitCode != 0 || r.TimedOut || !strings.Contains(r.stdout, "ok\n") {
		t.Errorf("background process holding stdout: %+v %q", r.ExecResult, r.stdout)
	}
	deadline := time.Now().Add(30 * time.Second)
	for visible(e, sb.ID, "/tmp/ticked") != "readable" {
		if time.Now().After(deadline) {
			t.Fatal("a background process writing to the exec's stdout did not survive the exec")
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.write(sb.ID, "/tmp/stop", nil)
	for {
		got := string(e.read(sb.ID, providers.ReadFileRequest{Path: "/tmp/bg.out"}))
		if got == "started\ndone\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the background worker never finished; its output: %q", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := countProcs(e, sb.ID, "sleep 430[01]"); n != 2 {
		t.Errorf("%d background processes alive after their execs ended, want 2", n)
	}
}

func TestExecContextCancelKillsCommand(t *testing.T) { execPaths(t, testExecContextCancelKillsCommand) }

func testExecContextCancelKillsCommand(t *testing.T, shim bool) {
	e := newEnv(t, nil)
	e.p.noExecGroups = shim
	sb := e.create(providers.CreateSpec{})
	ctx, cancel := context.WithCancel(e.ctx)
	out := &syncWriter{onWrite: func(s string) {
		if strings.Contains(s, "running") {
			cancel()
		}
	}}
	_, err := e.p.Exec(ctx, sb.ID, providers.ExecRequest{Shell: "sleep 4400 & echo running; sleep 4401", Stdout: out, Timeout: time.Minute})
	wantCode(t, "Exec with a cancelled context", err, providers.DeadlineExceeded)
	deadline := time.Now().Add(20 * time.Second)
	for countProcs(e, sb.ID, "sleep 440[01]") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the command of a cancelled exec is still running")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
