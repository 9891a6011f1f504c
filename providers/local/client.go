package local

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"path"
	"time"

	"github.com/sandstep/sandstep/providers"
)

// transportGrace is how long past an exec's own timeout the plugin waits for
// the agent's answer before it gives up on the connection. The agent
// enforces the timeout; this only guards against a stuck agent.
const transportGrace = 30 * time.Second

func (p *Provider) execTimeout(d time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	p.mu.Lock()
	d = p.defaults.ExecTimeout
	p.mu.Unlock()
	if d > 0 {
		return d
	}
	return defaultExecTimeout
}

// conn is one request to a sandbox's agent.
type conn struct {
	net.Conn
	fr        *frameReader
	fw        *frameWriter
	stopWatch func() bool
	sb        *sandbox
	op        string
}

// open connects to the agent of a live sandbox and sends the request. The
// connection is closed when ctx ends, which makes the agent abandon the
// request (an exec's process tree is killed).
func (p *Provider) open(ctx context.Context, op, id string, req request, deadline time.Time) (*conn, error) {
	s, sb, err := p.live(op, id)
	if err != nil {
		return nil, err
	}
	nc, err := dialUnix(ctx, s.sandboxDir(id)+"/agent.sock")
	if err != nil {
		// A refused connection may be an agent on its way out: its
		// socket closes before its process is gone.
		if !sb.rec.alive() || goneWithin(sb.rec, time.Second) {
			p.cleanup(sb.rec)
			return nil, providers.Errorf(providers.NotFound, op, "sandbox %s has ended", id)
		}
		if ctx.Err() != nil {
			return nil, providers.Wrap(providers.DeadlineExceeded, op, ctx.Err())
		}
		return nil, providers.Wrap(providers.Unavailable, op, fmt.Errorf("connecting to sandbox %s: %w", id, err))
	}
	if !deadline.IsZero() {
		_ = nc.SetDeadline(deadline)
	}
	c := &conn{Conn: nc, fr: newFrameReader(nc), fw: &frameWriter{w: nc}, sb: sb, op: op}
	c.stopWatch = context.AfterFunc(ctx, func() { nc.Close() })
	if err := c.fw.writeJSON(frameHeader, req); err != nil {
		c.close()
		return nil, c.broken(ctx, err)
	}
	return c, nil
}

func (c *conn) close() {
	c.stopWatch()
	c.Conn.Close()
}

// broken explains a connection that failed mid-request: the caller gave up,
// the sandbox ended, or the transport failed.
func (c *conn) broken(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return providers.Wrap(providers.DeadlineExceeded, c.op, ctx.Err())
	}
	// When the agent dies, pid 1 follows a moment later: give it that
	// moment before calling the failure transient.
	if goneWithin(c.sb.rec, time.Second) {
		return providers.Errorf(providers.NotFound, c.op, "sandbox %s ended during the request", c.sb.rec.ID)
	}
	return providers.Wrap(providers.Unavailable, c.op, fmt.Errorf("sandbox %s: %w", c.sb.rec.ID, err))
}

// goneWithin reports whether the sandbox's pid 1 is gone, or goes within d.
func goneWithin(rec sandboxRecord, d time.Duration) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		if !rec.alive() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// Exec runs a command and streams its output to req.Stdout and req.Stderr.
func (p *Provider) Exec(ctx context.Context, id string, req providers.ExecRequest) (providers.ExecResult, error) {
	const op = "exec"
	argv := req.Argv
	switch {
	case len(argv) > 0 && req.Shell != "":
		return providers.ExecResult{}, providers.Errorf(providers.InvalidArgument, op, "set either argv or shell, not both")
	case req.Shell != "":
		argv = []string{"/bin/sh", "-c", req.Shell}
	case len(argv) == 0:
		return providers.ExecResult{}, providers.Errorf(providers.InvalidArgument, op, "no command: set argv or shell")
	}
	if req.Cwd != "" && !cleanAbs(req.Cwd) {
		return providers.ExecResult{}, providers.Errorf(providers.InvalidArgument, op, "cwd %q must be an absolute, clean path", req.Cwd)
	}
	for k, v := range req.Env {
		if err := checkEnv(k, v); err != nil {
			return providers.ExecResult{}, providers.Errorf(providers.InvalidArgument, op, "invalid environment variable %q", k)
		}
	}
	timeout := p.execTimeout(req.Timeout)
	oom := p.watchOOM(id)
	c, err := p.open(ctx, op, id, request{
		Op:        opExec,
		Argv:      argv,
		Cwd:       req.Cwd,
		Env:       req.Env,
		Stdin:     req.Stdin != nil,
		TimeoutMS: max(timeout.Milliseconds(), 1),
	}, time.Now().Add(timeout+transportGrace))
	if err != nil {
		return providers.ExecResult{}, err
	}
	defer c.close()

	if req.Stdin != nil {
		go func() {
			buf := make([]byte, chunkSize)
			for {
				n, err := req.Stdin.Read(buf)
				if n > 0 && c.fw.write(frameStdin, buf[:n]) != nil {
					return
				}
				if err != nil {
					// EOF, or a failing reader: either way the command's
					// stdin ends here.
					_ = c.fw.write(frameStdin, nil)
					return
				}
			}
		}()
	}

	for {
		typ, b, err := c.fr.next()
		if err != nil {
			return providers.ExecResult{}, c.broken(ctx, err)
		}
		switch typ {
		case frameStdout, frameStderr:
			w := req.Stdout
			if typ == frameStderr {
				w = req.Stderr
			}
			if w == nil {
				continue
			}
			if _, err := w.Write(b); err != nil {
				return providers.ExecResult{}, providers.Wrap(providers.Internal, op, fmt.Errorf("writing command output: %w", err))
			}
		case frameResult:
			var res result
			if err := json.Unmarshal(b, &res); err != nil {
				return providers.ExecResult{}, providers.Wrap(providers.Internal, op, err)
			}
			if res.Error != nil {
				return providers.ExecResult{}, res.Error.err(op)
			}
			return providers.ExecResult{
				ExitCode: res.ExitCode,
				Signal:   res.Signal,
				TimedOut: res.TimedOut,
				OOM:      oom.killed(res),
				Duration: time.Duration(res.DurationNS),
			}, nil
		}
	}
}

