package ddblocal

import "syscall"

// sysProcAttr puts the JVM in its own process group, so Stop reaches every
// process it spawned, and has the kernel kill it if the parent dies first
// (a test binary that panics or is killed does not leave a JVM behind).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func signalGroup(pid int, sig syscall.Signal) { _ = syscall.Kill(-pid, sig) }
