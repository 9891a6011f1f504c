package direct

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/providers"
)

// An exec runs detached inside the sandbox, its output going to files
// there, so that it outlives the request that started it (and the API
// instance, and a Lambda's time limit) and any client can read it from any
// byte offset until the sandbox ends:
//
//	<execDir>/<exec id>/cmd          the command, as shell text
//	<execDir>/<exec id>/in           its standard input (empty unless given)
//	<execDir>/<exec id>/run.sh       the wrapper: cwd, env, timeout, output caps
//	<execDir>/<exec id>/meta.json    what was asked, and when
//	<execDir>/<exec id>/out, err     stdout and stderr, at most max_output_bytes each
//	<execDir>/<exec id>/exit         the exit status, written after out and err are complete
//
// Each stream keeps at most [sandboxes] max_output_bytes; past it the
// command goes on and its further output is dropped (the exec reports
// truncated). The files live in the sandbox's /tmp, so they count against
// its scratch space and end with it.
const execDir = "/tmp/.sandstep/exec"

// Exec limits.
const (
	MaxCommandBytes = 256 << 10
	MaxStdinBytes   = 8 << 20
	MaxEnv          = 128
	// MaxExecTimeout bounds timeout_seconds: an exec runs detached, so it
	// is not held to one request's or one Lambda's time.
	MaxExecTimeout = 24 * time.Hour
	// DefaultExecTimeout applies when the request names none.
	DefaultExecTimeout = 10 * time.Minute
	// timedOutStatus is what timeout(1) exits with when it ended the
	// command, and what an exec the watchdog ended reports.
	timedOutStatus = 124
	// killGrace is how long a timed-out command has between SIGTERM and
	// SIGKILL.
	killGrace = 5
)

// EnvExecID marks every process of an exec, so that its timeout ends them
// all.
const EnvExecID = "SANDSTEP_EXEC_ID"

// ExecRequest is POST /v1/sandboxes/{id}/exec.
type ExecRequest struct {
	Command string
	Argv    []string
	Cwd     string
	Env     map[string]string
	Stdin   []byte
	Timeout time.Duration
	// Background answers at once, with the exec running.
	Background bool
	// KeepAlive lets a background exec keep the sandbox from being idle
	// while it runs (up to its timeout).
	KeepAlive bool
}

// ExecResult is an exec as the API shows it. Output holds the inline
// stdout and stderr, when the exec ended within the wait and its output
// fits inline.
type ExecResult struct {
	ID        string
	Done      bool
	ExitCode  int
	TimedOut  bool
	Stdout    []byte
	Stderr    []byte
	Inline    bool
	StdoutLen int64
	StderrLen int64
	Truncated bool
	StartedAt time.Time
	Timeout   time.Duration
}

type execMeta struct {
	ID         string    `json:"id"`
	StartedAt  time.Time `json:"started_at"`
	TimeoutMS  int64     `json:"timeout_ms"`
	Background bool      `json:"background"`
	MaxBytes   int64     `json:"max_bytes"`
}

var envKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidExecID reports whether id can be an exec's id.
func ValidExecID(id string) bool {
	if !strings.HasPrefix(id, "ex-") || len(id) > 40 {
		return false
	}
	for _, r := range id[3:] {
		if !(r >= 'a' && r <= 'z' || r >= '2' && r <= '7') {
			return false
		}
	}
	return len(id) > 3
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func (s *Service) checkExec(req *ExecRequest) error {
	switch {
	case req.Command == "" && len(req.Argv) == 0:
		return invalid("command", "give command (shell text) or argv")
	case req.Command != "" && len(req.Argv) > 0:
		return invalid("argv", "give command or argv, not both")
	}
	if len(req.Command) > MaxCommandBytes || len(strings.Join(req.Argv, " ")) > MaxCommandBytes {
		return invalid("command", "the command is longer than %d bytes", MaxCommandBytes)
	}
	if strings.ContainsRune(req.Command, 0) || slices.ContainsFunc(req.Argv, func(a string) bool { return strings.ContainsRune(a, 0) }) {
		return invalid("command", "the command holds a NUL byte")
	}
	if req.Cwd != "" && (!strings.HasPrefix(req.Cwd, "/") || strings.ContainsRune(req.Cwd, 0)) {
		return invalid("cwd", "cwd must be an absolute path, not %q", req.Cwd)
	}
	if len(req.Env) > MaxEnv {
		return invalid("env", "at most %d variables, not %d", MaxEnv, len(req.Env))
	}
	for k, v := range req.Env {
		if !envKey.MatchString(k) || strings.ContainsRune(v, 0) {
			return invalid("env", "%q is not a variable name (A-Z, a-z, 0-9, _) with a value without NUL", k)
		}
	}
	if len(req.Stdin) > MaxStdinBytes {
		return invalid("stdin", "stdin is longer than %d bytes", MaxStdinBytes)
	}
	if req.Timeout == 0 {
		req.Timeout = DefaultExecTimeout
	}
	if req.Timeout < time.Second || req.Timeout > MaxExecTimeout {
		return invalid("timeout_seconds", "timeout_seconds must be from 1 to %d", int64(MaxExecTimeout/time.Second))
	}
	return nil
}

// Exec starts a command in the sandbox. Unless it runs in the background,
// it waits for it up to [sandboxes] sync_wait; the result is then done,
// with the output inline when it fits. Otherwise the exec goes on, and its
// output is read by offset (Output).
func (s *Service) Exec(ctx context.Context, caller Caller, id string, req ExecRequest) (ExecResult, error) {
	if err := s.checkExec(&req); err != nil {
		return ExecResult{}, err
	}
	d, err := s.live(ctx, caller, id)
	if err != nil {
		return ExecResult{}, err
	}
	keep := time.Time{}
	if req.KeepAlive {
		keep = s.o.Now().Add(req.Timeout)
	}
	s.touch(ctx, d, keep)
	eid := "ex-" + randomID(10)
	dir := execDir + "/" + eid
	cmd := req.Command
	if cmd == "" {
		q := make([]string, len(req.Argv))
		for i, a := range req.Argv {
			q[i] = shellQuote(a)
		}
		cmd = "exec " + strings.Join(q, " ")
	}
	max := s.o.Config.MaxOutputBytes
	cwd := req.Cwd
	if cwd == "" {
		cwd = "/workspace"
	}
	secs := int64((req.Timeout + time.Second - 1) / time.Second)
	var run strings.Builder
	// head writes a file through stdio's full buffering: without stdbuf
	// (coreutils), output would reach the file only in 4 KiB blocks and at
	// the end, and a reader by offset would see nothing of a slow command.
	fmt.Fprintf(&run, "d=%s\ncap() { if command -v stdbuf > /dev/null; then stdbuf -o0 head -c %d > \"$1\"; else head -c %d > \"$1\"; fi; cat > /dev/null; }\n", shellQuote(dir), max, max)
	// sweep kills every process of the exec: each carries SANDSTEP_EXEC_ID
	// in its environment (inherited, unlike a process group or session,
	// which setsid and setpgid leave), so a timeout ends the whole tree,
	// daemons it started included. Several rounds catch what forked
	// meanwhile.
	fmt.Fprintf(&run, `sweep() { for r in 1 2 3; do for p in /proc/[0-9]*; do if tr '\0' '\n' < "$p/environ" 2>/dev/null | grep -qxF %s; then kill -9 "${p#/proc/}" 2>/dev/null; fi; done; done; }
`, shellQuote(EnvExecID+"="+eid))
	for _, k := range slices.Sorted(mapsKeys(req.Env)) {
		fmt.Fprintf(&run, "export %s=%s\n", k, shellQuote(req.Env[k]))
	}
	// The watchdog: at the timeout (and timeout(1)'s grace to end the
	// command's own group), whatever of the exec still runs, escaped
	// processes and background ones holding its output open included, is
	// killed and the exec ends as timed out. It stops early once the exec
	// ended by itself; once it sweeps, it finishes. A command that
	// timeout(1) ended is swept too, for what left its group without
	// holding the output.
	fmt.Fprintf(&run, `t0=$(date +%%s)
( trap 'kill $s 2>/dev/null; exit 0' TERM; sleep %d & s=$!; wait $s; trap '' TERM; [ -f "$d/exit" ] || { : > "$d/timedout"; sweep; } ) > /dev/null 2>&1 &
w=$!
`, secs+killGrace)
	// The inner group's stdout goes to fd 3 (the outer pipe, stdout's cap)
	// and its stderr to the inner pipe (stderr's cap); the status is
	// renamed to exit only once both caps have written everything, that
	// is once every process holding the output ended.
	fmt.Fprintf(&run, `{ { if cd %s 2>/dev/null || cd /; then %s=%s timeout -k %d %d sh "$d/cmd" < "$d/in"; echo $? > "$d/status"; fi; } 2>&1 1>&3 3>&- | cap "$d/err"; } 3>&1 | cap "$d/out"
kill $w 2>/dev/null
if [ -f "$d/timedout" ] || { [ $(( $(date +%%s) - t0 )) -ge %d ] && grep -qxE '124|137' "$d/status"; }; then sweep; echo %d > "$d/status"; fi
mv "$d/status" "$d/exit"
`, shellQuote(cwd), EnvExecID, eid, killGrace, secs, secs, timedOutStatus)
	ctx = context.WithoutCancel(ctx)
	started := s.o.Now()
	meta, _ := json.Marshal(execMeta{ID: eid, StartedAt: started, TimeoutMS: req.Timeout.Milliseconds(), Background: req.Background, MaxBytes: max})
	// One exec does it all: it writes the exec's files from its stdin,
	// starts the command detached (the provider keeps background
	// descendants running once the exec's own process ended), waits for
	// its exit up to sync_wait unless in the background, and prints the
	// state with the output when it fits inline.
	files := [][]byte{[]byte(cmd + "\n"), req.Stdin, []byte(run.String()), meta}
	var stdin bytes.Buffer
	sizes := make([]any, 0, 5)
	sizes = append(sizes, shellQuote(dir))
	for _, f := range files {
		stdin.Write(f)
		sizes = append(sizes, len(f))
	}
	wait := s.o.Config.SyncWait.D()
	if req.Background {
		wait = 0
	}
	check := ""
	if req.Cwd != "" {
		check = "[ -d " + shellQuote(req.Cwd) + " ] || exit 91\n"
	}
	script := check + fmt.Sprintf(`d=%s
mkdir -p "$d" && head -c %d > "$d/cmd" && head -c %d > "$d/in" && head -c %d > "$d/run.sh" && head -c %d > "$d/meta.json" || exit 90
nohup sh "$d/run.sh" > /dev/null 2>&1 &
`, sizes...) + fmt.Sprintf(`end=$(( $(date +%%s) + %d )); p=0.002
while [ ! -f "$d/exit" ] && [ "$(date +%%s)" -lt "$end" ]; do sleep $p; case $p in 0.002) p=0.01;; 0.01) p=0.05;; esac; done
`, int(wait/time.Second)) + statusScript(s.o.Config.InlineOutputBytes)
	res, err := s.runStatus(ctx, d, eid, providers.ExecRequest{Shell: script, Stdin: &stdin, Timeout: wait + 30*time.Second})
	if err != nil {
		return ExecResult{}, err
	}
	// The command runs: it counts in the sandbox's usage. A count that
	// fails is logged, not the exec's failure.
	if err := s.o.Sandboxes.CountExec(ctx, d.Ledger); err != nil {
		s.log.Warn("count an exec", "sandbox", d.ID, "err", err)
	}
	return res, nil
}

// statusScript prints an exec's state (in the folder $d): the exit status
// or "-", the sizes of stdout and stderr, the meta line; then, once it
// ended with both streams at most inline bytes, stdout and stderr.
func statusScript(inline int) string {
	return fmt.Sprintf(`[ -f "$d/meta.json" ] || { echo missing; exit 0; }
if [ -f "$d/exit" ]; then x=$(cat "$d/exit"); else x=-; fi
o=$(wc -c < "$d/out" 2>/dev/null || echo 0); e=$(wc -c < "$d/err" 2>/dev/null || echo 0)
echo "$x"; echo "$o"; echo "$e"; cat "$d/meta.json"; echo
if [ "$x" != - ] && [ "$o" -le %d ] && [ "$e" -le %d ]; then cat "$d/out" "$d/err" 2>/dev/null; fi
`, inline, inline)
}

// runStatus runs a script ending in statusScript and reads its answer.
func (s *Service) runStatus(ctx context.Context, d store.DirectSandbox, eid string, req providers.ExecRequest) (ExecResult, error) {
	var out bytes.Buffer
	req.Stdout = &out
	r, err := s.o.Provider.Exec(ctx, d.ProviderID, req)
	if err != nil {
		return ExecResult{}, s.sandboxErr(d, err)
	}
	switch r.ExitCode {
	case 90:
		return ExecResult{}, fmt.Errorf("writing the exec's files in sandbox %s failed (is its /tmp full?)", d.ID)
	case 91:
		return ExecResult{}, invalid("cwd", "cwd is not a folder in the sandbox")
	}
	lines := strings.SplitN(out.String(), "\n", 5)
	if len(lines) < 5 || lines[0] == "missing" {
		return ExecResult{}, &Error{Kind: KindNotFound, Message: fmt.Sprintf("exec %q not found in sandbox %s", eid, d.ID)}
	}
	var meta execMeta
	_ = json.Unmarshal([]byte(lines[3]), &meta)
	res := ExecResult{ID: eid, StartedAt: meta.StartedAt, Timeout: time.Duration(meta.TimeoutMS) * time.Millisecond}
	res.StdoutLen, _ = strconv.ParseInt(strings.TrimSpace(lines[1]), 10, 64)
	res.StderrLen, _ = strconv.ParseInt(strings.TrimSpace(lines[2]), 10, 64)
	if meta.MaxBytes > 0 && (res.StdoutLen >= meta.MaxBytes || res.StderrLen >= meta.MaxBytes) {
		res.Truncated = true
	}
	if code := strings.TrimSpace(lines[0]); code != "-" {
		res.Done = true
		res.ExitCode, _ = strconv.Atoi(code)
		res.TimedOut = res.ExitCode == timedOutStatus
	}
	if rest := []byte(lines[4]); res.Done && int64(len(rest)) == res.StdoutLen+res.StderrLen {
		res.Stdout, res.Stderr, res.Inline = rest[:res.StdoutLen], rest[res.StdoutLen:], true
	}
	return res, nil
}

func mapsKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func (s *Service) readAll(ctx context.Context, d store.DirectSandbox, path string) ([]byte, error) {
	var b bytes.Buffer
	_, err := s.o.Provider.ReadFile(ctx, d.ProviderID, providers.ReadFileRequest{Path: path}, &b)
	if providers.IsNotFound(err) {
		return nil, nil
	}
	return b.Bytes(), err
}

// status reads an exec's state from its files in the sandbox, in one
// exec (no output).
func (s *Service) status(ctx context.Context, d store.DirectSandbox, eid string) (ExecResult, error) {
	script := "d=" + shellQuote(execDir+"/"+eid) + "\n" + statusScript(-1)
	return s.runStatus(ctx, d, eid, providers.ExecRequest{Shell: script, Timeout: 30 * time.Second})
}

// Status returns an exec's state (no output).
func (s *Service) Status(ctx context.Context, caller Caller, id, eid string) (ExecResult, error) {
	d, err := s.live(ctx, caller, id)
	if err != nil {
		return ExecResult{}, err
	}
	if !ValidExecID(eid) {
		return ExecResult{}, &Error{Kind: KindNotFound, Message: fmt.Sprintf("exec %q not found", eid)}
	}
	s.touch(ctx, d, time.Time{})
	return s.status(ctx, d, eid)
}

// Chunk is a piece of an exec's output.
type Chunk struct {
	Data []byte
	// Offset is where Data starts; Next where the following read starts.
	Offset, Next int64
	// Done: the exec ended and Next is the end of the stream.
	Done     bool
	ExitCode int
	TimedOut bool
}

// Streams of an exec's output.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
)

