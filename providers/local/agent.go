package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandstep/sandstep/internal/service/logging"
	"github.com/sandstep/sandstep/providers"
)

// File descriptors the plugin hands to bubblewrap, which passes them on to
// the agent. fd 3 is bwrap's --info-fd, which bwrap closes before starting
// the agent.
const (
	fdInfo     = 3
	fdReady    = 4 // the agent writes "ready\n" once it accepts requests
	fdListener = 5 // the listening unix socket, created by the plugin
	fdConfig   = 6 // agentConfig as JSON, then EOF
	// fdBundle is the CA bundle bwrap copies into the sandbox
	// (--ro-bind-data), when it has one; bwrap consumes it.
	fdBundle = 7
	// fdExecGroups is the directory of the sandbox's cgroup, where the
	// agent makes a group per exec (see direct.go), when the plugin has
	// one to give.
	fdExecGroups = 8
)

// agentConfig is what the plugin tells the agent at start. It travels over a
// pipe, not argv or the environment, because Env holds secrets.
type agentConfig struct {
	ID          string        `json:"id"`
	Env         []string      `json:"env"`
	Deadline    time.Time     `json:"deadline"`
	IdleTimeout time.Duration `json:"idle_timeout"`
	Workdir     string        `json:"workdir"`
	Limits      rlimits       `json:"limits"`
	MaxFileSize int64         `json:"max_file_size"`
	// ExecTimeout bounds an exec whose request carries none.
	ExecTimeout time.Duration `json:"exec_timeout"`
	// EgressPort, when set, is where the agent listens on 127.0.0.1 for
	// the plugin's egress proxy (see network.go).
	EgressPort int `json:"egress_port,omitempty"`
	// ExecGroups is the cgroup version of the directory at fdExecGroups,
	// 0 when there is none.
	ExecGroups int `json:"exec_groups,omitempty"`
}

type agent struct {
	cfg  agentConfig
	self string
	log  *slog.Logger

	active  atomic.Int64
	lastUse atomic.Int64 // unix nanoseconds

	egress *net.TCPListener // nil without network

	reaper *reaper
	groups *execGroups // nil: every exec goes through a shim
}

func runAgent() int {
	closeInheritedFDs(fdReady, fdListener, fdConfig, fdExecGroups)
	// Before anything opens a descriptor that could take its number.
	groupsDir := takeDir(fdExecGroups)
	log := slog.New(logging.NewHandler(os.Stderr, logging.Options{})).With("role", "agent")
	// The agent is the sandbox's pid 1 (bwrap --as-pid-1): when it ends, the
	// kernel ends every process in the sandbox, and from inside the
	// sandbox it receives only the signals it handles. The Go runtime
	// handles nearly all of them, and ends the program on those in
	// fatalSignals unless they are relayed to a channel; so those are, and
	// acted on none but SIGCHLD. Caught rather than ignored, they reach the
	// commands the agent starts with default dispositions. This also keeps
	// a broken stderr pipe (a restarted plugin) from killing it.
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs, fatalSignals...)
	reaper := newReaper()
	go reaper.run(sigs)

	var cfg agentConfig
	cf := os.NewFile(fdConfig, "config")
	err := json.NewDecoder(cf).Decode(&cfg)
	cf.Close()
	if err != nil {
		log.Error("reading config", "err", err)
		return 2
	}
	log = log.With("sandbox_id", cfg.ID)
	self, err := os.Executable()
	if err != nil {
		log.Error("locating own binary", "err", err)
		return 2
	}
	lf := os.NewFile(fdListener, "listener")
	ln, err := net.FileListener(lf)
	lf.Close()
	if err != nil {
		log.Error("listener", "err", err)
		return 2
	}
	// Commands run as our uid; without this they could ptrace the agent or
	// open its file descriptors through /proc.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		log.Error("prctl dumpable", "err", err)
		return 2
	}

	a := &agent{cfg: cfg, self: self, log: log, reaper: reaper, groups: openExecGroups(groupsDir, cfg.ExecGroups)}
	if cfg.EgressPort > 0 {
		if a.egress, err = listenEgress(cfg.EgressPort); err != nil {
			log.Error("egress listener", "err", err)
			return 2
		}
	}
	a.lastUse.Store(time.Now().UnixNano())
	go a.watchLifetime()

	ready := os.NewFile(fdReady, "ready")
	if _, err := ready.WriteString("ready\n"); err != nil {
		log.Error("signalling readiness", "err", err)
		return 2
	}
	ready.Close()

	for {
		conn, err := ln.Accept()
		if err != nil {
			log.Error("accept", "err", err)
			a.shutdown("listener failed")
		}
		go a.handle(conn)
	}
}

