package local

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The exec fast path: the agent starts a command itself, with no
// supervisor process of its own, when the plugin handed it a cgroup
// directory to make exec groups in (fdExecGroups). Each exec's command goes
// into a group of its own, e<n> below the sandbox's group, before it runs a
// single instruction; its descendants inherit the group and cannot leave it
// (the sandbox has no cgroup file system), so double forks and setsid do not
// hide a process from the exec that started it. That is what the shim's
// subreaper gave, without the cost of starting a Go program per exec (about
// 1 ms here, twice a fork and exec of /bin/true). Without a group directory,
// or when a group cannot be made, execs go through the shim as before.

// On cgroup v1 the command is born inside its group: the agent thread that
// forks it joins the group first, through the group's tasks file, and goes
// back to the sandbox's group after. Moving a started process in instead
// (writing its pid to cgroup.procs) takes the kernel's
// cgroup_threadgroup_rwsem for writing, which waits for an RCU grace period:
// 6 to 12 ms for the first exec of a sandbox on this project's development
// machine under load. A thread moving itself takes no such lock.

// execGroups makes and removes the exec groups of one sandbox.
type execGroups struct {
	dir     int // directory descriptor of the sandbox's group; owned for the agent's life
	version int // 1 or 2
	// home is the sandbox group's tasks file, open for writing, where a
	// thread that joined an exec group returns (v1); -1 where the agent
	// cannot write it, and commands are moved in after they start.
	home int
	next atomic.Int64
	// off is set after a failure that would repeat: every later exec
	// takes the shim.
	off atomic.Bool
}

// takeDir returns fd, made close-on-exec, when it is an open directory;
// else -1.
func takeDir(fd int) int {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return -1
	}
	unix.CloseOnExec(fd)
	return fd
}

// openExecGroups uses the group directory dir (from takeDir) of the given
// cgroup version, or returns nil.
func openExecGroups(dir, version int) *execGroups {
	if dir < 0 {
		return nil
	}
	if version != 1 && version != 2 {
		unix.Close(dir)
		return nil
	}
	gs := &execGroups{dir: dir, version: version, home: -1}
	if version == 1 {
		if fd, err := unix.Openat(dir, "tasks", unix.O_WRONLY|unix.O_CLOEXEC, 0); err == nil {
			gs.home = fd
		}
	}
	return gs
}

// execGroup is one exec's group.
type execGroup struct {
	gs    *execGroups
	name  string
	procs int // its cgroup.procs, open for writing
	tasks int // its tasks (v1, with gs.home), open for writing; else -1
}

// make creates a fresh group; nil means: use the shim.
func (gs *execGroups) make() (*execGroup, error) {
	if gs == nil || gs.off.Load() {
		return nil, nil
	}
	name := "e" + strconv.FormatInt(gs.next.Add(1), 10)
	if err := unix.Mkdirat(gs.dir, name, 0o755); err != nil {
		return nil, fmt.Errorf("making exec group %s: %w", name, err)
	}
	procs, err := unix.Openat(gs.dir, name+"/cgroup.procs", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = unix.Unlinkat(gs.dir, name, unix.AT_REMOVEDIR)
		return nil, fmt.Errorf("exec group %s: %w", name, err)
	}
	g := &execGroup{gs: gs, name: name, procs: procs, tasks: -1}
	if gs.home >= 0 {
		// Without it, this command is moved in after it starts.
		if fd, err := unix.Openat(gs.dir, name+"/tasks", unix.O_WRONLY|unix.O_CLOEXEC, 0); err == nil {
			g.tasks = fd
		}
	}
	return g, nil
}

// join moves the calling thread, locked to its goroutine, into the group:
// what it forks next is born inside.
func (g *execGroup) join() error {
	if _, err := unix.Write(g.tasks, []byte("0")); err != nil {
		return fmt.Errorf("joining exec group %s: %w", g.name, err)
	}
	return nil
}

// leave takes the calling thread back to the sandbox's group.
func (g *execGroup) leave() error {
	if _, err := unix.Write(g.gs.home, []byte("0")); err != nil {
		return fmt.Errorf("leaving exec group %s: %w", g.name, err)
	}
	return nil
}

// reclaim moves back to the sandbox's group any thread of the agent left in
// the group after the forking thread left: the Go runtime may start a
// thread from the one that had joined (a new thread inherits its creator's
// groups), and one left there would keep the group from being removed. It
// takes the slow path of a move, but only when there is such a thread.
func (g *execGroup) reclaim() {
	fd, err := unix.Openat(g.gs.dir, g.name+"/tasks", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	var buf [512]byte
	n, _ := unix.Read(fd, buf[:])
	unix.Close(fd)
	for _, tid := range strings.Fields(string(buf[:max(n, 0)])) {
		if _, err := os.Stat("/proc/self/task/" + tid); err == nil {
			_, _ = unix.Write(g.gs.home, []byte(tid))
		}
	}
}

// enter moves process pid, stopped before its first instruction, into the
// group.
func (g *execGroup) enter(pid int) error {
	if _, err := unix.Write(g.procs, []byte(strconv.Itoa(pid))); err != nil {
		return fmt.Errorf("moving the command into exec group %s: %w", g.name, err)
	}
	return nil
}

// members lists the group's processes.
func (g *execGroup) members() []int {
	fd, err := unix.Openat(g.gs.dir, g.name+"/cgroup.procs", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), g.name)
	defer f.Close()
	var buf [4096]byte
	var b []byte
	for {
		n, err := f.Read(buf[:])
		b = append(b, buf[:n]...)
		if err != nil || n == 0 {
			break
		}
	}
	var pids []int
	for _, s := range strings.Fields(string(b)) {
		// Never the agent itself, had one of its threads failed to leave.
		if p, err := strconv.Atoi(s); err == nil && p != os.Getpid() {
			pids = append(pids, p)
		}
	}
	return pids
}

