package modal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"path"
	"sync"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sandstep/sandstep/providers"
)

// route is how to reach a sandbox's command router.
type route struct {
	taskID, url, jwt string
	exp              time.Time
}

func (p *Provider) setRoute(id string, r *route) {
	p.mu.Lock()
	p.routes[id] = r
	p.mu.Unlock()
}

func (p *Provider) dropRoute(id string) {
	p.mu.Lock()
	delete(p.routes, id)
	p.mu.Unlock()
}

// route returns the sandbox's router access, fetching it when there is
// none, when it is about to expire, or when refresh says the last one was
// refused. A sandbox that has ended answers NotFound; stale says the
// caller believed it running, which makes it a stale container.
func (p *Provider) route(ctx context.Context, op, id string, refresh bool) (*route, error) {
	st, err := p.settings(op)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	r := p.routes[id]
	p.mu.Unlock()
	if r != nil && !refresh && (r.exp.IsZero() || time.Until(r.exp) > 30*time.Second) {
		return r, nil
	}
	task, err := call(ctx, st.c, op, func(ctx context.Context) (*pb.SandboxGetTaskIdResponse, error) {
		return st.c.cp.SandboxGetTaskIdV2(ctx, pb.SandboxGetTaskIdRequest_builder{SandboxId: id, WaitUntilReady: true, Timeout: proto.Float32(50)}.Build())
	})
	if err != nil {
		return nil, err
	}
	if res := task.GetTaskResult(); res != nil || task.GetTaskId() == "" {
		p.dropRoute(id)
		e := &providers.Error{Code: providers.NotFound, Op: op, Message: fmt.Sprintf("sandbox %s has ended (%s)", id, res.GetStatus())}
		if r != nil {
			e.Err = ErrStaleContainer
		}
		return nil, e
	}
	access, err := call(ctx, st.c, op, func(ctx context.Context) (*pb.SandboxGetCommandRouterAccessResponse, error) {
		return st.c.cp.SandboxGetCommandRouterAccess(ctx, pb.SandboxGetCommandRouterAccessRequest_builder{SandboxId: proto.String(id)}.Build())
	})
	if providers.CodeOf(err) == providers.FailedPrecondition {
		// Modal's answer for a task that has finished; its Python client
		// calls it NotFound.
		return nil, &providers.Error{Code: providers.NotFound, Op: op, Message: fmt.Sprintf("sandbox %s has ended", id), Err: ErrStaleContainer}
	}
	if err != nil {
		return nil, err
	}
	r = &route{taskID: task.GetTaskId(), url: access.GetUrl(), jwt: access.GetJwt(), exp: jwtExpOrZero(access.GetJwt())}
	p.setRoute(id, r)
	return r, nil
}

func jwtExpOrZero(tok string) time.Time {
	t, _ := jwtExpiry(tok)
	return t
}

// routed runs a router call with the sandbox's access: it refreshes the
// access once when refused (an expired JWT) or when the task is not found
// (it may have moved), retries transient failures, and reports a
// container that is gone as a stale container.
func routed[T any](ctx context.Context, p *Provider, op, id string, fn func(context.Context, pb.TaskCommandRouterClient, string) (T, error)) (T, error) {
	var zero T
	st, err := p.settings(op)
	if err != nil {
		return zero, err
	}
	refreshed := false
	for attempt := 0; ; attempt++ {
		r, err := p.route(ctx, op, id, refreshed && attempt > 0)
		if err != nil {
			return zero, err
		}
		rc, err := st.c.router(r.url)
		if err != nil {
			return zero, providers.Wrap(providers.Internal, op, err)
		}
		v, err := fn(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+r.jwt), rc, r.taskID)
		if err == nil {
			return v, nil
		}
		if ctx.Err() != nil {
			return zero, providers.Wrap(providers.DeadlineExceeded, op, ctx.Err())
		}
		switch status.Code(err) {
		case codes.Unauthenticated, codes.NotFound:
			if !refreshed {
				refreshed = true
				continue
			}
			if status.Code(err) == codes.NotFound {
				p.dropRoute(id)
				return zero, &providers.Error{Code: providers.NotFound, Op: op, Message: redact(status.Convert(err).Message()), Err: ErrStaleContainer}
			}
		case codes.Unavailable, codes.Unknown, codes.Internal:
			if attempt < st.s.MaxRetries {
				base := st.s.RetryBaseDelay.D() << attempt
				select {
				case <-ctx.Done():
					return zero, providers.Wrap(providers.DeadlineExceeded, op, ctx.Err())
				case <-time.After(base/2 + jitter(base/2)):
				}
				continue
			}
		}
		return zero, mapError(op, err)
	}
}

