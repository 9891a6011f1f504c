package local

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// stageDir is where, as root, a sandbox's host directories are bound for
// bwrap to pick up. bwrap runs as the sandbox's uid and resolves its bind
// sources by path, so it cannot reach state_dir when one of its parents is
// private to root (a test's temp dir, /root/...). The binds live in a mount
// namespace private to one thread of the plugin (stageNS), which starts
// bwrap as the sandbox uid; on the host this is one empty directory, and
// /tmp exists and is searchable everywhere.
const stageDir = "/tmp/.sandstep-stage"

// stageNS runs functions on one OS thread that has a mount namespace of its
// own, with a tmpfs at stageDir. Processes started from that thread inherit
// the namespace. Mount namespaces belong to threads, not processes, so
// nothing here is visible to the rest of the plugin or to the host.
type stageNS struct {
	reqs      chan func()
	done      chan struct{}
	closeOnce sync.Once

	// The prepared trees of ro_paths (rotree.go), by top folder, and of
	// /dev (devtree.go); they belong to the staging thread.
	trees   map[string]*roTree
	treeGen int
	dev     string
}

func newStageNS() (*stageNS, error) {
	if err := ensureStageDir(); err != nil {
		return nil, err
	}
	ns := &stageNS{reqs: make(chan func()), done: make(chan struct{})}
	ready := make(chan error, 1)
	// Never unlocked: when f returns, the runtime retires the thread, and
	// its namespace goes with it.
	goLockedOffMain(func() {
		err := unix.Unshare(unix.CLONE_NEWNS)
		if err == nil {
			// Nothing mounted here may propagate to the host.
			err = unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
		}
		if err == nil {
			err = unix.Mount("tmpfs", stageDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0711,size=1m")
		}
		ready <- err
		if err != nil {
			return
		}
		for {
			select {
			case f := <-ns.reqs:
				f()
			case <-ns.done:
				return
			}
		}
	})
	if err := <-ready; err != nil {
		return nil, fmt.Errorf("a private mount namespace for staging sandbox directories (needs CAP_SYS_ADMIN): %w", err)
	}
	return ns, nil
}

func (ns *stageNS) do(f func() error) error {
	errc := make(chan error, 1)
	select {
	case ns.reqs <- func() { errc <- f() }:
		return <-errc
	case <-ns.done:
		return errors.New("the provider is closed")
	}
}

func (ns *stageNS) close() { ns.closeOnce.Do(func() { close(ns.done) }) }

// ensureStageDir makes sure stageDir is root's own directory, so that no
// other user of /tmp can put something in its place.
func ensureStageDir() error {
	fi, err := os.Lstat(stageDir)
	if err == nil {
		st, ok := fi.Sys().(*syscall.Stat_t)
		if fi.IsDir() && ok && st.Uid == 0 && fi.Mode().Perm()&0o022 == 0 {
			return nil
		}
		if err := os.RemoveAll(stageDir); err != nil {
			return fmt.Errorf("replacing %s: %w", stageDir, err)
		}
	}
	if err := os.Mkdir(stageDir, 0o711); err != nil {
		return fmt.Errorf("creating %s: %w", stageDir, err)
	}
	return os.Chmod(stageDir, 0o711)
}

// stager collects a sandbox's host directories and names the path bwrap
// should bind each from: the host path itself when the plugin is not root
// (sandboxes then run as the plugin's uid, which reaches its own
// state_dir), a staged path otherwise.
type stager struct {
	ns     *stageNS
	dir    string   // stageDir/<name of this launch>
	made   bool     // dir exists (guarded by the staging thread)
	pairs  []string // host path, staged path, ...
	mounts []string // staged paths of mounted images
	// roGroups are the trees bwrap's arguments name (roTreeArg); trees
	// the ones this launch uses (guarded by the staging thread).
	roGroups []roGroup
	trees    []*roTree
}

func newStager(ns *stageNS, name string) *stager {
	return &stager{ns: ns, dir: filepath.Join(stageDir, name)}
}

func (st *stager) path(host, name string) string {
	if st.ns == nil {
		return host
	}
	staged := filepath.Join(st.dir, name)
	st.pairs = append(st.pairs, host, staged)
	return staged
}

// start binds the staged paths and starts cmd, as uid when staging, from
// the staging thread. With born set (cgroup v1), the thread that forks
// joins the sandbox's groups first and leaves them after, so that bwrap
// and everything it starts are born inside (see bornInto). Call release
// once bwrap has made its own mount namespace (it has when it reports the
// sandbox's pid).
func (st *stager) start(cmd *exec.Cmd, uid int, born *sandboxCgroup) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid = true
	if st.ns == nil {
		if born == nil {
			return cmd.Start()
		}
		// The thread that joins must be the one that forks.
		errc := make(chan error, 1)
		goLockedOffMain(func() {
			err := born.bornInto(cmd.Start)
			if err == nil || !errors.Is(err, errStillInside) {
				runtime.UnlockOSThread()
			}
			// else the thread is retired with its goroutine, rather than
			// left to run other goroutines inside a sandbox's groups.
			errc <- err
		})
		return <-errc
	}
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}
	return st.ns.do(func() error {
		if err := st.mkdir(); err != nil {
			return err
		}
		for i := 0; i < len(st.pairs); i += 2 {
			host, staged := st.pairs[i], st.pairs[i+1]
			fi, err := os.Stat(host)
			if err != nil {
				return err
			}
			if fi.IsDir() {
				err = os.Mkdir(staged, 0o700)
			} else {
				err = os.WriteFile(staged, nil, 0o600)
			}
			if err != nil {
				return err
			}
			if err := unix.Mount(host, staged, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
				return fmt.Errorf("binding %s: %w", host, err)
			}
		}
		if err := st.fillArgs(cmd.Args); err != nil {
			return err
		}
		if born == nil {
			return cmd.Start()
		}
		err := born.bornInto(cmd.Start)
		if errors.Is(err, errStillInside) {
			// The staging thread is stuck in this sandbox's groups: it
			// ends (with its namespace) rather than start the next
			// sandbox from there; creates then fail as on a closed
			// provider.
			st.ns.close()
		}
		return err
	})
}

