package local

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A thread of the plugin left in a sandbox's group (as one the Go runtime
// starts from the thread that had joined it would be) is taken back out.
func TestReclaimThreads(t *testing.T) {
	cg := v1PidsGroup(t)
	tids := make(chan int)
	release := make(chan struct{})
	goLockedOffMain(func() { // never unlocked: the thread ends with the goroutine
		if err := writeCgroupFile(filepath.Join(cg.Pids, "tasks"), "0"); err != nil {
			t.Error(err)
		}
		tids <- unix.Gettid()
		<-release
	})
	tid := <-tids
	defer close(release)
	tasks := func(dir string) []string {
		b, err := os.ReadFile(filepath.Join(dir, "tasks"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Fields(string(b))
	}
	if got := tasks(cg.Pids); !slices.Equal(got, []string{strconv.Itoa(tid)}) {
		t.Fatalf("the group holds %v, want the thread %d", got, tid)
	}
	if err := reclaimThreads(cg.Pids, filepath.Dir(cg.Pids)); err != nil {
		t.Fatal(err)
	}
	if got := tasks(cg.Pids); len(got) != 0 {
		t.Errorf("after reclaimThreads the group holds %v", got)
	}
	if !slices.Contains(tasks(filepath.Dir(cg.Pids)), strconv.Itoa(tid)) {
		t.Errorf("thread %d is not back in the plugin's group", tid)
	}
}

// The agent does the same for a thread left in an exec group.
func TestExecGroupReclaim(t *testing.T) {
	cg := v1PidsGroup(t)
	dir, err := unix.Open(cg.Pids, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	gs := openExecGroups(takeDir(dir), 1)
	g, err := gs.make()
	if err != nil || g == nil || g.tasks < 0 {
		t.Fatalf("exec group: %+v, %v", g, err)
	}
	tids := make(chan int)
	release := make(chan struct{})
	goLockedOffMain(func() { // never unlocked: the thread ends with the goroutine
		if err := g.join(); err != nil {
			t.Error(err)
		}
		tids <- unix.Gettid()
		<-release
	})
	tid := <-tids
	defer close(release)
	inGroup := func() []string {
		b, err := os.ReadFile(filepath.Join(cg.Pids, g.name, "tasks"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Fields(string(b))
	}
	if got := inGroup(); !slices.Equal(got, []string{strconv.Itoa(tid)}) {
		t.Fatalf("the exec group holds %v, want the thread %d", got, tid)
	}
	g.reclaim()
	if got := inGroup(); len(got) != 0 {
		t.Errorf("after reclaim the exec group holds %v", got)
	}
	b, err := os.ReadFile(filepath.Join(cg.Pids, "tasks"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Fields(string(b)), strconv.Itoa(tid)) {
		t.Errorf("thread %d is not back in the sandbox's group", tid)
	}
	g.release()
}

// goLockedOffMain never runs f on the main thread, even when it is called
// from the main thread, which is then free again: a thread that joins a
// sandbox's groups must not be the one /proc/self/cgroup reports.
func TestLockedOffMain(t *testing.T) {
	pid := unix.Getpid()
	// Find the main thread: goroutines land on it now and then.
	onMain := make(chan bool)
	for range 10000 {
		go func() {
			runtime.LockOSThread()
			if unix.Gettid() != pid {
				runtime.UnlockOSThread()
				onMain <- false
				return
			}
			defer runtime.UnlockOSThread()
			tids := make(chan int)
			goLockedOffMain(func() {
				defer runtime.UnlockOSThread()
				tids <- unix.Gettid()
			})
			if tid := <-tids; tid == pid {
				t.Errorf("f ran on the main thread %d", tid)
			}
			onMain <- true
		}()
		if <-onMain {
			break
		}
	}
	// And from anywhere, never on it.
	for range 50 {
		tids := make(chan int)
		goLockedOffMain(func() {
			defer runtime.UnlockOSThread()
			tids <- unix.Gettid()
		})
		if tid := <-tids; tid == pid {
			t.Fatalf("f ran on the main thread")
		}
	}
}

// v1PidsGroup is a sandbox's cgroup of 16 tasks on a host of cgroup v1
// with a pids hierarchy, which the reclaim tests need; gone after t.
func v1PidsGroup(t *testing.T) *sandboxCgroup {
	t.Helper()
	h := newEnv(t, nil).p.s.cgroups
	if h.version != 1 || h.pids == "" {
		t.Skip("cgroup v1 pids only")
	}
	cg := h.groupFor(newID())
	if err := h.create(cg, cgroupLimits{memoryBytes: 64 << 20, tasks: 16}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cg.remove() })
	return cg
}
