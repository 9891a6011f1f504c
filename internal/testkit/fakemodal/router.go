package fakemodal

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sandstep/sandstep/internal/testkit/bwrapbox"
)

// routerServer is the task command router of every fake sandbox.
type routerServer struct {
	pb.UnimplementedTaskCommandRouterServer
	s *Server
}

// output is one stream of an exec, kept whole so that readers can resume
// from any offset.
type output struct {
	mu     sync.Mutex
	buf    []byte
	closed bool
	notify chan struct{} // closed and replaced on every change
}

func newOutput() *output { return &output{notify: make(chan struct{})} }

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	o.buf = append(o.buf, p...)
	close(o.notify)
	o.notify = make(chan struct{})
	o.mu.Unlock()
	return len(p), nil
}

func (o *output) close() {
	o.mu.Lock()
	if !o.closed {
		o.closed = true
		close(o.notify)
		o.notify = make(chan struct{})
	}
	o.mu.Unlock()
}

// read returns what lies past off, whether the stream is complete, and a
// channel that is closed on the next change.
func (o *output) read(off uint64, max int) ([]byte, bool, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if off > uint64(len(o.buf)) {
		off = uint64(len(o.buf))
	}
	end := min(uint64(len(o.buf)), off+uint64(max))
	return o.buf[off:end], o.closed && end == uint64(len(o.buf)), o.notify
}

// proc is one exec.
type proc struct {
	id      string
	marker  string
	out     [2]*output // stdout, stderr (nil: DEVNULL)
	stdin   io.WriteCloser
	inMu    sync.Mutex
	inOff   uint64
	inEOF   bool
	done    chan struct{}
	code    int32
	signal  int32
	started time.Time
}

// maxChunk is the most one StdioRead message carries.
const maxChunk = 1 << 20

// task finds the running sandbox of a task for a router call. A container
// that is gone answers as Modal's router does.
func (r *routerServer) task(taskID string) (*sandbox, error) {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.tasks[taskID]
	if sb == nil || sb.finished() {
		return nil, status.Errorf(codes.NotFound, "Modal Sandbox with container ID %s not found. This means this Sandbox has already shut down. (Error code: 7KJF5ETD)", taskID)
	}
	return sb, nil
}

func (r *routerServer) proc(taskID, execID string) (*sandbox, *proc, error) {
	sb, err := r.task(taskID)
	if err != nil {
		return nil, nil, err
	}
	r.s.mu.Lock()
	p := sb.procs[execID]
	r.s.mu.Unlock()
	if p == nil {
		return nil, nil, status.Errorf(codes.NotFound, "exec %s not found", execID)
	}
	return sb, p, nil
}