// fillArgs puts in bwrap's arguments the prepared trees they stand for:
// the current tree of each ro_paths group, /dev and this launch's devpts.
// Call it on the staging thread.
func (st *stager) fillArgs(args []string) error {
	for i, a := range args {
		var err error
		switch a {
		case devTreeArg:
			args[i], err = st.ns.devTree()
		case devptsArg:
			args[i], err = st.devpts()
		}
		if err != nil {
			return err
		}
		top, ok := strings.CutPrefix(a, roTreeArg)
		if !ok {
			continue
		}
		j := slices.IndexFunc(st.roGroups, func(g roGroup) bool { return g.top == top })
		if j < 0 {
			return fmt.Errorf("no ro_paths group %s", top)
		}
		t, err := st.ns.useTree(st.roGroups[j])
		if err != nil {
			return err
		}
		st.trees = append(st.trees, t)
		args[i] = t.dir
	}
	return nil
}

// mkdir makes the launch's directory; call it on the staging thread.
func (st *stager) mkdir() error {
	if st.made {
		return nil
	}
	if err := os.Mkdir(st.dir, 0o711); err != nil {
		return err
	}
	st.made = true
	return nil
}

// image mounts the ext4 image for bwrap to bind from the returned path
// (as root only, see images.go). The mount is made now, so that the caller
// can prepare the file system through root before the sandbox starts.
func (st *stager) image(image, name string, readOnly bool) (string, fsRoot, error) {
	staged := filepath.Join(st.dir, name)
	var root *os.File
	err := st.ns.do(func() error {
		if err := st.mkdir(); err != nil {
			return err
		}
		if err := os.Mkdir(staged, 0o700); err != nil {
			return err
		}
		st.mounts = append(st.mounts, staged)
		if err := mountImage(image, staged, readOnly); err != nil {
			return err
		}
		var err error
		root, err = os.Open(staged)
		return err
	})
	return staged, fsRoot{root}, err
}

// release unmounts and removes the staged paths. Removal is never
// recursive: a path whose unmount failed still shows host files.
func (st *stager) release() error {
	if st.ns == nil {
		return nil
	}
	return st.ns.do(func() error {
		var errs []error
		staged := append([]string(nil), st.mounts...)
		for i := 1; i < len(st.pairs); i += 2 {
			staged = append(staged, st.pairs[i])
		}
		for _, staged := range staged {
			if err := unix.Unmount(staged, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("unmounting %s: %w", staged, err))
				continue
			}
			if err := os.Remove(staged); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		if st.made {
			if err := os.Remove(st.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		for _, t := range st.trees {
			st.ns.doneTree(t)
		}
		st.trees = nil
		return errors.Join(errs...)
	})
}