// execMarker is set in the environment of every command, naming its exec:
// the kill at the deadline finds the whole tree by it, since setsid and
// double forks do not shed an environment variable.
const execMarker = "SANDSTEP_MODAL_EXEC"

// killScript kills every process whose environment names the exec, round
// after round until none is left. grep -z reads the NUL-separated
// environments; the script's own processes do not carry the marker.
const killScript = `m="` + execMarker + `=$1"; i=0
while [ $i -lt 100 ]; do
  found=
  for f in $(grep -lzx -- "$m" /proc/[0-9]*/environ 2>/dev/null); do
    pid=${f#/proc/}; pid=${pid%/environ}
    kill -9 "$pid" 2>/dev/null && found=1
  done
  [ -z "$found" ] && exit 0
  i=$((i+1)); sleep 0.05
done
exit 1`

// grace is how much longer Modal's own exec timeout is than ours, so that
// our kill (of the whole tree) comes first and Modal's is the backstop
// when the plugin is gone.
const grace = 10 * time.Second

// Exec runs a command through the sandbox's command router.
func (p *Provider) Exec(ctx context.Context, id string, req providers.ExecRequest) (providers.ExecResult, error) {
	const op = "exec"
	st, err := p.settings(op)
	if err != nil {
		return providers.ExecResult{}, err
	}
	if err := checkID(op, id); err != nil {
		return providers.ExecResult{}, err
	}
	return p.exec(ctx, st, op, id, req)
}

type waitResult struct {
	code, signal int32
	err          error
}

