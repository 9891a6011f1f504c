//go:build linux

package plugin_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandstep/sandstep/internal/testkit/testlog"
	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/plugin"
)

// hostRoleEnv makes the test binary a host: it starts the test plugin from
// the folder the variable names, prints the plugin's pid and waits to be
// killed.
const hostRoleEnv = "SANDSTEP_TEST_PLUGIN_HOST"

func runHost(dir string) int {
	c, err := plugin.Start(context.Background(), plugin.Options{Dir: dir, Name: "test"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sb, err := c.Create(context.Background(), providers.CreateSpec{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var out strings.Builder
	if _, err := c.Exec(context.Background(), sb.ID, providers.ExecRequest{Argv: []string{"pid"}, Stdout: &out}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Print(out.String())
	select {}
}

// awaitExit waits for process pid to end, through a pidfd (which becomes
// readable when the process exits), for at most limit.
func awaitExit(t *testing.T, pid int, limit time.Duration) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err == unix.ESRCH {
		return
	}
	if err != nil {
		t.Fatalf("pidfd_open %d: %v", pid, err)
	}
	defer unix.Close(fd)
	n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(limit.Milliseconds()))
	if err != nil {
		t.Fatalf("poll: %v", err)
	}
	if n == 0 {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("process %d still runs %v later", pid, limit)
	}
}

func parentOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

func TestPluginDiesWithItsHost(t *testing.T) {
	host := exec.Command(os.Args[0], "-test.run=^$")
	host.Env = append(os.Environ(), hostRoleEnv+"="+binDir)
	host.Stderr = os.Stderr
	out, err := host.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		host.Process.Kill()
		t.Fatalf("host: %v", err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	if ppid := parentOf(t, pid); ppid != host.Process.Pid {
		t.Fatalf("plugin %d has parent %d, not the host %d", pid, ppid, host.Process.Pid)
	}
	if err := host.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	host.Wait()
	awaitExit(t, pid, 10*time.Second)
}

func TestPluginOutlivesTheThreadThatStartedIt(t *testing.T) {
	// The goroutine ends locked to its thread, so the runtime ends the
	// thread: a plugin forked from it would get its parent-death signal.
	type started struct {
		c   *plugin.Client
		tid int
		err error
	}
	ch := make(chan started)
	release := make(chan struct{})
	defer close(release)
	var s started
	for attempt := 0; ; attempt++ {
		go func() {
			runtime.LockOSThread()
			if unix.Gettid() == os.Getpid() {
				// The runtime never ends the main thread; it parks it
				// instead, which would prove nothing. Hold it, so that the
				// next try runs elsewhere.
				ch <- started{tid: -1}
				<-release
				runtime.UnlockOSThread()
				return
			}
			c, err := plugin.Start(context.Background(), testOptions(&testlog.Buffer{}))
			ch <- started{c, unix.Gettid(), err}
		}()
		if s = <-ch; s.tid != -1 {
			break
		}
		if attempt == 20 {
			t.Fatal("every goroutine ran on the main thread")
		}
	}
	if s.err != nil {
		t.Fatal(s.err)
	}
	t.Cleanup(func() { s.c.Close() })
	id := newSandbox(t, s.c)
	pid := pidOf(t, s.c, id)
	task := fmt.Sprintf("/proc/self/task/%d", s.tid)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(task); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d did not end", s.tid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Same plugin process, still serving: a restarted one would have
	// another pid and no sandbox.
	if got := pidOf(t, s.c, id); got != pid {
		t.Fatalf("the plugin died with the thread that started it (pid %d, now %d)", pid, got)
	}
}