// fatalSignals are the signals on which the Go runtime ends a program that
// does not relay them (runtime/sigtab_linux_generic.go: the ones marked
// _SigKill, _SigThrow or _SigPanic, and SIGPIPE on a write to stdout or
// stderr); SIGCHLD, which drives the reaper; and the job control signals,
// which the runtime leaves at their default (stop) unless relayed. The
// runtime catches and drops the others itself. Relaying every signal
// instead costs the agent's start about 0.7 ms: each one enabled is a
// round trip to the runtime's signal thread.
var fatalSignals = []os.Signal{
	unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGILL, unix.SIGTRAP, unix.SIGABRT, unix.SIGBUS,
	unix.SIGFPE, unix.SIGSEGV, unix.SIGPIPE, unix.SIGTERM, unix.SIGSTKFLT, unix.SIGCHLD, unix.SIGSYS,
	unix.SIGCONT, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU,
}

// closeInheritedFDs closes every descriptor a sandbox process could use to
// reach outside: anything inherited without close-on-exec except stdio and
// the descriptors named in keep. The Go runtime's own descriptors are all
// close-on-exec and stay.
func closeInheritedFDs(keep ...int) {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		var fd int
		if _, err := fmt.Sscan(e.Name(), &fd); err != nil || fd <= 2 {
			continue
		}
		kept := false
		for _, k := range keep {
			kept = kept || k == fd
		}
		if kept {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err == nil && flags&unix.FD_CLOEXEC == 0 {
			unix.Close(fd)
		}
	}
}

// watchLifetime ends the sandbox at its deadline and after IdleTimeout
// without requests, even when no plugin is running.
func (a *agent) watchLifetime() {
	deadline := time.NewTimer(time.Until(a.cfg.Deadline))
	var tick <-chan time.Time
	if idle := a.cfg.IdleTimeout; idle > 0 {
		t := time.NewTicker(min(max(idle/10, 50*time.Millisecond), time.Second))
		tick = t.C
	}
	for {
		select {
		case <-deadline.C:
			a.shutdown("lifetime")
		case <-tick:
			if a.active.Load() == 0 && time.Since(time.Unix(0, a.lastUse.Load())) >= a.cfg.IdleTimeout {
				a.shutdown("idle")
			}
		}
	}
}

// shutdown ends the sandbox: the kernel kills every process in a pid
// namespace whose pid 1 exits.
func (a *agent) shutdown(reason string) {
	a.log.Info("sandbox ending", "reason", reason)
	os.Exit(0)
}

func (a *agent) handle(conn net.Conn) {
	defer conn.Close()
	fr := newFrameReader(conn)
	fw := &frameWriter{w: conn}
	typ, b, err := fr.next()
	if err != nil || typ != frameHeader {
		return
	}
	var req request
	if err := json.Unmarshal(b, &req); err != nil {
		_ = fw.writeJSON(frameResult, errResult(providers.InvalidArgument, "bad request: %v", err))
		return
	}
	if req.Op == opEgress {
		a.sendEgress(conn)
		return
	}
	if req.Op == opDial {
		a.dialPort(conn, req.Port)
		return
	}
	if req.Op != opPing {
		a.active.Add(1)
		defer func() {
			a.lastUse.Store(time.Now().UnixNano())
			a.active.Add(-1)
		}()
	}
	var res *result
	switch req.Op {
	case opPing:
		res = &result{}
	case opExec:
		res = a.exec(fr, fw, req)
	case opWrite:
		r := a.writeFile(fr, req)
		res = &r
	case opRead:
		r := a.readFile(fw, req)
		res = &r
	case opList:
		r := a.listFiles(req)
		res = &r
	default:
		r := errResult(providers.InvalidArgument, "unknown operation %q", req.Op)
		res = &r
	}
	if res != nil {
		_ = fw.writeJSON(frameResult, res)
	}
}