func checkFilePath(op, p string) error {
	if !cleanAbs(p) {
		return providers.Errorf(providers.InvalidArgument, op, "path %q must be absolute and clean (no '.', '..' or repeated slashes)", p)
	}
	return nil
}

// WriteFile streams f.Content into the sandbox. The agent writes a
// temporary file and renames it, so readers never see half a file.
func (p *Provider) WriteFile(ctx context.Context, id string, f providers.WriteFileRequest) error {
	const op = "write_file"
	if err := checkFilePath(op, f.Path); err != nil {
		return err
	}
	if f.Path == "/" {
		return providers.Errorf(providers.InvalidArgument, op, "path / is a directory")
	}
	if f.Content == nil {
		return providers.Errorf(providers.InvalidArgument, op, "no content")
	}
	c, err := p.open(ctx, op, id, request{Op: opWrite, Path: f.Path, Mode: f.Mode}, time.Time{})
	if err != nil {
		return err
	}
	defer c.close()

	readErr := make(chan error, 1)
	go func() {
		buf := make([]byte, chunkSize)
		for {
			n, err := f.Content.Read(buf)
			if n > 0 && c.fw.write(frameData, buf[:n]) != nil {
				readErr <- nil // the agent answered early; its result says why
				return
			}
			if err == io.EOF {
				readErr <- c.fw.write(frameData, nil)
				return
			}
			if err != nil {
				readErr <- fmt.Errorf("reading content: %w", err)
				c.Conn.Close()
				return
			}
		}
	}()

	typ, b, err := c.fr.next()
	if err != nil {
		select {
		case rerr := <-readErr:
			if rerr != nil && ctx.Err() == nil {
				return providers.Wrap(providers.InvalidArgument, op, rerr)
			}
		default:
		}
		return c.broken(ctx, err)
	}
	if typ != frameResult {
		return providers.Errorf(providers.Internal, op, "unexpected frame %q", typ)
	}
	var res result
	if err := json.Unmarshal(b, &res); err != nil {
		return providers.Wrap(providers.Internal, op, err)
	}
	return res.Error.err(op)
}

// ReadFile streams a file (or the part of it from f.Offset, at most f.Limit
// bytes) into w without holding it in memory.
func (p *Provider) ReadFile(ctx context.Context, id string, f providers.ReadFileRequest, w io.Writer) (int64, error) {
	const op = "read_file"
	if err := checkFilePath(op, f.Path); err != nil {
		return 0, err
	}
	if f.Offset < 0 {
		return 0, providers.Errorf(providers.InvalidArgument, op, "negative offset %d", f.Offset)
	}
	c, err := p.open(ctx, op, id, request{Op: opRead, Path: f.Path, Offset: f.Offset, Limit: f.Limit}, time.Time{})
	if err != nil {
		return 0, err
	}
	defer c.close()
	var n int64
	for {
		typ, b, err := c.fr.next()
		if err != nil {
			return n, c.broken(ctx, err)
		}
		switch typ {
		case frameHeader:
		case frameData:
			m, err := w.Write(b)
			n += int64(m)
			if err != nil {
				return n, providers.Wrap(providers.Internal, op, fmt.Errorf("writing file content: %w", err))
			}
		case frameResult:
			var res result
			if err := json.Unmarshal(b, &res); err != nil {
				return n, providers.Wrap(providers.Internal, op, err)
			}
			return n, res.Error.err(op)
		default:
			return n, providers.Errorf(providers.Internal, op, "unexpected frame %q", typ)
		}
	}
}

// ListFiles lists a directory in the sandbox.
func (p *Provider) ListFiles(ctx context.Context, id string, dir string) ([]providers.FileInfo, error) {
	const op = "list_files"
	if err := checkFilePath(op, dir); err != nil {
		return nil, err
	}
	c, err := p.open(ctx, op, id, request{Op: opList, Path: dir}, time.Now().Add(time.Minute))
	if err != nil {
		return nil, err
	}
	defer c.close()
	typ, b, err := c.fr.next()
	if err != nil {
		return nil, c.broken(ctx, err)
	}
	if typ != frameResult {
		return nil, providers.Errorf(providers.Internal, op, "unexpected frame %q", typ)
	}
	var res result
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, providers.Wrap(providers.Internal, op, err)
	}
	if res.Error != nil {
		return nil, res.Error.err(op)
	}
	out := make([]providers.FileInfo, len(res.Entries))
	for i, e := range res.Entries {
		out[i] = providers.FileInfo{
			Name:    e.Name,
			Path:    path.Join(dir, e.Name),
			Size:    e.Size,
			Mode:    e.Mode,
			IsDir:   e.IsDir,
			ModTime: e.ModTime,
		}
	}
	return out, nil
}
