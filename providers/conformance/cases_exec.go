package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandstep/sandstep/providers"
)

func caseExecExitCodes(t T, p providers.Provider) {
	f := newFix(t, p)
	sb := f.sandbox()
	for _, code := range []int{0, 1, 3, 255} {
		r := f.exec(sb.ID, providers.ExecRequest{Shell: fmt.Sprintf("exit %d", code)})
		if r.ExitCode != code || r.TimedOut || r.Signal != "" {
			t.Errorf("exit %d: got exit %d, timed out %v, signal %q", code, r.ExitCode, r.TimedOut, r.Signal)
		}
	}
	if r := f.exec(sb.ID, providers.ExecRequest{Argv: []string{"false"}}); r.ExitCode != 1 {
		t.Errorf("argv false: exit %d, want 1", r.ExitCode)
	}
	r := f.exec(sb.ID, providers.ExecRequest{Shell: "kill -TERM $$; exit 9"})
	if r.Signal != "SIGTERM" || r.TimedOut {
		t.Errorf("command killed by SIGTERM: exit %d, signal %q, timed out %v; want signal SIGTERM", r.ExitCode, r.Signal, r.TimedOut)
	}
}

func caseExecStdoutStderr(t T, p providers.Provider) {
	f := newFix(t, p)
	sb := f.sandbox()
	r := f.exec(sb.ID, providers.ExecRequest{Shell: `printf 'out1\n'; printf 'err1\n' >&2; printf 'out2\n'; printf 'err2\n' >&2`})
	if r.Stdout != "out1\nout2\n" || r.Stderr != "err1\nerr2\n" {
		t.Errorf("stdout %q, stderr %q; want %q and %q", r.Stdout, r.Stderr, "out1\nout2\n", "err1\nerr2\n")
	}
	r = f.exec(sb.ID, providers.ExecRequest{Shell: `printf '\000\001\377no newline'`})
	if want := "\x00\x01\xffno newline"; r.Stdout != want {
		t.Errorf("binary stdout %q, want %q", r.Stdout, want)
	}
	// nil writers discard output.
	res, err := p.Exec(f.ctx, sb.ID, providers.ExecRequest{Shell: "echo out; echo err >&2", Timeout: f.e.scale(time.Minute)})
	if err != nil || res.ExitCode != 0 {
		t.Errorf("exec with nil Stdout and Stderr: exit %d, error %v", res.ExitCode, err)
	}
}

func caseExecEnv(t T, p providers.Provider) {
	f := newFix(t, p)
	sb := f.create(providers.CreateSpec{
		Env:     map[string]string{"CF_SANDBOX": "from-sandbox", "CF_OVERRIDE": "sandbox"},
		Secrets: []providers.Secret{{Name: "CF_SECRET", Value: "s3cr3t-value"}},
	})
	tricky := "a b\n=c 'd' \"e\" $HOME \\ ;"
	r := f.exec(sb.ID, providers.ExecRequest{
		Shell: `printf '%s|' "$CF_SANDBOX" "$CF_OVERRIDE" "$CF_TRICKY" "$CF_SECRET"`,
		Env:   map[string]string{"CF_OVERRIDE": "exec", "CF_TRICKY": tricky},
	})
	want := "from-sandbox|exec|" + tricky + "|s3cr3t-value|"
	if r.Stdout != want {
		t.Errorf("environment: got %q, want %q (sandbox env, exec env overriding it, a secret without hosts)", r.Stdout, want)
	}
	r = f.exec(sb.ID, providers.ExecRequest{Argv: []string{"printenv", "CF_TRICKY"}, Env: map[string]string{"CF_TRICKY": tricky}})
	if r.Stdout != tricky+"\n" {
		t.Errorf("argv exec env: printenv printed %q, want %q", r.Stdout, tricky+"\n")
	}
	if out := f.sh(sb.ID, `printf %s "${CF_TRICKY-unset}"`); out != "unset" {
		t.Errorf("one exec's env leaked into the next: CF_TRICKY=%q", out)
	}
	if out := f.sh(sb.ID, `command -v sh >/dev/null && echo ok`); out != "ok\n" {
		t.Errorf("PATH does not find sh: %q", out)
	}
}

