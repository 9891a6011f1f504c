package sandy

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandstep/sandstep/providers"
)

// pollWait bounds how long one report waits for news from a running
// command (output, or its end): a silent command costs a request per
// pollWait, output arrives as soon as there is some.
const pollWait = 10 * time.Second

// defaultExecTimeout applies when neither the request nor the host's
// defaults set a timeout.
const defaultExecTimeout = 5 * time.Minute

// minReportChunk is the smallest output chunk a report asks for after
// answers came back cut short.
const minReportChunk = 16 << 10

// maxArg bounds one value passed in an exec's environment: Linux refuses a
// single argument or variable above 128 KiB.
const maxArg = 100 << 10

// Exec runs the command in the background in the sandbox and polls its
// output files, so that output streams while it runs and the timeout is
// ours to enforce. Stdin, when given, is uploaded whole before the command
// starts.
func (p *Provider) Exec(ctx context.Context, id string, req providers.ExecRequest) (providers.ExecResult, error) {
	const op = "exec"
	cfg, err := p.sandboxCall(op, id)
	if err != nil {
		return providers.ExecResult{}, err
	}
	command, err := commandOf(req)
	if err != nil {
		return providers.ExecResult{}, providers.Wrap(providers.InvalidArgument, op, err)
	}
	names := slices.Sorted(maps.Keys(req.Env))
	for _, n := range names {
		if err := checkEnvName(n); err != nil {
			return providers.ExecResult{}, providers.Wrap(providers.InvalidArgument, op, err)
		}
		if err := checkArg("the value of "+n, req.Env[n]); err != nil {
			return providers.ExecResult{}, providers.Wrap(providers.InvalidArgument, op, err)
		}
	}
	cwd := req.Cwd
	switch {
	case cwd == "":
		cwd = workspace
	case !path.IsAbs(cwd):
		cwd = path.Join(workspace, cwd)
	}
	if err := checkArg("the working directory", cwd); err != nil {
		return providers.ExecResult{}, providers.Wrap(providers.InvalidArgument, op, err)
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = cfg.defaults.ExecTimeout
	}
	if timeout <= 0 {
		timeout = defaultExecTimeout
	}

	start := time.Now()
	x := &execution{p: p, cfg: cfg, id: id, execID: randomHex(8), chunk: cfg.s.ReadChunkBytes}
	if req.Stdin != nil {
		x.in = execDir + "/" + x.execID + ".in"
		if err := p.upload(ctx, cfg, op, id, x.in, 0o600, req.Stdin); err != nil {
			return providers.ExecResult{}, err
		}
	}
	startEnv := map[string]string{
		"SS_START": "1",
		"SS_CMD":   command,
		"SS_CWD":   cwd,
		"SS_IN":    x.in,
		"SS_ENVN":  strings.Join(names, " "),
	}
	for _, n := range names {
		startEnv["__ssv_"+n] = req.Env[n]
	}

	deadline := start.Add(timeout)
	var (
		oo, eo   int64
		timedOut bool
		extra    = startEnv
	)
	for {
		wait := min(max(time.Until(deadline), 0), pollWait)
		if timedOut {
			wait = 0
		}
		rep, err := x.report(ctx, extra, oo, eo, wait)
		if err != nil {
			if !providers.IsNotFound(err) {
				x.kill(ctx, true)
			}
			return providers.ExecResult{Duration: time.Since(start)}, err
		}
		extra = nil
		if rep.gone {
			return providers.ExecResult{}, providers.Errorf(providers.Internal, op, "the state of exec %s vanished from sandbox %s", x.execID, id)
		}
		if err := deliver(req.Stdout, rep.out); err != nil {
			x.kill(ctx, true)
			return providers.ExecResult{}, providers.Wrap(providers.Unavailable, op, fmt.Errorf("passing on stdout: %w", err))
		}
		if err := deliver(req.Stderr, rep.err); err != nil {
			x.kill(ctx, true)
			return providers.ExecResult{}, providers.Wrap(providers.Unavailable, op, fmt.Errorf("passing on stderr: %w", err))
		}
		oo += int64(len(rep.out))
		eo += int64(len(rep.err))
		if rep.status != "-" && oo >= rep.outSize && eo >= rep.errSize {
			return result(op, rep, cwd, timedOut, time.Since(start))
		}
		if rep.status == "-" && !timedOut && !time.Now().Before(deadline) {
			if err := x.kill(ctx, false); err != nil {
				return providers.ExecResult{Duration: time.Since(start)}, err
			}
			timedOut = true
		}
	}
}

func deliver(w interface{ Write([]byte) (int, error) }, b []byte) error {
	if w == nil || len(b) == 0 {
		return nil
	}
	_, err := w.Write(b)
	return err
}

// result turns a final report into the exec's result. A shell reports a
// command killed by signal n as status 128+n, as the local provider does.
func result(op string, rep report, cwd string, timedOut bool, d time.Duration) (providers.ExecResult, error) {
	res := providers.ExecResult{Duration: d}
	switch rep.status {
	case "killed":
		res.TimedOut = timedOut
		res.ExitCode = 128 + int(syscall.SIGKILL)
		res.Signal = "SIGKILL"
		return res, nil
	case "cwd":
		return res, providers.Errorf(providers.InvalidArgument, op, "cannot run in %q: %s", cwd, clip(string(rep.err)))
	}
	n, err := strconv.Atoi(rep.status)
	if err != nil {
		return res, providers.Errorf(providers.Internal, op, "the command ended with status %q", rep.status)
	}
	res.ExitCode = n
	if n > 128 && n <= 128+64 {
		res.Signal = unix.SignalName(syscall.Signal(n - 128))
	}
	return res, nil
}

