package local

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// stageDir is where, as root, a sandbox's host directories are bound for
// bwrap to pick up. bwrap runs as the sandbox's uid and resolves its bind
// sources by path, so it cannot reach state_dir when one of its parents is
// private to root (a test's temp dir, /root/...). The launcher, still root,
// binds each source here inside a private mount namespace of its own, then
// becomes the sandbox uid and executes bwrap. Nothing shows on the host but
// this one empty directory; /tmp exists and is searchable everywhere.
const stageDir = "/tmp/.sandstep-stage"

// stager collects a sandbox's host directories and names the path bwrap
// should bind each from.
type stager struct {
	staged bool
	pairs  []string // host path, staged path, ...
}

func (st *stager) path(host, name string) string {
	if !st.staged {
		return host
	}
	staged := filepath.Join(stageDir, name)
	st.pairs = append(st.pairs, host, staged)
	return staged
}

// command returns the process that starts bwrap with args: bwrap itself
// when the plugin is not root (sandboxes then run as the plugin's uid, which
// reaches its own state_dir), and otherwise the launcher in a new mount
// namespace, which drops to uid before it executes bwrap.
func (st *stager) command(ctx context.Context, self, bwrap string, uid int, args []string) *exec.Cmd {
	if !st.staged {
		cmd := exec.CommandContext(ctx, bwrap, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		return cmd
	}
	largs := []string{roleLaunch, strconv.Itoa(uid), strconv.Itoa(len(st.pairs) / 2)}
	largs = append(largs, st.pairs...)
	largs = append(largs, "--", bwrap)
	largs = append(largs, args...)
	cmd := exec.CommandContext(ctx, self, largs...)
	cmd.Args[0] = "sandstep-launch"
	// Go makes the new namespace's mounts private before the launcher runs,
	// so nothing it mounts propagates to the host.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Unshareflags: syscall.CLONE_NEWNS}
	return cmd
}

// runLaunch is the launcher (see stageDir).
//
// args: uid n host1 staged1 ... hostN stagedN -- bwrap args...
func runLaunch(args []string) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "sandstep launch: "+format+"\n", a...)
		return 125
	}
	if len(args) < 2 {
		return fail("bad arguments")
	}
	uid, err1 := strconv.Atoi(args[0])
	n, err2 := strconv.Atoi(args[1])
	if err1 != nil || err2 != nil || n < 0 || len(args) < 2+2*n+2 || args[2+2*n] != "--" {
		return fail("bad arguments")
	}
	pairs, argv := args[2:2+2*n], args[3+2*n:]
	if err := unix.Mount("tmpfs", stageDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0711,size=64k"); err != nil {
		return fail("mounting %s: %v", stageDir, err)
	}
	for i := 0; i < len(pairs); i += 2 {
		host, staged := pairs[i], pairs[i+1]
		fi, err := os.Stat(host)
		if err != nil {
			return fail("%v", err)
		}
		if fi.IsDir() {
			err = os.Mkdir(staged, 0o700)
		} else {
			err = os.WriteFile(staged, nil, 0o600)
		}
		if err != nil {
			return fail("%v", err)
		}
		if err := unix.Mount(host, staged, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fail("binding %s: %v", host, err)
		}
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fail("setgroups: %v", err)
	}
	if err := syscall.Setresgid(uid, uid, uid); err != nil {
		return fail("setresgid: %v", err)
	}
	if err := syscall.Setresuid(uid, uid, uid); err != nil {
		return fail("setresuid: %v", err)
	}
	err := syscall.Exec(argv[0], argv, os.Environ())
	return fail("executing %s: %v", argv[0], err)
}