func caseExecCwd(t T, p providers.Provider) {
	f := newFix(t, p)
	sb := f.sandbox()
	if out := f.sh(sb.ID, "pwd"); out != workspace+"\n" {
		t.Errorf("default cwd %q, want %q", out, workspace)
	}
	if r := f.exec(sb.ID, providers.ExecRequest{Argv: []string{"pwd"}, Cwd: "/tmp"}); r.Stdout != "/tmp\n" {
		t.Errorf("Cwd /tmp: pwd printed %q (exit %d, stderr %s)", r.Stdout, r.ExitCode, clip(r.Stderr))
	}
	f.sh(sb.ID, "mkdir -p sub/dir && echo hi > sub/dir/rel.txt")
	if r := f.exec(sb.ID, providers.ExecRequest{Shell: "pwd; cat rel.txt", Cwd: workspace + "/sub/dir"}); r.Stdout != workspace+"/sub/dir\nhi\n" {
		t.Errorf("Cwd %s/sub/dir: printed %q (exit %d, stderr %s)", workspace, r.Stdout, r.ExitCode, clip(r.Stderr))
	}
	if got := f.readFile(sb.ID, providers.ReadFileRequest{Path: workspace + "/sub/dir/rel.txt"}); string(got) != "hi\n" {
		t.Errorf("a file written with a relative path by exec reads back as %q through ReadFile", got)
	}
}

func caseExecStdin(t T, p providers.Provider) {
	f := newFix(t, p)
	sb := f.sandbox()
	const size = 6 << 20
	in := newPayload(1, size)
	out := newHashWriter()
	r := f.exec(sb.ID, providers.ExecRequest{Argv: []string{"cat"}, Stdin: in, Stdout: out})
	if r.ExitCode != 0 {
		t.Errorf("cat of %d bytes of stdin: exit %d; stderr: %s", size, r.ExitCode, clip(r.Stderr))
	}
	if out.n != size || out.sum() != in.sum() {
		t.Errorf("stdin through cat: got %d bytes, want %d; equal hashes: %v", out.n, size, out.sum() == in.sum())
	}

	r = f.exec(sb.ID, providers.ExecRequest{Shell: `read a; read b; printf '%s+%s' "$a" "$b"`, Stdin: strings.NewReader("one\ntwo\n")})
	if r.Stdout != "one+two" {
		t.Errorf("read from stdin: %q, want %q", r.Stdout, "one+two")
	}

	// Without Stdin the command must see end of input at once, not wait.
	r = f.exec(sb.ID, providers.ExecRequest{Argv: []string{"cat"}, Timeout: f.e.scale(30 * time.Second)})
	if r.TimedOut || r.ExitCode != 0 || r.Stdout != "" {
		t.Errorf("cat without Stdin: exit %d, timed out %v, stdout %q; want an immediate empty end of input", r.ExitCode, r.TimedOut, clip(r.Stdout))
	}
}

func caseExecArgvShell(t T, p providers.Provider) {
	f := newFix(t, p)
	sb := f.sandbox()
	r := f.exec(sb.ID, providers.ExecRequest{Argv: []string{"printf", "%s|", "a b", "$HOME", "*", "'q'", "", "x;y"}})
	if want := "a b|$HOME|*|'q'||x;y|"; r.Stdout != want {
		t.Errorf("argv is not passed verbatim: printed %q, want %q", r.Stdout, want)
	}
	if out := f.sh(sb.ID, `X="1 2"; printf '%s|' $X "$X"`); out != "1|2|1 2|" {
		t.Errorf("shell word splitting: %q, want %q", out, "1|2|1 2|")
	}
	if out := f.sh(sb.ID, `echo abc | tr a-z A-Z && echo ok`); out != "ABC\nok\n" {
		t.Errorf("shell pipeline: %q", out)
	}
	_, err := f.tryExec(sb.ID, providers.ExecRequest{Argv: []string{"true"}, Shell: "true"})
	f.wantCode("Exec with both Argv and Shell", err, providers.InvalidArgument)
	_, err = f.tryExec(sb.ID, providers.ExecRequest{})
	f.wantCode("Exec with neither Argv nor Shell", err, providers.InvalidArgument)
}

// patternWriter checks, as it arrives, that output repeats pat.
type patternWriter struct {
	pat []byte
	n   int64
	bad int64 // offset of the first wrong byte, -1 while all are right
}

func newPatternWriter(pat string) *patternWriter { return &patternWriter{pat: []byte(pat), bad: -1} }