func commandOf(req providers.ExecRequest) (string, error) {
	var cmd string
	switch {
	case len(req.Argv) > 0 && req.Shell != "":
		return "", errors.New("set either Argv or Shell, not both")
	case len(req.Argv) > 0:
		q := make([]string, len(req.Argv))
		for i, a := range req.Argv {
			q[i] = shellQuote(a)
		}
		cmd = "exec " + strings.Join(q, " ")
	case req.Shell != "":
		cmd = req.Shell
	default:
		return "", errors.New("set Argv or Shell")
	}
	return cmd, checkArg("the command", cmd)
}

// checkArg refuses a value the sandbox's kernel would refuse to pass on.
func checkArg(what, v string) error {
	switch {
	case strings.IndexByte(v, 0) >= 0:
		return fmt.Errorf("%s contains a NUL byte", what)
	case len(v) > maxArg:
		return fmt.Errorf("%s is %d bytes, more than the %d one exec can carry; put it in a file", what, len(v), maxArg)
	}
	return nil
}

// execution is one exec in flight.
type execution struct {
	p      *Provider
	cfg    *settings
	id     string
	execID string
	in     string // stdin file in the sandbox, "" without stdin
	chunk  int
}

// report is what execScript prints.
type report struct {
	gone             bool
	status           string
	outSize, errSize int64
	out, err         []byte
}

// report asks for the output beyond oo and eo, waiting up to wait for
// some; extra (the start's parameters) starts the command first.
func (x *execution) report(ctx context.Context, extra map[string]string, oo, eo int64, wait time.Duration) (report, error) {
	const op = "exec"
	for {
		env := map[string]string{
			"SS_ID": x.execID,
			"SS_OO": strconv.FormatInt(oo, 10),
			"SS_EO": strconv.FormatInt(eo, 10),
			"SS_C":  strconv.Itoa(x.chunk),
			"SS_W":  strconv.FormatInt(wait.Milliseconds(), 10),
		}
		maps.Copy(env, extra)
		a, err := x.cfg.c.exec(ctx, op, x.id, execScript, env, wait+execTimeoutMargin, true)
		if err != nil {
			return report{}, err
		}
		if a.ExitCode != 0 {
			return report{}, providers.Errorf(providers.Internal, op, "the exec helper failed in sandbox %s: exit %d: %s", x.id, a.ExitCode, clip(a.Stderr))
		}
		rep, err := parseReport(a.Stdout)
		if err == nil {
			return rep, nil
		}
		// Output cut short on its way: ask for less at a time.
		if x.chunk <= minReportChunk {
			return report{}, providers.Errorf(providers.Internal, op, "reading the output of exec %s: %v", x.execID, err)
		}
		x.chunk /= 2
		x.p.log.Debug("an exec report came back incomplete; asking for smaller chunks", "id", x.id, "chunk", x.chunk, "error", err)
	}
}

func parseReport(s string) (report, error) {
	if strings.TrimSpace(s) == "gone" {
		return report{gone: true}, nil
	}
	lines := strings.Split(s, "\n")
	var rep report
	f := strings.Fields(lines[0])
	if len(f) != 4 || f[0] != "S" {
		return rep, fmt.Errorf("unexpected report %q", clip(s))
	}
	rep.status = f[1]
	var err1, err2 error
	rep.outSize, err1 = strconv.ParseInt(f[2], 10, 64)
	rep.errSize, err2 = strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil {
		return rep, fmt.Errorf("unexpected report header %q", lines[0])
	}
	e := slices.Index(lines, "E")
	z := slices.Index(lines, "Z")
	if e < 1 || z < e {
		return rep, errors.New("the report is incomplete")
	}
	var err error
	if rep.out, err = decodeLines(lines[1:e]); err != nil {
		return rep, err
	}
	if rep.err, err = decodeLines(lines[e+1 : z]); err != nil {
		return rep, err
	}
	return rep, nil
}

// decodeLines decodes base64 split over lines.
func decodeLines(lines []string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(strings.Join(lines, ""))
	if err != nil {
		return nil, fmt.Errorf("decoding base64 output: %w", err)
	}
	return b, nil
}

// kill kills the exec's processes. It runs even when ctx is cancelled:
// a cancelled exec must not leave its command running.
func (x *execution) kill(ctx context.Context, final bool) error {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	env := map[string]string{"SS_ID": x.execID, "SS_IN": x.in}
	if final {
		env["SS_FINAL"] = "1"
	}
	a, err := x.cfg.c.exec(kctx, "exec", x.id, killScript, env, time.Minute, true)
	if err == nil && a.ExitCode != 0 {
		err = providers.Errorf(providers.Internal, "exec", "killing exec %s failed: exit %d: %s", x.execID, a.ExitCode, clip(a.Stderr))
	}
	if err != nil {
		x.p.log.Warn("killing a command failed; it may run on until the sandbox ends", "id", x.id, "exec", x.execID, "error", err.Error())
		return err
	}
	x.p.log.Debug("killed a command", "id", x.id, "exec", x.execID, "report", strings.TrimSpace(a.Stdout))
	return nil
}
