package fakedeno

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// process is one spawn: bwrap running the command in a process group of
// its own. Processes it leaves in the background live on, as in Deno's VM,
// until the sandbox stops; every one carries the sandbox's marker.
type process struct {
	pid    int
	cmd    *exec.Cmd
	exited chan struct{}
	mu     sync.Mutex
	signal string // the signal processKill sent, if any
	code   int
	sig    *string
}

var signals = map[string]syscall.Signal{
	"SIGTERM": syscall.SIGTERM, "SIGKILL": syscall.SIGKILL, "SIGINT": syscall.SIGINT,
	"SIGHUP": syscall.SIGHUP, "SIGQUIT": syscall.SIGQUIT, "SIGUSR1": syscall.SIGUSR1, "SIGUSR2": syscall.SIGUSR2,
}

func itoa(n int) string { return strconv.Itoa(n) }

// kill signals the command's process group.
func (p *process) kill(name string) {
	p.mu.Lock()
	if p.signal == "" {
		p.signal = name
	}
	p.mu.Unlock()
	if p.cmd.Process != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, signals[name])
	}
}

type spawnParams struct {
	Command       string            `json:"command"`
	Args          []string          `json:"args"`
	Env           map[string]string `json:"env"`
	ClearEnv      bool              `json:"clearEnv"`
	Cwd           string            `json:"cwd"`
	StdinStreamID *int              `json:"stdinStreamId"`
	Stdout        string            `json:"stdout"`
	Stderr        string            `json:"stderr"`
	// spawnDeno
	Code       *string  `json:"code"`
	Extension  string   `json:"extension"`
	Entrypoint *string  `json:"entrypoint"`
	ScriptArgs []string `json:"scriptArgs"`
}

func (c *conn) spawn(ctx context.Context, params json.RawMessage) (any, *serializedError, *rpcError) {
	var p spawnParams
	if e := decode(params, &p); e != nil {
		return nil, nil, e
	}
	if p.Command == "" {
		c.drop(p.StdinStreamID)
		return nil, nil, invalidParams(errors.New("command is required"))
	}
	return c.start(ctx, p, append([]string{p.Command}, p.Args...), false)
}

var extensions = []string{"js", "cjs", "mjs", "ts", "cts", "mts", "jsx", "tsx"}

func (c *conn) spawnDeno(ctx context.Context, params json.RawMessage) (any, *serializedError, *rpcError) {
	var p spawnParams
	if e := decode(params, &p); e != nil {
		return nil, nil, e
	}
	if c.s.deno == "" {
		c.drop(p.StdinStreamID)
		return nil, appError("NotFound", "ENOENT", "deno is not installed on the fake's machine"), nil
	}
	var entry string
	switch {
	case p.Code != nil:
		if !slices.Contains(extensions, p.Extension) {
			c.drop(p.StdinStreamID)
			return nil, nil, invalidParams(fmt.Errorf("extension must be one of %v", extensions))
		}
		name := "/tmp/.deno-run-" + randomHex(6) + "." + p.Extension
		host, _ := c.sb.resolve(name)
		if err := os.WriteFile(host, []byte(*p.Code), 0o644); err != nil {
			c.drop(p.StdinStreamID)
			return nil, appError("Error", "", err.Error()), nil
		}
		entry = name
	case p.Entrypoint != nil:
		entry = *p.Entrypoint
	default:
		c.drop(p.StdinStreamID)
		return nil, nil, invalidParams(errors.New("spawnDeno needs code and extension, or entrypoint"))
	}
	// Inside the sandbox deno is where bindArgs put it: its host path
	// may lie under a folder the sandbox has of its own (/tmp).
	argv := append([]string{denoBin + "/deno", "run", "--allow-all", "--quiet", entry}, p.ScriptArgs...)
	return c.start(ctx, p, argv, true)
}

// drop drains an inbound stream that no process will read.
func (c *conn) drop(id *int) {
	if id == nil {
		return
	}
	if r, ok := c.claim(*id); ok {
		go func() { _, _ = io.Copy(io.Discard, r) }()
	}
}

