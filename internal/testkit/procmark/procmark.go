// Package procmark finds and kills the processes of a fake's sandbox by a
// marker in their environment: every process of the sandbox inherits it,
// and neither a new process group nor a new session escapes it, where
// process groups would let a setsid'd background process live on.
package procmark

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"
)

// Kill kills every process whose environment holds marker (NAME=value),
// round after round until none is left: a process may fork while it is
// being killed. A killed process is gone from the scan once it has exited,
// since a zombie shows no environment.
func Kill(marker string) {
	want := []byte(marker)
	for range 500 {
		pids := Find(want)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Find lists the processes (this one excepted) whose environment holds
// marker.
func Find(marker []byte) []int {
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