// kill ends every process of the group, however it was started, and
// returns once the group is empty (or after the bound). cgroup v2 kills a
// group at once; elsewhere processes are killed until none is left, which
// ends forks racing the kill as well: their children are in the group too.
func (g *execGroup) kill(bound time.Duration) bool {
	if g.gs.version == 2 {
		if fd, err := unix.Openat(g.gs.dir, g.name+"/cgroup.kill", unix.O_WRONLY|unix.O_CLOEXEC, 0); err == nil {
			_, _ = unix.Write(fd, []byte("1"))
			unix.Close(fd)
		}
	}
	deadline := time.Now().Add(bound)
	for {
		pids := g.members()
		if len(pids) == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		for _, p := range pids {
			_ = unix.Kill(p, unix.SIGKILL)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// release removes the group once its last process is gone: at once when
// the exec left nothing behind, else when its background processes end.
// The plugin removes whatever remains when the sandbox ends.
func (g *execGroup) release() {
	unix.Close(g.procs)
	if g.tasks >= 0 {
		unix.Close(g.tasks)
	}
	if g.remove() {
		return
	}
	go func() {
		for !g.remove() {
			time.Sleep(time.Second)
		}
	}()
}

func (g *execGroup) remove() bool {
	err := unix.Unlinkat(g.gs.dir, g.name, unix.AT_REMOVEDIR)
	return err == nil || errors.Is(err, unix.ENOENT) || !errors.Is(err, unix.EBUSY)
}

// reaper waits for every child of the agent, which as the sandbox's pid 1
// is every orphan too. Commands the agent started itself have their status
// handed to whoever waits for them. Starting one holds mu, so that no wait
// takes the stop of a process being started (ptrace stops are reported to
// any thread of the tracer) or the exit of one not yet registered.
type reaper struct {
	mu      sync.Mutex
	waiters map[int]chan<- unix.WaitStatus
}

func newReaper() *reaper { return &reaper{waiters: make(map[int]chan<- unix.WaitStatus)} }

// run reaps on any signal, not only SIGCHLD: signal.Notify drops signals
// when the channel is full, and the runtime's frequent SIGURG could fill it.
func (r *reaper) run(sigs <-chan os.Signal) {
	for range sigs {
		r.reap()
	}
}

func (r *reaper) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		if ch, ok := r.waiters[pid]; ok {
			delete(r.waiters, pid)
			ch <- ws
		}
	}
}

// start starts argv in group g with the sandbox's limits, first in line for
// the OOM killer, as startLimited does in the shim; the status of its main
// process arrives on the returned channel.
func (r *reaper) start(g *execGroup, lim rlimits, path string, argv []string, attr *syscall.ProcAttr) (<-chan unix.WaitStatus, error) {
	type started struct {
		ch  <-chan unix.WaitStatus
		err error
	}
	done := make(chan started, 1)
	// On a thread of its own: the thread that forks is the tracer, and it
	// may join the exec group; should it fail to leave, its goroutine
	// ends still locked, which ends the thread too.
	goLockedOffMain(func() {
		ch, stuck, err := r.startLocked(g, lim, path, argv, attr)
		if !stuck {
			runtime.UnlockOSThread()
		}
		done <- started{ch, err}
	})
	s := <-done
	return s.ch, s.err
}

// startLocked is start on a locked thread; stuck says the thread could
// not leave the exec group.
func (r *reaper) startLocked(g *execGroup, lim rlimits, path string, argv []string, attr *syscall.ProcAttr) (ch <-chan unix.WaitStatus, stuck bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Where the thread cannot join, the command is moved in once stopped.
	joined := g.tasks >= 0 && g.join() == nil
	inside := joined
	leave := func() error {
		if !inside {
			return nil
		}
		inside = false
		if err := g.leave(); err != nil {
			stuck = true
			return err
		}
		g.reclaim()
		return nil
	}
	pid, err := startTraced(path, argv, attr, func(pid int) error {
		if err := leave(); err != nil {
			return err
		}
		if !joined {
			if err := g.enter(pid); err != nil {
				return err
			}
		}
		// The agent is never first in line itself: no need to look.
		if err := os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte(oomFirstAdj), 0); err != nil {
			return errOOMAdj{fmt.Errorf("oom_score_adj of the command: %w", err)}
		}
		return lim.apply(pid)
	})
	// Still inside when the fork failed before prepare ran.
	if lerr := leave(); err == nil {
		err = lerr
	}
	if err != nil {
		return nil, stuck, err
	}
	wait := make(chan unix.WaitStatus, 1)
	r.waiters[pid] = wait
	return wait, false, nil
}