// baseEnv is the VM's environment: the user app, its home, and the way out
// through the fake's proxy, which knows the sandbox by the proxy user name.
func (c *conn) baseEnv() map[string]string {
	env := map[string]string{
		"PATH": denoBin + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME": "/home/app", "USER": "app", "LANG": "C.UTF-8",
		"DENO_DEPLOY_ORGANIZATION_ID": "org_fake",
	}
	if c.s.proxyAddr != "" {
		proxy := "http://" + c.sb.id + "@" + c.s.proxyAddr
		for _, k := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"} {
			env[k] = proxy
		}
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	maps.Copy(env, c.sb.env)
	for name, sec := range c.sb.secrets {
		env[name] = sec.placeholder
	}
	return env
}

func (c *conn) start(ctx context.Context, p spawnParams, argv []string, denoProc bool) (any, *serializedError, *rpcError) {
	cwd := p.Cwd
	if cwd == "" {
		cwd = "/home/app"
	}
	cwd = path.Clean(cwd)
	if !path.IsAbs(cwd) {
		c.drop(p.StdinStreamID)
		return nil, appError("TypeError", "", "cwd must be absolute"), nil
	}
	if host, _ := c.sb.resolve(cwd); !isDir(host) {
		c.drop(p.StdinStreamID)
		return nil, appError("NotFound", "ENOENT", fmt.Sprintf("No such file or directory (os error 2): cwd %s", cwd)), nil
	}
	env := c.baseEnv()
	if p.ClearEnv {
		env = map[string]string{}
	}
	maps.Copy(env, p.Env)
	args := append(slices.Clone(c.s.root), c.sb.bindArgs(c.s.deno)...)
	var report *waitReport
	if c.s.self != "" {
		args = append(args, "--ro-bind", c.s.self, waitPath)
		argv = append([]string{waitPath}, argv...)
	}
	args = append(args, "--die-with-parent", "--chdir", cwd, "--")
	cmd := exec.Command(c.s.bwrap, append(args, argv...)...)
	for _, k := range slices.Sorted(maps.Keys(env)) {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	cmd.Env = append(cmd.Env, c.sb.marker)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if c.s.self != "" {
		r, w, err := os.Pipe()
		if err != nil {
			c.drop(p.StdinStreamID)
			return nil, appError("Error", "", err.Error()), nil
		}
		defer w.Close() // the waiter holds its own copy
		cmd.ExtraFiles = []*os.File{w}
		cmd.Env = append(cmd.Env, waitEnv+"=1")
		report = &waitReport{r: bufio.NewReader(r), c: r}
	}
	var stdin io.ReadCloser
	if p.StdinStreamID != nil {
		r, ok := c.claim(*p.StdinStreamID)
		if !ok {
			return nil, nil, invalidParams(fmt.Errorf("stream %d is already in use", *p.StdinStreamID))
		}
		stdin = r
		cmd.Stdin = r
	}
	var outs []io.ReadCloser
	var outIDs [2]*int
	for i, mode := range []string{p.Stdout, p.Stderr} {
		if mode != "piped" {
			continue
		}
		r, w, err := os.Pipe()
		if err != nil {
			return nil, appError("Error", "", err.Error()), nil
		}
		if i == 0 {
			cmd.Stdout = w
		} else {
			cmd.Stderr = w
		}
		id := c.newStreamID()
		outIDs[i] = &id
		outs = append(outs, r)
		defer w.Close() // the child holds its own copy
	}
	c.s.mu.Lock()
	if c.sb.stopped {
		c.s.mu.Unlock()
		return nil, appError("Error", "", "the sandbox has stopped"), nil
	}
	pid := c.sb.nextPid
	c.sb.nextPid++
	proc := &process{pid: pid, cmd: cmd, exited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		c.s.mu.Unlock()
		if stdin != nil {
			_ = stdin.Close()
		}
		return nil, appError("NotFound", "ENOENT", err.Error()), nil
	}
	c.s.mu.Unlock()
	if report != nil {
		if msg := report.started(); msg != "" {
			// Deno's spawn of a program that is not there fails, and no
			// process is left.
			_ = cmd.Wait()
			report.c.Close()
			for _, r := range outs {
				_ = r.Close()
			}
			if stdin != nil {
				_ = stdin.Close()
			}
			return nil, appError("NotFound", "ENOENT", fmt.Sprintf("Failed to spawn '%s': %s", argv[1], msg)), nil
		}
	}
	c.s.mu.Lock()
	c.sb.procs[pid] = proc
	c.s.mu.Unlock()

	// The streams start before the answer that names them: the SDK takes
	// either order.
	var pumps sync.WaitGroup
	k := 0
	for _, id := range outIDs {
		if id == nil {
			continue
		}
		c.notify(ctx, "$sandbox.stream.start", map[string]any{"streamId": *id})
		r := outs[k]
		k++
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			c.pump(context.WithoutCancel(ctx), *id, r)
		}()
	}
	go func() {
		err := cmd.Wait()
		// A background process may hold the output pipes: the output
		// ends with the command, a moment later at most.
		drained := make(chan struct{})
		go func() { pumps.Wait(); close(drained) }()
		select {
		case <-drained:
		case <-time.After(500 * time.Millisecond):
			for _, r := range outs {
				_ = r.Close()
			}
			<-drained
		}
		if stdin != nil {
			_ = stdin.Close()
		}
		proc.mu.Lock()
		ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
		var told bool
		if report != nil {
			var sig syscall.Signal
			if proc.code, sig, told = report.ended(); told && sig != 0 {
				name := signalName(sig)
				proc.sig = &name
			}
		}
		switch {
		case told:
		case ws.Signaled():
			proc.code = 128 + int(ws.Signal())
			name := signalName(ws.Signal())
			proc.sig = &name
		case err != nil && cmd.ProcessState == nil:
			proc.code = 1
		default:
			proc.code = ws.ExitStatus()
			// bwrap exits with the command's status; a command killed by a
			// signal shows as 128+N, the SDK's own example says so.
			if proc.signal != "" && proc.code > 128 {
				name := proc.signal
				proc.sig = &name
			}
		}
		proc.mu.Unlock()
		close(proc.exited)
		c.s.mu.Lock()
		// Kept until the sandbox stops, so that a late processWait still
		// finds the status.
		c.s.mu.Unlock()
	}()
	ok := map[string]any{"pid": pid, "stdoutStreamId": outIDs[0], "stderrStreamId": outIDs[1]}
	if denoProc {
		ok["watcherId"] = nil
	}
	return ok, nil, nil
}

