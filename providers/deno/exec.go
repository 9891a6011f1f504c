package deno

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandstep/sandstep/providers"
)

// defaultExecTimeout applies when neither the request nor [sandbox] set one.
const defaultExecTimeout = 10 * time.Minute

type execResult = providers.ExecResult

// Exec spawns the command and streams its output; at the timeout it kills
// it (Deno has no server-side timeout: the SDK kills from the client too).
func (p *Provider) Exec(ctx context.Context, id string, req providers.ExecRequest) (providers.ExecResult, error) {
	const op = "exec"
	cfg, err := p.settings(op)
	if err != nil {
		return execResult{}, err
	}
	argv := req.Argv
	switch {
	case len(argv) > 0 && req.Shell != "":
		return execResult{}, providers.Errorf(providers.InvalidArgument, op, "set Argv or Shell, not both")
	case req.Shell != "":
		argv = []string{"/bin/sh", "-c", req.Shell}
	case len(argv) == 0 || argv[0] == "":
		return execResult{}, providers.Errorf(providers.InvalidArgument, op, "no command")
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = "/workspace"
	}
	if !path.IsAbs(cwd) {
		return execResult{}, providers.Errorf(providers.InvalidArgument, op, "cwd %q is not absolute", cwd)
	}
	for k := range req.Env {
		if !envNameRE.MatchString(k) {
			return execResult{}, providers.Errorf(providers.InvalidArgument, op, "%q cannot be an environment variable name", k)
		}
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = cfg.defaults.ExecTimeout
	}
	if timeout <= 0 {
		timeout = defaultExecTimeout
	}
	rc, err := p.conn(ctx, op, id)
	if err != nil {
		return execResult{}, err
	}
	return p.run(ctx, rc, op, argv, cwd, req.Env, req.Stdin, req.Stdout, req.Stderr, timeout)
}

// run spawns argv and waits for it, its output streamed to stdout and
// stderr (nil discards).
func (p *Provider) run(ctx context.Context, rc *rpcConn, op string, argv []string, cwd string, env map[string]string, stdin io.Reader, stdout, stderr io.Writer, timeout time.Duration) (execResult, error) {
	start := time.Now()
	// Every process of the command inherits the marker, which neither a
	// new process group nor setsid sheds: at the deadline the whole tree
	// dies (Deno's processKill ends the one process).
	marker := randomHex(12)
	penv := maps.Clone(env)
	if penv == nil {
		penv = map[string]string{}
	}
	penv[execMarker] = marker
	params := map[string]any{"command": argv[0], "args": argv[1:], "cwd": cwd, "stdout": "piped", "stderr": "piped", "env": penv}
	var stdinDone <-chan error
	begin := func() {}
	if stdin != nil {
		var sid int
		sid, begin, stdinDone = rc.sendStream(stdin)
		params["stdinStreamId"] = sid
	}
	var spawned struct {
		Pid            int  `json:"pid"`
		StdoutStreamID *int `json:"stdoutStreamId"`
		StderrStreamID *int `json:"stderrStreamId"`
	}
	if err := rc.callThen(ctx, op, "spawn", params, &spawned, begin); err != nil {
		if providers.CodeOf(err) == providers.NotFound && strings.Contains(err.Error(), "cwd") {
			return execResult{}, providers.Errorf(providers.InvalidArgument, op, "cwd %s does not exist in the sandbox", cwd)
		}
		if providers.CodeOf(err) == providers.NotFound {
			var ae *appError
			if errors.As(err, &ae) {
				// The sandbox is there; the program is not.
				return execResult{ExitCode: 127, Duration: time.Since(start)}, writeNote(stderr, fmt.Sprintf("%s: %s\n", argv[0], ae.Message))
			}
		}
		return execResult{}, err
	}
	var wg sync.WaitGroup
	for _, s := range []struct {
		id *int
		w  io.Writer
	}{{spawned.StdoutStreamID, stdout}, {spawned.StderrStreamID, stderr}} {
		if s.id == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = rc.drain(*s.id, s.w)
		}()
	}
	waitCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var status struct {
		Success bool    `json:"success"`
		Code    int     `json:"code"`
		Signal  *string `json:"signal"`
		OOM     *string `json:"oom"`
	}
	err := rc.call(waitCtx, op, "processWait", map[string]any{"pid": spawned.Pid}, &status)
	res := execResult{}
	if err != nil && waitCtx.Err() != nil {
		// The deadline or the caller's cancellation: kill, then collect
		// the status the kill brings.
		killCtx, kcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer kcancel()
		if kerr := rc.call(killCtx, op, "processKill", map[string]any{"pid": spawned.Pid, "signal": "SIGKILL"}, nil); kerr != nil && providers.CodeOf(kerr) != providers.NotFound {
			p.log.Warn("killing a command failed", "id", rc.id, "error", kerr)
		}
		p.killMarked(killCtx, rc, op, marker)
		err = rc.call(killCtx, op, "processWait", map[string]any{"pid": spawned.Pid}, &status)
		if ctx.Err() != nil {
			wg.Wait()
			return execResult{}, providers.Wrap(providers.DeadlineExceeded, op, ctx.Err())
		}
		res.TimedOut = true
	}
	wg.Wait()
	if stdinDone != nil {
		select {
		case <-stdinDone:
		default: // the command did not read it all; nothing is waiting
		}
	}
	if err != nil {
		return execResult{}, err
	}
	res.ExitCode = status.Code
	if status.Signal != nil {
		res.Signal = *status.Signal
	}
	res.OOM = status.OOM != nil
	res.Duration = time.Since(start)
	return res, nil
}