func (w *patternWriter) Write(b []byte) (int, error) {
	for i, c := range b {
		if w.bad < 0 && c != w.pat[(w.n+int64(i))%int64(len(w.pat))] {
			w.bad = w.n + int64(i)
		}
	}
	w.n += int64(len(b))
	return len(b), nil
}

func caseExecLargeOutput(t T, p providers.Provider) {
	f := newFix(t, p)
	sb := f.sandbox()
	const outSize, errSize = 20 << 20, 2 << 20
	out, errw := newPatternWriter("0123456789abcde\n"), newPatternWriter("EEEEEEE\n")
	// Both streams at once, so that a provider that multiplexes them has to
	// keep them apart under load.
	script := fmt.Sprintf(`yes 0123456789abcde | head -c %d & yes EEEEEEE | head -c %d >&2 & wait`, outSize, errSize)
	r := f.exec(sb.ID, providers.ExecRequest{Shell: script, Stdout: out, Stderr: errw})
	if r.ExitCode != 0 {
		t.Errorf("exit %d", r.ExitCode)
	}
	for _, c := range []struct {
		name string
		w    *patternWriter
		want int64
	}{{"stdout", out, outSize}, {"stderr", errw, errSize}} {
		if c.w.n != c.want {
			t.Errorf("%s: got %d bytes, want %d", c.name, c.w.n, c.want)
		}
		if c.w.bad >= 0 {
			t.Errorf("%s: wrong byte at offset %d", c.name, c.w.bad)
		}
	}
}

// treeScript starts a detached grandchild that appends to a heartbeat file
// until it is killed, waits until it beats, says "started" and then sleeps.
// marker is in the grandchild's and the shell's command lines.
func treeScript(marker string) string {
	return fmt.Sprintf(`gc='while :; do printf . >> %[1]s/heartbeat; sleep 0.1; done # %[2]s'
if command -v setsid >/dev/null 2>&1; then setsid sh -c "$gc" & else sh -c "$gc" & fi
while [ ! -s %[1]s/heartbeat ]; do sleep 0.05; done
echo started
while :; do sleep 1; done # %[2]s`, workspace, marker)
}