func signalName(sig syscall.Signal) string {
	for name, s := range signals {
		if s == sig {
			return name
		}
	}
	return "SIG" + strconv.Itoa(int(sig))
}

func (c *conn) findProc(pid int) *process {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return c.sb.procs[pid]
}

func (c *conn) processWait(ctx context.Context, params json.RawMessage) (any, *serializedError, *rpcError) {
	var p struct {
		Pid int `json:"pid"`
	}
	if e := decode(params, &p); e != nil {
		return nil, nil, e
	}
	proc := c.findProc(p.Pid)
	if proc == nil {
		return nil, appError("NotFound", "ENOENT", fmt.Sprintf("no process %d", p.Pid)), nil
	}
	select {
	case <-proc.exited:
	case <-ctx.Done():
		return nil, nil, &rpcError{Code: 1, Message: "WebSocket closed"}
	}
	proc.mu.Lock()
	defer proc.mu.Unlock()
	// oom is reported with status 137 only; the fake cannot tell.
	return map[string]any{"success": proc.code == 0, "code": proc.code, "signal": proc.sig, "oom": nil}, nil, nil
}

func (c *conn) processKill(_ context.Context, params json.RawMessage) (any, *serializedError, *rpcError) {
	var p struct {
		Pid    int    `json:"pid"`
		Signal string `json:"signal"`
	}
	if e := decode(params, &p); e != nil {
		return nil, nil, e
	}
	if p.Signal == "" {
		p.Signal = "SIGTERM"
	}
	if _, ok := signals[p.Signal]; !ok {
		return nil, nil, invalidParams(fmt.Errorf("unknown signal %q", p.Signal))
	}
	proc := c.findProc(p.Pid)
	if proc == nil {
		return nil, appError("TypeError", "ENOENT", fmt.Sprintf("no process %d", p.Pid)), nil
	}
	select {
	case <-proc.exited:
		return nil, appError("TypeError", "ENOENT", fmt.Sprintf("process %d has exited", p.Pid)), nil
	default:
	}
	proc.kill(p.Signal)
	return nil, nil, nil
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