// execMarker is the variable naming an exec in each of its processes.
const execMarker = "SANDSTEP_EXEC_ID"

// killScript kills every process whose environment holds $1, round after
// round while any is found (a dying shell may fork once more).
const killScript = `m="` + execMarker + `=$1"
for round in 1 2 3 4 5 6 7 8 9 10; do
  found=
  for e in /proc/[0-9]*/environ; do
    pid=${e#/proc/}; pid=${pid%/environ}
    [ "$pid" = "$$" ] && continue
    if tr '\0' '\n' < "$e" 2>/dev/null | grep -qxF "$m"; then kill -9 "$pid" 2>/dev/null; found=1; fi
  done
  [ -z "$found" ] && exit 0
  sleep 0.05
done`

// killMarked kills what is left of an exec whose marker is marker.
func (p *Provider) killMarked(ctx context.Context, rc *rpcConn, op, marker string) {
	res, err := p.run0(ctx, rc, op, []string{"/bin/sh", "-c", killScript, "sh", marker})
	if err != nil || res.ExitCode != 0 {
		p.log.Warn("killing the processes of a command failed", "id", rc.id, "exit", res.ExitCode, "error", err)
	}
}

// run0 runs a helper command of the provider's own: no marker, no kill
// of its own beyond the context.
func (p *Provider) run0(ctx context.Context, rc *rpcConn, op string, argv []string) (execResult, error) {
	var spawned struct {
		Pid            int  `json:"pid"`
		StdoutStreamID *int `json:"stdoutStreamId"`
		StderrStreamID *int `json:"stderrStreamId"`
	}
	if err := rc.call(ctx, op, "spawn", map[string]any{"command": argv[0], "args": argv[1:], "cwd": "/", "stdout": "null", "stderr": "null"}, &spawned); err != nil {
		return execResult{}, err
	}
	var status struct {
		Code int `json:"code"`
	}
	err := rc.call(ctx, op, "processWait", map[string]any{"pid": spawned.Pid}, &status)
	return execResult{ExitCode: status.Code}, err
}

func writeNote(w io.Writer, s string) error {
	if w != nil {
		_, _ = io.WriteString(w, s)
	}
	return nil
}

// cleanPath is path.Clean; a path it changes is refused, so that nothing
// resolves out of place.
func cleanPath(p string) string { return path.Clean(p) }

func checkPath(op, p string) error {
	if p == "" || !strings.HasPrefix(p, "/") || cleanPath(p) != p || slices.Contains(strings.Split(p, "/"), "..") {
		return providers.Errorf(providers.InvalidArgument, op, "path %q must be absolute and clean", p)
	}
	return nil
}

// fileStat is Deno's stat.
type fileStat struct {
	IsFile      bool      `json:"isFile"`
	IsDirectory bool      `json:"isDirectory"`
	Size        int64     `json:"size"`
	Mtime       time.Time `json:"mtime"`
	Mode        uint32    `json:"mode"`
}

// WriteFile streams the content to a temporary file beside the target and
// renames it into place, so that a failed write leaves the old file alone.
func (p *Provider) WriteFile(ctx context.Context, id string, f providers.WriteFileRequest) error {
	const op = "write_file"
	if err := checkPath(op, f.Path); err != nil {
		return err
	}
	rc, err := p.conn(ctx, op, id)
	if err != nil {
		return err
	}
	var st fileStat
	switch err := rc.call(ctx, op, "stat", map[string]string{"path": f.Path}, &st); {
	case err == nil && st.IsDirectory:
		return providers.Errorf(providers.FailedPrecondition, op, "%s is a directory", f.Path)
	case err != nil && !providers.IsNotFound(err):
		return err
	}
	dir := path.Dir(f.Path)
	if err := rc.call(ctx, op, "mkdir", map[string]any{"path": dir, "options": map[string]any{"recursive": true}}, nil); err != nil {
		return err
	}
	mode := f.Mode & 0o7777
	if mode == 0 {
		mode = 0o644
	}
	tmp := path.Join(dir, ".sandstep-"+path.Base(f.Path)+"-"+randomHex(6))
	content := f.Content
	if content == nil {
		content = strings.NewReader("")
	}
	sid, begin, sent := rc.sendStream(content)
	err = rc.callThen(ctx, op, "writeFile", map[string]any{"path": tmp, "contentStreamId": sid, "options": map[string]any{"create": true, "mode": mode}}, nil, begin)
	var serr error
	select {
	case serr = <-sent:
	case <-time.After(time.Second):
		// The call ended without the stream: it failed before reading it.
	}
	if err == nil && serr != nil {
		err = providers.Wrap(providers.Unavailable, op, fmt.Errorf("reading the content: %w", serr))
	}
	if err == nil {
		err = rc.call(ctx, op, "rename", map[string]string{"oldPath": tmp, "newPath": f.Path}, nil)
	}
	if err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = rc.call(cctx, op, "remove", map[string]string{"path": tmp}, nil)
		if serr != nil && !errors.Is(err, serr) {
			return providers.Wrap(providers.Unavailable, op, fmt.Errorf("reading the content: %w", serr))
		}
		return err
	}
	return nil
}