// execStatus is how an exec's main process ended: what a shim reports on
// its status pipe, or the agent's own wait status of a command it started.
type execStatus struct {
	Status int    `json:"status"`
	Error  string `json:"error,omitempty"`
}

// exec runs one command (see startCommand). It returns nil when the plugin
// went away mid-exec (the tree is killed and there is no one to answer).
func (a *agent) exec(fr *frameReader, fw *frameWriter, req request) *result {
	start := time.Now()
	res := a.runExec(fr, fw, req)
	if res != nil {
		res.DurationNS = int64(time.Since(start))
	}
	return res
}

func (a *agent) runExec(fr *frameReader, fw *frameWriter, req request) *result {
	fail := func(code providers.Code, format string, args ...any) *result {
		r := errResult(code, format, args...)
		return &r
	}
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return fail(providers.InvalidArgument, "empty command")
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = a.cfg.Workdir
	}
	if !cleanAbs(cwd) {
		return fail(providers.InvalidArgument, "cwd %q must be an absolute, clean path", cwd)
	}
	if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
		return fail(providers.InvalidArgument, "cwd %s is not a directory", cwd)
	}
	timeout := time.Duration(req.TimeoutMS) * time.Millisecond
	if timeout <= 0 {
		timeout = a.cfg.ExecTimeout
	}

	// Every descriptor this exec opened, closed when it returns, except
	// the output pipes' read ends once the pumps own them.
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	pipe := func() (*os.File, *os.File, error) {
		r, w, err := os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	outR, outW, err1 := pipe()
	errR, errW, err2 := pipe()
	if err := errors.Join(err1, err2); err != nil {
		return fail(providers.ResourceExhausted, "pipes: %v", err)
	}
	var stdinR, stdinW *os.File
	if req.Stdin {
		var err error
		if stdinR, stdinW, err = pipe(); err != nil {
			return fail(providers.ResourceExhausted, "pipes: %v", err)
		}
	} else {
		var err error
		if stdinR, err = os.Open(os.DevNull); err != nil {
			return fail(providers.Internal, "open %s: %v", os.DevNull, err)
		}
		files = append(files, stdinR)
	}

	env := mergeEnv(a.cfg.Env, req.Env)
	proc, err := a.startCommand(req.Argv, cwd, env, stdinR, outW, errW)
	// Only the command and its descendants may hold the write ends, or EOF
	// would never come.
	outW.Close()
	errW.Close()
	stdinR.Close()
	if err != nil {
		code := providers.Internal
		if errors.Is(err, syscall.EAGAIN) {
			code = providers.ResourceExhausted
		}
		return fail(code, "starting command: %v", err)
	}

	files = slices.DeleteFunc(files, func(f *os.File) bool { return f == outR || f == errR })
	fwd := &forwarder{fw: fw, on: true}
	outDone, errDone := make(chan struct{}), make(chan struct{})
	go fwd.pump(outR, frameStdout, outDone)
	go fwd.pump(errR, frameStderr, errDone)

	var closeStdinOnce sync.Once
	closeStdin := func() {
		closeStdinOnce.Do(func() {
			if stdinW != nil {
				stdinW.Close()
			}
		})
	}
	clientGone := make(chan struct{})
	go func() {
		defer close(clientGone)
		for {
			typ, b, err := fr.next()
			if err != nil {
				return
			}
			if typ != frameStdin || stdinW == nil {
				continue
			}
			if len(b) == 0 {
				closeStdin()
				continue
			}
			// A command that does not read its stdin makes this fail;
			// the rest of the input is then dropped.
			_, _ = stdinW.Write(b)
		}
	}()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var st execStatus
	timedOut := false
	select {
	case st = <-proc.status:
	case <-timer.C:
		timedOut = true
		st = proc.kill()
	case <-clientGone:
		proc.kill()
		closeStdin()
		proc.done()
		return nil
	}
	closeStdin()
	proc.done()

	// What the command wrote before it ended is in the pipes already; wait
	// for EOF, but only briefly when background processes hold the pipes.
	grace := 100 * time.Millisecond
	if timedOut {
		grace = 2 * time.Second
	}
	waitBoth(outDone, errDone, grace)
	fwd.stop()

	if st.Error != "" {
		return fail(providers.Internal, "%s", st.Error)
	}
	res := &result{TimedOut: timedOut}
	ws := syscall.WaitStatus(st.Status)
	switch {
	case ws.Exited():
		res.ExitCode = ws.ExitStatus()
	case ws.Signaled():
		res.ExitCode = 128 + int(ws.Signal())
		res.Signal = unix.SignalName(ws.Signal())
	}
	return res
}

