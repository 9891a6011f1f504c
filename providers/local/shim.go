package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// runShim supervises one exec. As a child subreaper it inherits every
// orphaned descendant of the command (double forks and setsid included), so
// the whole tree stays attributed to the exec: on SIGTERM from the agent it
// kills all of it. When the main process ends it reports the status on fd 3
// and stays to reap background descendants, which keep running; it exits
// once the last one is gone.
//
// args: cwd limits -- argv...
func runShim(args []string) int {
	status := os.NewFile(3, "status")
	report := func(st execStatus) {
		if status == nil {
			return
		}
		_ = json.NewEncoder(status).Encode(st)
		status.Close()
		status = nil
	}
	if len(args) < 4 || args[2] != "--" {
		report(execStatus{Status: -1, Error: "bad shim arguments"})
		return 1
	}
	cwd, argv := args[0], args[3:]
	lim, err := parseRlimits(args[1])
	if err != nil {
		report(execStatus{Status: -1, Error: err.Error()})
		return 1
	}
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		report(execStatus{Status: -1, Error: fmt.Sprintf("prctl subreaper: %v", err)})
		return 1
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)

	pid, err := startLimited(cwd, lim, argv)
	if err != nil {
		// What a shell would say and return for a command it cannot run.
		fmt.Fprintf(os.Stderr, "sandstep: %s: %v\n", argv[0], err)
		code := 126
		if errors.Is(err, os.ErrNotExist) {
			code = 127
		}
		report(execStatus{Status: code << 8})
		return 0
	}
	// Let go of the command's stdio so that EOF depends on its processes only.
	if null, err := unix.Open(os.DevNull, unix.O_RDWR|unix.O_CLOEXEC, 0); err == nil {
		for fd := 0; fd <= 2; fd++ {
			_ = unix.Dup3(null, fd, 0)
		}
		unix.Close(null)
	}

	go func() {
		<-term
		// Killed processes' orphans come to us and are killed in the next
		// round; the loop ends when wait4 below finds no child left.
		for {
			for _, p := range descendants(os.Getpid()) {
				_ = unix.Kill(p, unix.SIGKILL)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	for {
		var ws unix.WaitStatus
		p, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			break // ECHILD: the tree is gone
		}
		if p == pid {
			report(execStatus{Status: int(ws)})
		}
	}
	report(execStatus{Status: -1, Error: "the command's process vanished"})
	return 0
}

// startLimited starts the command with the sandbox's rlimits. They must
// not apply to the shim itself: a Go process that hits RLIMIT_NPROC cannot
// start a thread and crashes. Nor may the command run a single instruction
// without them, or a fork bomb's first children escape the process limit.
// So the child is started traced, which stops it right after execve; the
// limits are set on it with prlimit, and only then does it run. This costs
// no extra process, unlike an exec helper that limits itself and then
// executes the command.
//
// The same stop puts the command first in line for the OOM killer
// (oom_score_adj 1000): a sandbox out of memory loses a command's process,
// never its agent or the exec's supervisor, and a host out of memory loses
// sandboxed code before anything else.
func startLimited(cwd string, lim rlimits, argv []string) (int, error) {
	path, err := lookPath(argv[0], os.Getenv("PATH"))
	if err != nil {
		return 0, err
	}
	// ptrace requests must come from the thread that started the tracee.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	attr := &syscall.ProcAttr{Dir: cwd, Env: os.Environ(), Files: []uintptr{0, 1, 2}}
	for attempt := 0; ; attempt++ {
		pid, err := startTraced(path, argv, attr, func(pid int) error {
			if err := oomFirst(pid); err != nil {
				return errOOMAdj{err}
			}
			return lim.apply(pid)
		})
		var oerr errOOMAdj
		if errors.As(err, &oerr) && attempt == 0 {
			// An executable the sandbox user may not read leaves the
			// process's /proc files to root. The shim then puts itself
			// first in line, and starts the command again to inherit it.
			if err := os.WriteFile("/proc/self/oom_score_adj", []byte(oomFirstAdj), 0); err != nil {
				return 0, fmt.Errorf("oom_score_adj: %w", err)
			}
			continue
		}
		return pid, err
	}
}

// errOOMAdj is a command's oom_score_adj that could not be raised.
type errOOMAdj struct{ err error }

func (e errOOMAdj) Error() string { return e.err.Error() }
func (e errOOMAdj) Unwrap() error { return e.err }

// startTraced starts path traced, so that it stops right after its execve,
// runs prepare on the stopped process and only then lets it run. A failed
// prepare kills it. The caller holds its OS thread locked: ptrace requests
// must come from the thread that started the tracee.
func startTraced(path string, argv []string, attr *syscall.ProcAttr, prepare func(pid int) error) (int, error) {
	a := *attr
	sys := syscall.SysProcAttr{}
	if a.Sys != nil {
		sys = *a.Sys
	}
	sys.Ptrace = true
	a.Sys = &sys
	pid, err := syscall.ForkExec(path, argv, &a)
	if err != nil {
		return 0, err
	}
	abandon := func(err error) (int, error) {
		_ = unix.Kill(pid, unix.SIGKILL)
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, unix.WALL, nil)
		return 0, err
	}
	var ws unix.WaitStatus
	for {
		_, err = unix.Wait4(pid, &ws, unix.WALL, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil || !ws.Stopped() {
		return abandon(fmt.Errorf("the command did not stop after exec (%v, status %#x)", err, int(ws)))
	}
	if err := prepare(pid); err != nil {
		return abandon(err)
	}
	if err := unix.PtraceDetach(pid); err != nil {
		return abandon(fmt.Errorf("ptrace detach: %w", err))
	}
	return pid, nil
}

// oomFirstAdj is the oom_score_adj of every command: the highest, so that
// the OOM killer takes a command's process before the agent's.
const oomFirstAdj = "1000"

// oomFirst gives process pid, a child of this process, oom_score_adj
// oomFirstAdj unless it has it already. Raising it needs no privilege.
func oomFirst(pid int) error {
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return err
	}
	if strings.TrimSpace(string(b)) == oomFirstAdj {
		return nil
	}
	if err := os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte(oomFirstAdj), 0); err != nil {
		return fmt.Errorf("oom_score_adj of the command: %w", err)
	}
	return nil
}

// lookPath resolves file against PATH as a shell does. exec.LookPath is not
// used because it refuses results relative to the working directory, which
// a shell accepts for PATH entries like ".".
func lookPath(file, path string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, file)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("command not found: %w", os.ErrNotExist)
}

// descendants lists the live (not zombie) processes below root, as seen in
// this pid namespace's /proc.
func descendants(root int) []int {
	procs := readProcs()
	children := make(map[int][]int, len(procs))
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p.pid)
	}
	alive := make(map[int]bool, len(procs))
	for _, p := range procs {
		alive[p.pid] = p.state != 'Z' && p.state != 'X'
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if alive[c] {
				out = append(out, c)
			}
			queue = append(queue, c)
		}
	}
	return out
}