// readChunk is how much one fileRead brings.
const readChunk = 1 << 20

// ReadFile streams the file through a file handle, chunk by chunk.
func (p *Provider) ReadFile(ctx context.Context, id string, f providers.ReadFileRequest, w io.Writer) (int64, error) {
	const op = "read_file"
	if err := checkPath(op, f.Path); err != nil {
		return 0, err
	}
	if f.Offset < 0 {
		return 0, providers.Errorf(providers.InvalidArgument, op, "negative offset %d", f.Offset)
	}
	rc, err := p.conn(ctx, op, id)
	if err != nil {
		return 0, err
	}
	var st fileStat
	if err := rc.call(ctx, op, "stat", map[string]string{"path": f.Path}, &st); err != nil {
		return 0, err
	}
	if st.IsDirectory {
		return 0, providers.Errorf(providers.FailedPrecondition, op, "%s is a directory", f.Path)
	}
	var h struct {
		FileHandleID int `json:"fileHandleId"`
	}
	if err := rc.call(ctx, op, "open", map[string]any{"path": f.Path, "options": map[string]any{"read": true}}, &h); err != nil {
		return 0, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = rc.call(cctx, op, "fileClose", map[string]int{"fileHandleId": h.FileHandleID}, nil)
	}()
	if f.Offset > 0 {
		if err := rc.call(ctx, op, "fileSeek", map[string]any{"fileHandleId": h.FileHandleID, "offset": f.Offset, "whence": 0}, nil); err != nil {
			return 0, err
		}
	}
	var n int64
	for f.Limit <= 0 || n < f.Limit {
		want := int64(readChunk)
		if f.Limit > 0 {
			want = min(want, f.Limit-n)
		}
		var chunk struct {
			Data []byte `json:"data"`
		}
		if err := rc.call(ctx, op, "fileRead", map[string]any{"fileHandleId": h.FileHandleID, "length": want}, &chunk); err != nil {
			return n, err
		}
		if len(chunk.Data) == 0 {
			break
		}
		k, err := w.Write(chunk.Data)
		n += int64(k)
		if err != nil {
			return n, providers.Wrap(providers.Unavailable, op, err)
		}
	}
	return n, nil
}

// ListFiles lists a directory, each entry with its stat.
func (p *Provider) ListFiles(ctx context.Context, id string, dir string) ([]providers.FileInfo, error) {
	const op = "list_files"
	if err := checkPath(op, dir); err != nil {
		return nil, err
	}
	rc, err := p.conn(ctx, op, id)
	if err != nil {
		return nil, err
	}
	var st fileStat
	if err := rc.call(ctx, op, "stat", map[string]string{"path": dir}, &st); err != nil {
		return nil, err
	}
	if !st.IsDirectory {
		return nil, providers.Errorf(providers.FailedPrecondition, op, "%s is not a directory", dir)
	}
	var entries []struct {
		Name string `json:"name"`
	}
	if err := rc.call(ctx, op, "readDir", map[string]string{"path": dir}, &entries); err != nil {
		return nil, err
	}
	out := make([]providers.FileInfo, len(entries))
	errs := make([]error, len(entries))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i, e := range entries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			full := path.Join(dir, e.Name)
			var st fileStat
			if err := rc.call(ctx, op, "lstat", map[string]string{"path": full}, &st); err != nil {
				errs[i] = err
				return
			}
			out[i] = providers.FileInfo{Name: e.Name, Path: full, Size: st.Size, Mode: st.Mode & 0o7777, IsDir: st.IsDirectory, ModTime: st.Mtime}
		}()
	}
	wg.Wait()
	var kept []providers.FileInfo
	for i, fi := range out {
		switch {
		case errs[i] == nil:
			kept = append(kept, fi)
		case providers.IsNotFound(errs[i]):
			// removed meanwhile
		default:
			return nil, errs[i]
		}
	}
	return kept, nil
}