func (r *routerServer) TaskExecStart(_ context.Context, req *pb.TaskExecStartRequest) (*pb.TaskExecStartResponse, error) {
	s := r.s
	sb, err := r.task(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	args := req.GetCommandArgs()
	if len(args) == 0 {
		return nil, status.Error(codes.InvalidArgument, "command_args is empty")
	}
	if req.GetExecId() == "" {
		return nil, status.Error(codes.InvalidArgument, "exec_id is required")
	}
	workdir := sb.workdir
	if req.HasWorkdir() {
		workdir = req.GetWorkdir()
	}
	if !filepath.IsAbs(workdir) {
		return nil, status.Error(codes.InvalidArgument, "workdir must be an absolute path")
	}
	s.mu.Lock()
	if sb.procs[req.GetExecId()] != nil {
		// exec_id is the idempotency key: a repeated start does not re-run.
		s.mu.Unlock()
		return pb.TaskExecStartResponse_builder{}.Build(), nil
	}
	p := &proc{id: req.GetExecId(), marker: "MODAL_FAKE_EXEC=" + s.instance + "-" + req.GetExecId(), done: make(chan struct{}), started: time.Now()}
	sb.procs[p.id] = p
	sb.running++
	sb.last = time.Now()
	s.stats.Execs++
	s.wg.Add(1)
	s.mu.Unlock()

	if req.GetStdoutConfig() == pb.TaskExecStdoutConfig_TASK_EXEC_STDOUT_CONFIG_PIPE {
		p.out[0] = newOutput()
	}
	switch req.GetStderrConfig() {
	case pb.TaskExecStderrConfig_TASK_EXEC_STDERR_CONFIG_PIPE:
		p.out[1] = newOutput()
	case pb.TaskExecStderrConfig_TASK_EXEC_STDERR_CONFIG_STDOUT:
		p.out[1] = p.out[0]
	}
	env := maps.Clone(sb.env)
	maps.Copy(env, req.GetEnv())
	for _, src := range req.GetSecretSources() {
		maps.Copy(env, src.GetEnv().GetContents())
	}
	bargs := append(slices.Clone(s.rootArgs), "--unshare-ipc", "--unshare-uts", "--hostname", "modal")
	if sb.blockNetwork {
		bargs = append(bargs, "--unshare-net")
	}
	for _, sub := range snapshotDirs {
		bargs = append(bargs, "--bind", filepath.Join(sb.dir, sub), "/"+sub)
	}
	bargs = append(bargs, s.optBinds...)
	// Volumes after the sandbox's own directories: one mounted at
	// /workspace takes its place.
	for _, m := range sb.mounts {
		bind := "--bind"
		if m.readOnly {
			bind = "--ro-bind"
		}
		bargs = append(bargs, bind, m.dir, m.path)
	}
	bargs = append(bargs, "--chdir", workdir, "--")
	bargs = append(bargs, args...)
	cmd := exec.Command(s.bwrap, bargs...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8"}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	cmd.Env = append(cmd.Env, sb.marker, p.marker)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if p.out[0] != nil {
		cmd.Stdout = p.out[0]
	}
	if p.out[1] != nil {
		cmd.Stderr = p.out[1]
	}
	// Output that a background process keeps open does not hold the exit.
	cmd.WaitDelay = 500 * time.Millisecond
	stdin, err := cmd.StdinPipe()
	if err == nil {
		p.stdin = stdin
		err = cmd.Start()
	}
	if err != nil {
		p.code = 127
		msg := fmt.Sprintf("exec failed: %v\n", err)
		if p.out[1] != nil {
			_, _ = p.out[1].Write([]byte(msg))
		}
		r.exited(sb, p)
		return pb.TaskExecStartResponse_builder{}.Build(), nil
	}
	var timer *time.Timer
	if req.HasTimeoutSecs() && req.GetTimeoutSecs() > 0 {
		timer = time.AfterFunc(time.Duration(req.GetTimeoutSecs())*time.Second, func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			bwrapbox.KillMarked(p.marker)
		})
	}
	go func() {
		_ = cmd.Wait()
		if timer != nil {
			timer.Stop()
		}
		ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
		switch code := ws.ExitStatus(); {
		case ws.Signaled():
			p.signal = int32(ws.Signal())
		case code > 128 && code <= 128+64:
			// bubblewrap reports a command killed by signal n as exit
			// 128+n; Modal reports the signal. (An explicit exit 129 to
			// 192 is thus seen as a signal: a limit of the fake.)
			p.signal = int32(code - 128)
		default:
			p.code = int32(code)
		}
		r.exited(sb, p)
	}()
	return pb.TaskExecStartResponse_builder{}.Build(), nil
}

func (r *routerServer) exited(sb *sandbox, p *proc) {
	for _, o := range p.out {
		if o != nil {
			o.close()
		}
	}
	s := r.s
	s.mu.Lock()
	sb.running--
	sb.last = time.Now()
	s.mu.Unlock()
	close(p.done)
	s.wg.Done()
}

func (r *routerServer) TaskExecStdioRead(req *pb.TaskExecStdioReadRequest, stream grpc.ServerStreamingServer[pb.TaskExecStdioReadResponse]) error {
	_, p, err := r.proc(req.GetTaskId(), req.GetExecId())
	if err != nil {
		return err
	}
	fd := 0
	if req.GetFileDescriptor() == pb.TaskExecStdioFileDescriptor_TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDERR {
		fd = 1
	}
	o := p.out[fd]
	if o == nil {
		return nil // DEVNULL: nothing, at once
	}
	off := req.GetOffset()
	for {
		data, eof, changed := o.read(off, maxChunk)
		if len(data) > 0 {
			if err := stream.Send(pb.TaskExecStdioReadResponse_builder{Data: data}.Build()); err != nil {
				return err
			}
			off += uint64(len(data))
			continue
		}
		if eof {
			return nil
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return status.FromContextError(stream.Context().Err()).Err()
		}
	}
}

func exitStatus(p *proc) (*int32, *int32) {
	if p.signal != 0 {
		return nil, proto.Int32(p.signal)
	}
	return proto.Int32(p.code), nil
}

