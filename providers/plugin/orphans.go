package plugin

import (
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"
)

// A plugin must not outlive its host: an orphaned plugin holds its
// provider's connections and, for the local provider, keeps answering for
// sandboxes nobody will ever stop. Two mechanisms cover each other's gaps.
// On Linux the host starts every plugin with a parent-death signal
// (SIGKILL), which the kernel sends when the thread that forked the plugin
// dies; plugins are therefore forked from one OS thread that is locked and
// never released. And the plugin watches its parent: it exits once its
// parent is no longer the host that started it (the host died before the
// signal was armed, was not Linux, or was not the thread's process).

// hostPIDEnv carries the host's pid to the plugin, so that a plugin whose
// host died before it even started its watch notices at once.
const hostPIDEnv = "SANDSTEP_PLUGIN_HOST_PID"

// parentPoll is how often a plugin checks that its host is still its
// parent. getppid is one cheap system call.
const parentPoll = 250 * time.Millisecond

// watchHost returns at once; it exits the process with status 1 when the
// plugin's parent is no longer its host.
func watchHost() {
	host := os.Getppid()
	if pid, err := strconv.Atoi(os.Getenv(hostPIDEnv)); err == nil && pid > 0 {
		host = pid
	}
	go func() {
		t := time.NewTicker(parentPoll)
		defer t.Stop()
		for ; ; <-t.C {
			if ppid := os.Getppid(); ppid != host {
				slog.Error("the host process is gone; the plugin exits", "host_pid", host, "parent_pid", ppid)
				os.Exit(1)
			}
		}
	}()
}

// forkThread runs functions that start plugins on one OS thread that is
// never released, so that no plugin's parent-death signal fires while the
// host lives (the Go runtime may end a thread, never a locked one whose
// goroutine is alive).
var forkThread struct {
	once sync.Once
	work chan func()
}

// onForkThread runs f on the fork thread and waits for it. Starts are
// therefore one at a time, which the plugin handshake (milliseconds) and
// the Client's own lock make no difference to.
func onForkThread(f func()) {
	forkThread.once.Do(func() {
		forkThread.work = make(chan func())
		go func() {
			runtime.LockOSThread() // for the life of the process
			for fn := range forkThread.work {
				fn()
			}
		}()
	})
	done := make(chan struct{})
	forkThread.work <- func() {
		defer close(done)
		f()
	}
	<-done
}