// running is a started exec: the status of its main process, a way to
// end all of its processes, and what to do once it is over.
type running struct {
	status <-chan execStatus
	// kill ends every process of the exec and returns the main one's
	// status.
	kill func() execStatus
	// done lets go of the exec's resources; background processes it left
	// keep running.
	done func()
}

// startCommand starts argv in the agent's exec fast path (see direct.go)
// or, where that is not available, under a fresh shim.
func (a *agent) startCommand(argv []string, cwd string, env []string, stdin, stdout, stderr *os.File) (*running, error) {
	g, err := a.groups.make()
	if err != nil {
		a.log.Warn("exec groups unavailable; execs go through the shim", "err", err)
		a.groups.off.Store(true)
	}
	if g != nil {
		r, err := a.startDirect(g, argv, cwd, env, stdin, stdout, stderr)
		if err == nil {
			return r, nil
		}
		g.release()
		var oerr errOOMAdj
		if !errors.As(err, &oerr) {
			// Not this command's doing: the next one would fail alike.
			a.log.Warn("exec fast path failed; execs go through the shim", "err", err)
			a.groups.off.Store(true)
		}
	}
	return a.startShim(argv, cwd, env, stdin, stdout, stderr)
}

// startDirect starts the command from the agent itself. A command that
// cannot be run is reported as a shell would, on its stderr with status
// 127 (not found) or 126; other errors send the exec to the shim.
func (a *agent) startDirect(g *execGroup, argv []string, cwd string, env []string, stdin, stdout, stderr *os.File) (*running, error) {
	statusCh := make(chan execStatus, 1)
	r := &running{
		status: statusCh,
		done:   g.release,
	}
	path, err := lookPath(argv[0], envValue(env, "PATH"))
	var waits <-chan unix.WaitStatus
	if err == nil {
		waits, err = a.reaper.start(g, a.cfg.Limits, path, argv, &syscall.ProcAttr{
			Dir:   cwd,
			Env:   env,
			Files: []uintptr{stdin.Fd(), stdout.Fd(), stderr.Fd()},
			Sys:   &syscall.SysProcAttr{Setsid: true},
		})
	}
	var errno syscall.Errno
	if err != nil && !errors.Is(err, os.ErrNotExist) && !errors.As(err, &errno) {
		return nil, err
	}
	if err != nil {
		fmt.Fprintf(stderr, "sandstep: %s: %v\n", argv[0], err)
		code := 126
		if errors.Is(err, os.ErrNotExist) {
			code = 127
		}
		statusCh <- execStatus{Status: code << 8}
		r.kill = func() execStatus { return execStatus{Status: code << 8} }
		return r, nil
	}
	go func() { statusCh <- execStatus{Status: int(<-waits)} }()
	r.kill = func() execStatus {
		if !g.kill(10 * time.Second) {
			a.log.Warn("the processes of an exec outlived the kill", "group", g.name)
		}
		return <-statusCh
	}
	return r, nil
}

