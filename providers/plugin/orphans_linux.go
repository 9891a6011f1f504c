package plugin

import "syscall"

// pluginSysProcAttr has the kernel kill a plugin when its host dies.
func pluginSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