// Output reads up to limit bytes of stream from offset. With wait, and
// nothing to read yet while the exec runs, it waits up to wait for output
// or the end. A chunk at the end of an ended exec is Done.
func (s *Service) Output(ctx context.Context, caller Caller, id, eid, stream string, offset, limit int64, wait time.Duration) (Chunk, error) {
	if stream != StreamStdout && stream != StreamStderr {
		return Chunk{}, invalid("stream", "stream must be %q or %q, not %q", StreamStdout, StreamStderr, stream)
	}
	if offset < 0 {
		return Chunk{}, invalid("offset", "offset must be 0 or more")
	}
	d, err := s.live(ctx, caller, id)
	if err != nil {
		return Chunk{}, err
	}
	if !ValidExecID(eid) {
		return Chunk{}, &Error{Kind: KindNotFound, Message: fmt.Sprintf("exec %q not found", eid)}
	}
	s.touch(ctx, d, time.Time{})
	file := execDir + "/" + eid + "/out"
	if stream == StreamStderr {
		file = execDir + "/" + eid + "/err"
	}
	deadline := time.Now().Add(wait)
	for {
		// The status first: output read after it was seen done is
		// complete, since exit is written after both streams.
		st, err := s.status(ctx, d, eid)
		if err != nil {
			return Chunk{}, err
		}
		var b bytes.Buffer
		_, err = s.o.Provider.ReadFile(ctx, d.ProviderID, providers.ReadFileRequest{Path: file, Offset: offset, Limit: limit}, &b)
		if err != nil && !providers.IsNotFound(err) {
			return Chunk{}, s.sandboxErr(d, err)
		}
		size := st.StdoutLen
		if stream == StreamStderr {
			size = st.StderrLen
		}
		// An offset past the end of an ended stream (or past what any
		// stream keeps) never gets data: a client's mistake, not a wait.
		if st.Done && offset > size || offset > s.o.Config.MaxOutputBytes {
			return Chunk{}, invalid("offset", "offset %d is past the end of %s (%d bytes so far)", offset, stream, size)
		}
		c := Chunk{Data: b.Bytes(), Offset: offset, Next: offset + int64(b.Len())}
		if st.Done && c.Next >= size {
			c.Done, c.ExitCode, c.TimedOut = true, st.ExitCode, st.TimedOut
		}
		if len(c.Data) > 0 || c.Done || !time.Now().Before(deadline) {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return c, nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// pathMessage is a provider's not-found message about a path.
func pathMessage(err error) string {
	var pe *providers.Error
	if errors.As(err, &pe) && pe.Message != "" {
		return pe.Message
	}
	return "not found"
}

// sandboxErr turns a provider's error about a sandbox into the answer: a
// sandbox the provider no longer has is closed here and is a conflict.
func (s *Service) sandboxErr(d store.DirectSandbox, err error) error {
	if providers.IsNotFound(err) {
		if _, gerr := s.o.Provider.Get(context.Background(), d.ProviderID); providers.IsNotFound(gerr) {
			return &Error{Kind: KindConflict, Message: fmt.Sprintf("sandbox %s is gone", d.ID), Err: err}
		}
		return &Error{Kind: KindNotFound, Message: pathMessage(err), Err: err}
	}
	var pe *providers.Error
	if errors.As(err, &pe) && pe.Code == providers.InvalidArgument {
		return &Error{Kind: KindInvalid, Message: pe.Error(), Err: err}
	}
	if errors.As(err, &pe) && pe.Code == providers.FailedPrecondition {
		// A path that is a folder where a file was meant, or the reverse:
		// the caller's mistake, not the service's (it was a 500).
		return &Error{Kind: KindInvalid, Message: pathMessage(err), Err: err}
	}
	return err
}

// RunToEnd runs a command and waits for its end (or ctx's), then reads
// its whole output: the synchronous exec of the Sandy-compatible facade,
// whose clients expect the answer when the command has ended.
func (s *Service) RunToEnd(ctx context.Context, caller Caller, id string, req ExecRequest) (ExecResult, error) {
	res, err := s.Exec(ctx, caller, id, req)
	if err != nil {
		return res, err
	}
	for !res.Done {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if res, err = s.Status(ctx, caller, id, res.ID); err != nil {
			return res, err
		}
	}
	if res.Inline {
		return res, nil
	}
	d, err := s.live(ctx, caller, id)
	if err != nil {
		return res, err
	}
	dir := execDir + "/" + res.ID
	if res.Stdout, err = s.readAll(ctx, d, dir+"/out"); err == nil {
		res.Stderr, err = s.readAll(ctx, d, dir+"/err")
	}
	if err != nil {
		return res, s.sandboxErr(d, err)
	}
	res.Inline = true
	return res, nil
}