func (p *Provider) exec(ctx context.Context, st *state, op, id string, req providers.ExecRequest) (providers.ExecResult, error) {
	argv := req.Argv
	switch {
	case len(req.Argv) > 0 && req.Shell != "":
		return providers.ExecResult{}, providers.Errorf(providers.InvalidArgument, op, "set Argv or Shell, not both")
	case req.Shell != "":
		argv = []string{"/bin/sh", "-c", req.Shell}
	case len(argv) == 0 || argv[0] == "":
		return providers.ExecResult{}, providers.Errorf(providers.InvalidArgument, op, "no command: Argv and Shell are empty")
	}
	timeout := firstPositive(req.Timeout, st.defaults.ExecTimeout, 5*time.Minute)
	cwd := req.Cwd
	switch {
	case cwd == "":
		cwd = st.s.Workdir
	case !path.IsAbs(cwd):
		cwd = path.Join(st.s.Workdir, cwd)
	}
	env := maps.Clone(req.Env)
	if env == nil {
		env = map[string]string{}
	}
	for k := range env {
		if err := checkEnvName(k); err != nil {
			return providers.ExecResult{}, providers.Wrap(providers.InvalidArgument, op, err)
		}
	}
	execID := randomHex(16)
	env[execMarker] = execID
	began := time.Now()
	_, err := routed(ctx, p, op, id, func(ctx context.Context, rc pb.TaskCommandRouterClient, task string) (*pb.TaskExecStartResponse, error) {
		return rc.TaskExecStart(ctx, pb.TaskExecStartRequest_builder{
			TaskId: task, ExecId: execID, CommandArgs: argv,
			StdoutConfig: pb.TaskExecStdoutConfig_TASK_EXEC_STDOUT_CONFIG_PIPE,
			StderrConfig: pb.TaskExecStderrConfig_TASK_EXEC_STDERR_CONFIG_PIPE,
			TimeoutSecs:  proto.Uint32(uint32(math.Ceil((timeout + grace).Seconds()))),
			Workdir:      proto.String(cwd),
			Env:          env,
		}.Build())
	})
	if err != nil {
		return providers.ExecResult{}, err
	}

	// The command runs: from here every way out leaves it ended.
	ioCtx, stopIO := context.WithCancel(context.WithoutCancel(ctx))
	defer stopIO()
	var (
		wg      sync.WaitGroup
		errMu   sync.Mutex
		ioErr   error
		failed  = make(chan struct{})
		failure sync.Once
	)
	fail := func(err error) {
		errMu.Lock()
		if ioErr == nil {
			ioErr = err
		}
		errMu.Unlock()
		failure.Do(func() { close(failed) })
	}
	for fd, w := range []io.Writer{req.Stdout, req.Stderr} {
		if w == nil {
			w = io.Discard
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.readOutput(ioCtx, op, id, execID, fd, w); err != nil {
				fail(err)
			}
		}()
	}
	go func() {
		if err := p.writeStdin(ioCtx, op, id, execID, req.Stdin); err != nil {
			fail(err)
		}
	}()
	waitCtx, stopWait := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWait()
	waited := make(chan waitResult, 1)
	go func() { waited <- p.waitExec(waitCtx, op, id, execID) }()

	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var (
		res      waitResult
		timedOut bool
	)
	select {
	case res = <-waited:
	case <-deadline.C:
		timedOut = true
		p.killExec(ctx, st, id, execID)
		res = p.awaitKilled(waited, stopWait)
	case <-failed:
		p.killExec(ctx, st, id, execID)
		res = p.awaitKilled(waited, stopWait)
		errMu.Lock()
		err := ioErr
		errMu.Unlock()
		stopIO()
		wg.Wait()
		return providers.ExecResult{}, err
	case <-ctx.Done():
		p.killExec(ctx, st, id, execID)
		stopWait()
		// No output may reach the caller's writers once Exec returned.
		stopIO()
		wg.Wait()
		return providers.ExecResult{}, providers.Wrap(providers.DeadlineExceeded, op, ctx.Err())
	}
	if res.err != nil {
		return providers.ExecResult{}, res.err
	}
	// Output ends soon after the command; a background process that keeps
	// it open does not hold the result back for long.
	outDone := make(chan struct{})
	go func() { wg.Wait(); close(outDone) }()
	select {
	case <-outDone:
	case <-time.After(5 * time.Second):
		stopIO()
		<-outDone
	}
	errMu.Lock()
	err = ioErr
	errMu.Unlock()
	if err != nil && !errors.Is(err, context.Canceled) {
		return providers.ExecResult{}, err
	}
	out := providers.ExecResult{ExitCode: int(res.code), TimedOut: timedOut, Duration: time.Since(began)}
	if res.signal != 0 {
		out.ExitCode = 128 + int(res.signal)
		out.Signal = signalName(int(res.signal))
	}
	return out, nil
}

// awaitKilled waits for the answer of an exec that was just killed,
// within a bound.
func (p *Provider) awaitKilled(waited <-chan waitResult, stop func()) waitResult {
	select {
	case r := <-waited:
		return r
	case <-time.After(30 * time.Second):
		stop()
		return waitResult{signal: 9}
	}
}

// killExec kills the exec's whole process tree by its marker.
func (p *Provider) killExec(ctx context.Context, st *state, id, execID string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	kill := randomHex(16)
	_, err := routed(ctx, p, "exec", id, func(ctx context.Context, rc pb.TaskCommandRouterClient, task string) (*pb.TaskExecStartResponse, error) {
		return rc.TaskExecStart(ctx, pb.TaskExecStartRequest_builder{
			TaskId: task, ExecId: kill, CommandArgs: []string{"/bin/sh", "-c", killScript, "sh", execID},
			TimeoutSecs: proto.Uint32(30),
		}.Build())
	})
	if err == nil {
		if r := p.waitExec(ctx, "exec", id, kill); r.err == nil && r.code == 0 && r.signal == 0 {
			return
		} else if r.err != nil {
			err = r.err
		}
	}
	if providers.IsNotFound(err) {
		p.log.Debug("the sandbox of an exec to kill has ended", "sandbox_id", id)
		return
	}
	p.log.Warn("killing an exec's processes failed; Modal's own exec timeout ends it", "sandbox_id", id, "error", err)
}

