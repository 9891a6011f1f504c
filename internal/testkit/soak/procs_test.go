package soak

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// proc is a process seen in /proc.
type proc struct {
	pid, ppid int
	comm      string
}

func procs() []proc {
	entries, _ := os.ReadDir("/proc")
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		open, close := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if open < 0 || close < open {
			continue
		}
		f := strings.Fields(string(b[close+1:]))
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		out = append(out, proc{pid: pid, ppid: ppid, comm: string(b[open+1 : close])})
	}
	return out
}

func childrenOf(pid int) []proc {
	var out []proc
	for _, p := range procs() {
		if p.ppid == pid {
			out = append(out, p)
		}
	}
	return out
}

// pluginComm is what /proc shows of a plugin's name (15 characters).
const pluginComm = "sandstep-provid"

// noOrphanPlugins fails the test if a provider plugin of this test's build
// runs with no live host: reparented to init (or a subreaper) rather than
// to a sandstep server or a sandbox.
func (w *world) noOrphanPlugins() {
	w.t.Helper()
	for _, p := range procs() {
		if !strings.HasPrefix(p.comm, pluginComm) {
			continue
		}
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.pid))
		if !strings.HasPrefix(exe, bins.plugins) {
			continue // another test's, or a sandbox agent
		}
		parent := ""
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p.ppid)); err == nil {
			parent = strings.TrimSpace(string(b))
		}
		if p.ppid == 1 || parent != "sandstep" && parent != "soak.test" {
			// A plugin may exit on its own a moment after its host
			// died; only one that stays is an orphan.
			if !awaitExit(p.pid, 5*time.Second) {
				w.orphans++
				w.t.Errorf("orphaned plugin process %d (%s), parent %d (%s)", p.pid, exe, p.ppid, parent)
				syscall.Kill(p.pid, syscall.SIGKILL)
			}
		}
	}
}

// awaitExit waits, through a pidfd, for process pid to end.
func awaitExit(pid int, limit time.Duration) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return errors.Is(err, unix.ESRCH)
	}
	defer unix.Close(fd)
	deadline := time.Now().Add(limit)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(left.Milliseconds())+1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err == nil && n > 0
	}
}

// logScanner copies the server's stderr to a file and hands each line to
// onLine.
type logScanner struct {
	w      io.Writer
	onLine func([]byte)
	buf    []byte
}

func (l *logScanner) Write(p []byte) (int, error) {
	n, err := l.w.Write(p)
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.onLine(l.buf[:i])
		l.buf = l.buf[i+1:]
	}
	return n, err
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 6000 {
		b = b[len(b)-6000:]
	}
	return string(b)
}
