package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
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
	report := func(st shimStatus) {
		if status == nil {
			return
		}
		_ = json.NewEncoder(status).Encode(st)
		status.Close()
		status = nil
	}
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		report(shimStatus{Status: -1, Error: fmt.Sprintf("prctl subreaper: %v", err)})
		return 1
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)

	self, err := os.Executable()
	if err != nil {
		report(shimStatus{Status: -1, Error: fmt.Sprintf("locating own binary: %v", err)})
		return 1
	}
	argv := append([]string{"sandstep-exec", roleExec}, args...)
	// syscall.ForkExec rather than os.StartProcess: the wait loop below reaps
	// with wait4(-1), which must not race an os.Process of the same child.
	pid, err := syscall.ForkExec(self, argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
	})
	if err != nil {
		report(shimStatus{Status: -1, Error: fmt.Sprintf("starting command: %v", err)})
		return 1
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
			report(shimStatus{Status: int(ws)})
		}
	}
	report(shimStatus{Status: -1, Error: "the command's process vanished"})
	return 0
}

// runExecHelper applies the sandbox's rlimits to itself and becomes the
// command. The limits are set here and not in the shim: a Go process that
// hits RLIMIT_NPROC cannot start a thread and crashes, and this process
// replaces itself before it needs one.
//
// args: cwd limits -- argv...
func runExecHelper(args []string) int {
	if len(args) < 4 || args[2] != "--" {
		fmt.Fprintln(os.Stderr, "sandstep: bad exec helper arguments")
		return 126
	}
	cwd, argv := args[0], args[3:]
	lim, err := parseRlimits(args[1])
	if err == nil {
		err = lim.apply()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandstep: %v\n", err)
		return 126
	}
	if err := os.Chdir(cwd); err != nil {
		fmt.Fprintf(os.Stderr, "sandstep: %v\n", err)
		return 126
	}
	path, err := lookPath(argv[0], os.Getenv("PATH"))
	if err == nil {
		err = syscall.Exec(path, argv, os.Environ())
	}
	fmt.Fprintf(os.Stderr, "sandstep: %s: %v\n", argv[0], err)
	if errors.Is(err, os.ErrNotExist) {
		return 127
	}
	return 126
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