// startShim starts the command under a shim: the agent's binary again, as
// the subreaper of the command's process tree (see shim.go).
func (a *agent) startShim(argv []string, cwd string, env []string, stdin, stdout, stderr *os.File) (*running, error) {
	// The shim reports the command's status on this pipe.
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer statusW.Close()
	args := append([]string{"sandstep-shim", roleShim, cwd, a.cfg.Limits.String(), "--"}, argv...)
	cmd := &exec.Cmd{
		Path:        a.self,
		Args:        args,
		Env:         env,
		Stdin:       stdin,
		Stdout:      stdout,
		Stderr:      stderr,
		ExtraFiles:  []*os.File{statusW},
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	if err := cmd.Start(); err != nil {
		statusR.Close()
		return nil, err
	}
	// cmd.Wait is never called: the reaper reaps the shim when it ends,
	// which is when the last of its background descendants has.
	statusCh := make(chan execStatus, 1)
	go func() {
		defer statusR.Close()
		var st execStatus
		if err := json.NewDecoder(statusR).Decode(&st); err != nil {
			st = execStatus{Status: -1, Error: "the exec's supervisor was killed before the command ended (by a process in the sandbox?)"}
		}
		statusCh <- st
	}()
	return &running{
		status: statusCh,
		kill:   func() execStatus { return a.killTree(cmd.Process, statusCh) },
		done:   func() {},
	}, nil
}

// envValue returns the value of key in env.
func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

// killTree asks the shim to kill every process of the exec and returns the
// main process's status. A shim that does not answer is killed itself.
func (a *agent) killTree(shim *os.Process, statusCh <-chan execStatus) execStatus {
	_ = shim.Signal(syscall.SIGTERM)
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case st := <-statusCh:
		return st
	case <-t.C:
		a.log.Warn("exec supervisor did not stop; killing it", "pid", shim.Pid)
		_ = shim.Kill()
		return execStatus{Status: int(syscall.SIGKILL)}
	}
}

func waitBoth(a, b <-chan struct{}, grace time.Duration) {
	t := time.NewTimer(grace)
	defer t.Stop()
	for a != nil || b != nil {
		select {
		case <-a:
			a = nil
		case <-b:
			b = nil
		case <-t.C:
			return
		}
	}
}

// forwarder sends output frames while the exec is being answered and drops
// them afterwards, so that background processes that inherited stdout keep
// a reader and never die of SIGPIPE.
type forwarder struct {
	mu sync.Mutex
	fw *frameWriter
	on bool
}

// pump forwards r until EOF, which may come long after the exec is over.
func (f *forwarder) pump(r *os.File, typ byte, done chan<- struct{}) {
	defer r.Close()
	defer close(done)
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			f.send(typ, buf[:n])
		}
		if err != nil {
			return
		}
	}
}

func (f *forwarder) send(typ byte, b []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.on && f.fw.write(typ, b) != nil {
		f.on = false
	}
}

func (f *forwarder) stop() {
	f.mu.Lock()
	f.on = false
	f.mu.Unlock()
}

// mergeEnv returns base with the overrides applied, in a stable order.
func mergeEnv(base []string, over map[string]string) []string {
	if len(over) == 0 {
		return base
	}
	env := make([]string, 0, len(base)+len(over))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := over[k]; !ok {
			env = append(env, kv)
		}
	}
	keys := make([]string, 0, len(over))
	for k := range over {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+over[k])
	}
	return env
}

// cleanAbs reports whether p is an absolute path with no "." or ".."
// elements, repeated or trailing slashes. Paths are checked again inside the
// sandbox because the agent must not trust the connection more than the plugin.
func cleanAbs(p string) bool {
	return p != "" && filepath.IsAbs(p) && filepath.Clean(p) == p && !strings.ContainsRune(p, 0)
}

// fileCode classifies a file-system error for the caller.
func fileCode(err error) providers.Code {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return providers.NotFound
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return providers.PermissionDenied
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT), errors.Is(err, syscall.EFBIG):
		return providers.ResourceExhausted
	case errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EEXIST),
		errors.Is(err, syscall.ENOTEMPTY):
		// A file where a directory should be, or the reverse.
		return providers.FailedPrecondition
	case errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.ENAMETOOLONG):
		return providers.InvalidArgument
	}
	return providers.Internal
}

func fileErr(err error) result {
	return errResult(fileCode(err), "%v", err)
}

