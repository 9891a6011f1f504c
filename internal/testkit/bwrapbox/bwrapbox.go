// Package bwrapbox holds what the fakes of hosted sandbox services
// (fakesandy, fakemodal, fakedeno) share to run a "sandbox" under bubblewrap on this
// machine: the host's root, read-only, and the kill of every process of a
// sandbox or of one command.
package bwrapbox

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"syscall"
	"time"
)

// RootArgs rebuilds the host's root read-only for bubblewrap, leaving out
// /proc, /dev and the paths each sandbox gets of its own (own, such as
// /tmp, /root and /workspace). The host's pid namespace is shared, so its
// /proc is bound as it is.
func RootArgs(own ...string) ([]string, error) {
	entries, err := os.ReadDir("/")
	if err != nil {
		return nil, fmt.Errorf("bwrapbox: %w", err)
	}
	skip := map[string]bool{"/proc": true, "/dev": true}
	for _, p := range own {
		skip[p] = true
	}
	var args []string
	for _, e := range entries {
		p := "/" + e.Name()
		if skip[p] {
			continue
		}
		if e.Type()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(p)
			if err != nil {
				return nil, fmt.Errorf("bwrapbox: %w", err)
			}
			args = append(args, "--symlink", target, p)
			continue
		}
		args = append(args, "--ro-bind", p, p)
	}
	return append(args, "--dev", "/dev", "--bind", "/proc", "/proc"), nil
}

// KillMarked kills every process whose environment holds marker
// (NAME=value), round after round until none is left: a process may fork
// while it is being killed, and setsid does not shed an environment
// variable. A killed process is gone from the scan once it has exited,
// since a zombie shows no environment.
func KillMarked(marker string) {
	want := []byte(marker)
	for range 500 {
		pids := Marked(want)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Marked returns the processes (other than this one) whose environment
// holds marker.
func Marked(marker []byte) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		for kv := range bytes.SplitSeq(env, []byte{0}) {
			if bytes.Equal(kv, marker) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}