// checkNoSurvivor looks, from a later exec, for any process left of
// treeScript: by its marker in /proc/*/cmdline (no process of the scan
// itself carries the marker: it comes in through the environment), and by a
// heartbeat that still grows, which also finds survivors in a pid
// namespace the later exec cannot see. Survivors fail the check unless
// they are gone within grace: a cancelled call returns at once on the
// caller's side, while the provider may still be killing.
func checkNoSurvivor(f *fix, id, marker string, grace time.Duration) {
	f.t.Helper()
	const scan = `if [ -r /proc/self/cmdline ]; then
	for p in /proc/[0-9]*; do
		c=$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null) || continue
		case "$c" in *"$CF_MARKER"*) echo "survivor ${p#/proc/}: $c";; esac
	done
else
	echo no-proc >&2
fi
a=$(wc -c < ` + workspace + `/heartbeat); sleep 1; b=$(wc -c < ` + workspace + `/heartbeat)
[ "$a" = "$b" ] || echo "heartbeat still growing: $a -> $b bytes"`
	deadline := time.Now().Add(grace)
	for {
		r := f.exec(id, providers.ExecRequest{Shell: scan, Env: map[string]string{"CF_MARKER": marker}})
		if r.ExitCode != 0 {
			f.t.Errorf("survivor scan: exit %d; stderr: %s", r.ExitCode, clip(r.Stderr))
			return
		}
		out := strings.TrimSpace(r.Stdout)
		if out == "" {
			if strings.Contains(r.Stderr, "no-proc") {
				f.t.Logf("no /proc in the sandbox: survivors checked by heartbeat only")
			}
			return
		}
		if time.Now().After(deadline) {
			f.t.Errorf("processes of the killed command survived:\n%s", out)
			return
		}
		select {
		case <-f.ctx.Done():
			f.t.Errorf("processes of the killed command survived until the case's end:\n%s", out)
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func caseExecTimeout(t T, p providers.Provider) {
	f := newFix(t, p)
	sb := f.sandbox()
	marker := "cfmark" + f.e.runID + randomID()
	r := f.exec(sb.ID, providers.ExecRequest{Shell: treeScript(marker), Timeout: f.e.scale(5 * time.Second)})
	if !strings.Contains(r.Stdout, "started") {
		t.Fatalf("the command never started its grandchild (stdout %q, stderr %s, exit %d)", r.Stdout, clip(r.Stderr), r.ExitCode)
	}
	if !r.TimedOut {
		t.Errorf("a command that outlived its timeout: TimedOut is false (exit %d, signal %q)", r.ExitCode, r.Signal)
	}
	// The result comes after the kill, so nothing may be left by now.
	checkNoSurvivor(f, sb.ID, marker, 0)
	// The sandbox stays usable after a timeout.
	if out := f.sh(sb.ID, "echo alive"); out != "alive\n" {
		t.Errorf("exec after a timeout printed %q", out)
	}
}

// signalWriter closes ready once the output so far contains want, and
// logs the moment.
type signalWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	want  string
	ready chan struct{}
	log   *eventLog
}

func newSignalWriter(want string, log *eventLog) *signalWriter {
	return &signalWriter{want: want, ready: make(chan struct{}), log: log}
}

func (w *signalWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	seen := strings.Contains(w.buf.String(), w.want)
	w.buf.Write(b)
	if !seen && strings.Contains(w.buf.String(), w.want) {
		w.log.add("output " + strconv.Quote(w.want) + " received")
		close(w.ready)
	}
	return len(b), nil
}

func (w *signalWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func caseExecCancel(t T, p providers.Provider) {
	f := newFix(t, p)
	sb := f.sandbox()
	marker := "cfmark" + f.e.runID + randomID()
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	// Cancel once the grandchild beats, so the exec is sure to be running
	// with its whole tree. Polling the file works whether or not the
	// provider streams output; the exec's own timeout is far away.
	cancelled := make(chan struct{})
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			var b bytes.Buffer
			if _, err := f.get(sb.ID, providers.ReadFileRequest{Path: workspace + "/heartbeat"}, &b); err == nil && b.Len() > 0 {
				close(cancelled)
				cancel()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	_, err := p.Exec(ctx, sb.ID, providers.ExecRequest{Shell: treeScript(marker), Timeout: f.e.scale(2 * time.Minute)})
	select {
	case <-cancelled:
	default:
		t.Fatalf("Exec returned before the suite cancelled it: %v", err)
	}
	switch {
	case err == nil:
		t.Errorf("Exec whose context was cancelled returned no error")
	case !errors.Is(err, context.Canceled) && providers.CodeOf(err) != providers.DeadlineExceeded:
		t.Errorf("Exec whose context was cancelled: %v (code %s); want context.Canceled or DeadlineExceeded", err, providers.CodeOf(err))
	}
	checkNoSurvivor(f, sb.ID, marker, f.e.scale(15*time.Second))
}

func caseExecStreaming(t T, p providers.Provider) {
	f := newFix(t, p)
	sb := f.sandbox()
	// The command prints, then waits for a file that the suite writes only
	// after the print reached it. It can say "saw-go" only if output
	// arrived while it was still running; a provider that delivers output
	// at the end makes it give up instead. No clock is involved in the
	// verdict: the wait is long only so that it ends.
	gofile := workspace + "/go"
	script := fmt.Sprintf(`echo first
n=0
while [ ! -e %s ]; do
	n=$((n+1)); if [ $n -gt %d ]; then echo gave-up; exit 0; fi
	sleep 0.05
done
echo saw-go`, gofile, int(f.e.scale(60*time.Second)/(50*time.Millisecond)))
	var events eventLog
	out := newSignalWriter("first", &events)
	wrote := make(chan error, 1)
	go func() {
		select {
		case <-out.ready:
		case <-f.ctx.Done():
			wrote <- f.ctx.Err()
			return
		}
		err := f.put(sb.ID, gofile, 0, strings.NewReader("go"))
		events.add("go file written")
		wrote <- err
	}()
	r := f.exec(sb.ID, providers.ExecRequest{Shell: script, Stdout: out, Timeout: f.e.scale(2 * time.Minute)})
	events.add("exec returned")
	if err := <-wrote; err != nil {
		t.Errorf("WriteFile while the command runs: %v", err)
	}
	if !strings.Contains(out.String(), "saw-go") {
		t.Errorf("output arrived only after the command ended (stdout %q; events: %s)", out.String(), &events)
	}
	if r.ExitCode != 0 {
		t.Errorf("exit %d; stderr: %s", r.ExitCode, clip(r.Stderr))
	}
}