// waitExec waits for an exec to end: TaskExecWait in calls of at most a
// minute, as Modal's clients do.
func (p *Provider) waitExec(ctx context.Context, op, id, execID string) waitResult {
	for {
		r, err := routed(ctx, p, op, id, func(ctx context.Context, rc pb.TaskCommandRouterClient, task string) (*pb.TaskExecWaitResponse, error) {
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			r, err := rc.TaskExecWait(cctx, pb.TaskExecWaitRequest_builder{TaskId: task, ExecId: execID}.Build())
			if err != nil && ctx.Err() == nil && status.Code(err) == codes.DeadlineExceeded {
				return nil, status.Error(codes.Unavailable, "wait again")
			}
			return r, err
		})
		if err != nil {
			if providers.CodeOf(err) == providers.Unavailable && ctx.Err() == nil {
				continue
			}
			return waitResult{err: err}
		}
		if r.HasSignal() {
			return waitResult{signal: r.GetSignal()}
		}
		if r.HasCode() {
			return waitResult{code: r.GetCode()}
		}
	}
}

// readOutput copies one stream of an exec to w, resuming from the offset
// reached when a stream breaks.
func (p *Provider) readOutput(ctx context.Context, op, id, execID string, fd int, w io.Writer) error {
	desc := pb.TaskExecStdioFileDescriptor_TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDOUT
	if fd == 1 {
		desc = pb.TaskExecStdioFileDescriptor_TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDERR
	}
	var off uint64
	for breaks := 0; ; breaks++ {
		stream, err := routed(ctx, p, op, id, func(ctx context.Context, rc pb.TaskCommandRouterClient, task string) (grpc.ServerStreamingClient[pb.TaskExecStdioReadResponse], error) {
			return rc.TaskExecStdioRead(ctx, pb.TaskExecStdioReadRequest_builder{TaskId: task, ExecId: execID, Offset: off, FileDescriptor: desc}.Build())
		})
		if err != nil {
			return err
		}
		for {
			msg, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if breaks < 10 && (status.Code(err) == codes.Unavailable || status.Code(err) == codes.Internal) {
					break
				}
				return mapError(op, err)
			}
			if _, err := w.Write(msg.GetData()); err != nil {
				return fmt.Errorf("%s: writing the command's output: %w", op, err)
			}
			off += uint64(len(msg.GetData()))
		}
	}
}

// stdinChunk is what one TaskExecStdinWrite carries.
const stdinChunk = 1 << 20

// writeStdin copies r to the exec's standard input, then closes it; a nil
// r closes it at once. A failed read of r is the exec's error.
func (p *Provider) writeStdin(ctx context.Context, op, id, execID string, r io.Reader) error {
	var off uint64
	send := func(data []byte, eof bool) error {
		_, err := routed(ctx, p, op, id, func(ctx context.Context, rc pb.TaskCommandRouterClient, task string) (*pb.TaskExecStdinWriteResponse, error) {
			return rc.TaskExecStdinWrite(ctx, pb.TaskExecStdinWriteRequest_builder{TaskId: task, ExecId: execID, Offset: off, Data: data, Eof: eof}.Build())
		})
		off += uint64(len(data))
		return err
	}
	if r == nil {
		return ignoreEnded(send(nil, true))
	}
	buf := make([]byte, stdinChunk)
	for {
		n, rerr := io.ReadFull(r, buf)
		eof := errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF)
		if rerr != nil && !eof {
			return fmt.Errorf("%s: reading the command's input: %w", op, rerr)
		}
		if err := send(buf[:n], eof); err != nil {
			return ignoreEnded(err)
		}
		if eof {
			return nil
		}
	}
}

// ignoreEnded drops the error of a stdin write to a command that has
// ended: it takes no more input, which is not the writer's failure.
func ignoreEnded(err error) error {
	if providers.CodeOf(err) == providers.FailedPrecondition || ctxErr(err) {
		return nil
	}
	return err
}

func ctxErr(err error) bool {
	return errors.Is(err, context.Canceled) || providers.CodeOf(err) == providers.DeadlineExceeded
}

var signalNames = map[int]string{
	1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE",
	9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM",
	24: "SIGXCPU", 25: "SIGXFSZ",
}

func signalName(n int) string {
	if s, ok := signalNames[n]; ok {
		return s
	}
	return fmt.Sprintf("SIG%d", n)
}