// writeFile streams data frames into a temporary file next to the target and
// renames it into place, so a broken transfer never leaves half a file.
func (a *agent) writeFile(fr *frameReader, req request) result {
	if !cleanAbs(req.Path) || req.Path == "/" {
		return errResult(providers.InvalidArgument, "path %q must be an absolute, clean file path", req.Path)
	}
	mode := fs.FileMode(req.Mode & 0o7777)
	if mode == 0 {
		mode = 0o644
	}
	dir, base := filepath.Split(req.Path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fileErr(err)
	}
	if fi, err := os.Stat(req.Path); err == nil && fi.IsDir() {
		return errResult(providers.FailedPrecondition, "%s is a directory", req.Path)
	}
	tmp, err := os.CreateTemp(dir, "."+base+".sandstep-*")
	if err != nil {
		return fileErr(err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	var n int64
	for {
		typ, b, err := fr.next()
		if err != nil {
			return errResult(providers.Unavailable, "transfer broken after %d bytes: %v", n, err)
		}
		if typ != frameData {
			return errResult(providers.InvalidArgument, "unexpected frame %q in a write", typ)
		}
		if len(b) == 0 {
			break
		}
		n += int64(len(b))
		if a.cfg.MaxFileSize > 0 && n > a.cfg.MaxFileSize {
			return errResult(providers.ResourceExhausted, "%s: larger than the %d byte file size limit", req.Path, a.cfg.MaxFileSize)
		}
		if _, err := tmp.Write(b); err != nil {
			return fileErr(err)
		}
	}
	if err := tmp.Chmod(mode); err != nil {
		return fileErr(err)
	}
	if err := tmp.Close(); err != nil {
		return fileErr(err)
	}
	if err := os.Rename(tmp.Name(), req.Path); err != nil {
		os.Remove(tmp.Name())
		done = true
		return fileErr(err)
	}
	done = true
	return result{Bytes: n}
}

// readFile answers with a header frame once the file is open, then data
// frames, then the result; an error before any data is the result alone.
func (a *agent) readFile(fw *frameWriter, req request) result {
	if !cleanAbs(req.Path) {
		return errResult(providers.InvalidArgument, "path %q must be an absolute, clean path", req.Path)
	}
	if req.Offset < 0 {
		return errResult(providers.InvalidArgument, "negative offset %d", req.Offset)
	}
	f, err := os.Open(req.Path)
	if err != nil {
		return fileErr(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fileErr(err)
	}
	if fi.IsDir() {
		return errResult(providers.FailedPrecondition, "%s is a directory", req.Path)
	}
	if req.Offset > 0 {
		if _, err := f.Seek(req.Offset, io.SeekStart); err != nil {
			return fileErr(err)
		}
	}
	if err := fw.write(frameHeader, []byte("{}")); err != nil {
		return fileErr(err)
	}
	var r io.Reader = f
	if req.Limit > 0 {
		r = io.LimitReader(f, req.Limit)
	}
	buf := make([]byte, chunkSize)
	var n int64
	for {
		m, err := r.Read(buf)
		if m > 0 {
			if werr := fw.write(frameData, buf[:m]); werr != nil {
				return errResult(providers.Unavailable, "transfer broken: %v", werr)
			}
			n += int64(m)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fileErr(err)
		}
	}
	return result{Bytes: n}
}

func (a *agent) listFiles(req request) result {
	if !cleanAbs(req.Path) {
		return errResult(providers.InvalidArgument, "path %q must be an absolute, clean path", req.Path)
	}
	fi, err := os.Stat(req.Path)
	if err != nil {
		return fileErr(err)
	}
	if !fi.IsDir() {
		return errResult(providers.FailedPrecondition, "%s is not a directory", req.Path)
	}
	entries, err := os.ReadDir(req.Path)
	if err != nil {
		return fileErr(err)
	}
	res := result{Entries: make([]wireFile, 0, len(entries))}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			continue // removed while listing
		}
		res.Entries = append(res.Entries, wireFile{
			Name:    e.Name(),
			Size:    info.Size(),
			Mode:    uint32(info.Mode().Perm()),
			IsDir:   info.IsDir(),
			ModTime: info.ModTime(),
		})
	}
	return res
}
