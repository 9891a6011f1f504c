//go:build unix && !linux

package ddblocal

import "syscall"

// sysProcAttr puts the JVM in its own process group, so Stop reaches every
// process it spawned. Without Linux's Pdeathsig, call Stop (or use RunTests)
// so that no JVM outlives its parent.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func signalGroup(pid int, sig syscall.Signal) { _ = syscall.Kill(-pid, sig) }
