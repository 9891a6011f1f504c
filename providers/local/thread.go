package local

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// goLockedOffMain runs f on a new goroutine locked to an OS thread that is
// not the process's main thread. f may unlock its thread; if it returns
// still locked, the runtime retires the thread.
//
// The main thread must never be the one that joins a sandbox's cgroups to
// fork, nor the one that leaves the host's mount namespace: /proc/self
// (cgroup, mountinfo) reports the main thread, which is how the provider
// finds where sandbox groups go; on cgroup v1 the process's memory is
// charged to the main thread's memory group; and a goroutine that ends
// locked to the main thread parks it for good wherever it is, where any
// other thread would end.
func goLockedOffMain(f func()) {
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			f()
			return
		}
		// While this goroutine holds the main thread, no other goroutine
		// can run there: start f on another, then let the main thread go
		// once f's goroutine is locked to its own.
		locked := make(chan struct{})
		goLockedOffMain(func() {
			close(locked)
			f()
		})
		<-locked
		runtime.UnlockOSThread()
	}()
}
