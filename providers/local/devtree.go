package local

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// bwrap's --dev makes a sandbox's /dev with a bind mount of each of six host
// devices, reading the whole mount table after each (see rotree.go), and
// --remount-ro /dev reads it once more: 0.9 ms of a 5.2 ms bwrap start here
// (bwrap alone, /bin/true for the agent, medians of 60, load 3). As root,
// /dev is instead a tree made once in the staging namespace, its device
// nodes made with mknod (which a tmpfs mounted by root may hold), and
// read-only from the start; each sandbox still gets a devpts instance of
// its own, mounted in its staging directory as bwrap mounts it, and bwrap
// binds the two.

const (
	devTreeArg = "\x00dev-tree" // see roTreeArg
	devptsArg  = "\x00devpts"
)

// devArgs are the bwrap arguments that give a sandbox its /dev: the
// devices bwrap's --dev makes, a devpts of its own and a /dev/shm of
// shmSize bytes, the rest read-only so that it cannot take memory.
func devArgs(staged bool) []string {
	shm := []string{"--size", fmt.Sprint(shmSize), "--tmpfs", "/dev/shm"}
	if !staged {
		return append(append([]string{"--dev", "/dev"}, shm...), "--remount-ro", "/dev")
	}
	return append([]string{"--dev-bind", devTreeArg, "/dev", "--dev-bind", devptsArg, "/dev/pts"}, shm...)
}

// The devices and links bwrap's --dev makes (bubblewrap 0.8, setup_newroot).
var (
	devNodes = []struct {
		name         string
		major, minor uint32
	}{{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}}
	devLinks = [][2]string{{"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"}, {"stdout", "/proc/self/fd/1"},
		{"stderr", "/proc/self/fd/2"}, {"core", "/proc/kcore"}, {"ptmx", "pts/ptmx"}}
)

// devTree returns the shared /dev tree, made at its first use. Call it on
// the staging thread.
func (ns *stageNS) devTree() (string, error) {
	if ns.dev != "" {
		return ns.dev, nil
	}
	dir := filepath.Join(stageDir, "dev")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		os.Remove(dir)
		return "", err
	}
	err := func() error {
		for _, d := range devNodes {
			path := filepath.Join(dir, d.name)
			if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(d.major, d.minor))); err != nil {
				return err
			}
			if err := os.Chmod(path, 0o666); err != nil { // past the umask
				return err
			}
		}
		for _, l := range devLinks {
			if err := os.Symlink(l[1], filepath.Join(dir, l[0])); err != nil {
				return err
			}
		}
		for _, d := range []string{"pts", "shm"} {
			if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
				return err
			}
		}
		return unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, "")
	}()
	if err != nil {
		_ = unix.Unmount(dir, unix.MNT_DETACH)
		os.Remove(dir)
		return "", fmt.Errorf("preparing /dev for sandboxes: %w", err)
	}
	ns.dev = dir
	return dir, nil
}

// devpts mounts a devpts instance for this launch, with bwrap's options,
// in its staging directory; release unmounts it (the sandbox keeps its
// own). Call it on the staging thread.
func (st *stager) devpts() (string, error) {
	if err := st.mkdir(); err != nil {
		return "", err
	}
	dir := filepath.Join(st.dir, "pts")
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	st.mounts = append(st.mounts, dir)
	if err := unix.Mount("devpts", dir, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620"); err != nil {
		return "", fmt.Errorf("devpts: %w", err)
	}
	return dir, nil
}