func (r *routerServer) TaskExecWait(ctx context.Context, req *pb.TaskExecWaitRequest) (*pb.TaskExecWaitResponse, error) {
	sb, p, err := r.proc(req.GetTaskId(), req.GetExecId())
	if err != nil {
		return nil, err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	// A container that vanished while the command ran takes the command's
	// answer with it.
	if _, err := r.task(sb.taskID); err != nil {
		return nil, err
	}
	code, sig := exitStatus(p)
	return pb.TaskExecWaitResponse_builder{Code: code, Signal: sig}.Build(), nil
}

func (r *routerServer) TaskExecPoll(_ context.Context, req *pb.TaskExecPollRequest) (*pb.TaskExecPollResponse, error) {
	_, p, err := r.proc(req.GetTaskId(), req.GetExecId())
	if err != nil {
		return nil, err
	}
	select {
	case <-p.done:
		code, sig := exitStatus(p)
		return pb.TaskExecPollResponse_builder{Code: code, Signal: sig}.Build(), nil
	default:
		return pb.TaskExecPollResponse_builder{}.Build(), nil
	}
}

// writeStdin writes data at offset: bytes already written are skipped, so
// that a retried write does not repeat them; a gap is an error.
func (r *routerServer) writeStdin(sb *sandbox, p *proc, off uint64, data []byte, eof bool) error {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	r.s.mu.Lock()
	sb.last = time.Now()
	r.s.mu.Unlock()
	if p.inEOF {
		if len(data) == 0 {
			return nil
		}
		return status.Error(codes.FailedPrecondition, "stdin is closed")
	}
	if off > p.inOff {
		return status.Errorf(codes.OutOfRange, "stdin offset %d is past the %d bytes written", off, p.inOff)
	}
	if skip := p.inOff - off; skip < uint64(len(data)) {
		data = data[skip:]
		// A command that exited or closed its input takes no more; that is
		// not the writer's error.
		_, _ = p.stdin.Write(data)
		p.inOff += uint64(len(data))
	}
	if eof {
		p.inEOF = true
		_ = p.stdin.Close()
	}
	return nil
}

func (r *routerServer) TaskExecStdinWrite(_ context.Context, req *pb.TaskExecStdinWriteRequest) (*pb.TaskExecStdinWriteResponse, error) {
	sb, p, err := r.proc(req.GetTaskId(), req.GetExecId())
	if err != nil {
		return nil, err
	}
	if err := r.writeStdin(sb, p, req.GetOffset(), req.GetData(), req.GetEof()); err != nil {
		return nil, err
	}
	return pb.TaskExecStdinWriteResponse_builder{}.Build(), nil
}

func (r *routerServer) TaskExecStdinWriteStream(stream grpc.ClientStreamingServer[pb.TaskExecStdinWriteStreamRequest, pb.TaskExecStdinWriteStreamResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return status.Error(codes.InvalidArgument, "the first message must carry start")
	}
	sb, p, err := r.proc(start.GetTaskId(), start.GetExecId())
	if err != nil {
		return err
	}
	off := start.GetOffset()
	for msg := first; ; {
		if len(msg.GetData()) > 0 || msg.GetEnd() != nil {
			if err := r.writeStdin(sb, p, off, msg.GetData(), msg.GetEnd() != nil); err != nil {
				return err
			}
			off += uint64(len(msg.GetData()))
		}
		if msg.GetEnd() != nil {
			break
		}
		msg, err = stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	return stream.SendAndClose(pb.TaskExecStdinWriteStreamResponse_builder{}.Build())
}

func (r *routerServer) TaskExecStdinStatus(_ context.Context, req *pb.TaskExecStdinStatusRequest) (*pb.TaskExecStdinStatusResponse, error) {
	_, p, err := r.proc(req.GetTaskId(), req.GetExecId())
	if err != nil {
		return nil, err
	}
	p.inMu.Lock()
	defer p.inMu.Unlock()
	return pb.TaskExecStdinStatusResponse_builder{NumBytesWritten: p.inOff, Closed: p.inEOF}.Build(), nil
}

// probe runs one command the way execs run.
func (s *Server) probe() error {
	d, err := os.MkdirTemp(s.dir, "probe-")
	if err != nil {
		return fmt.Errorf("fakemodal: %w", err)
	}
	defer os.RemoveAll(d)
	args := slices.Clone(s.rootArgs)
	for _, sub := range snapshotDirs {
		if err := os.Mkdir(filepath.Join(d, sub), 0o755); err != nil {
			return fmt.Errorf("fakemodal: %w", err)
		}
		args = append(args, "--bind", filepath.Join(d, sub), "/"+sub)
	}
	args = append(args, s.optBinds...)
	args = append(args, "--unshare-net", "--", "/bin/sh", "-c", "test -d /workspace && test -w /tmp")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, s.bwrap, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s cannot run a sandbox here: %v: %s", ErrNoBubblewrap, s.bwrap, err, bytes.TrimSpace(out))
	}
	return nil
}

func hashID(b []byte) string {
	sum := sha256.Sum256(b)
	return strings.ToLower(base32.StdEncoding.EncodeToString(sum[:]))[:22]
}
