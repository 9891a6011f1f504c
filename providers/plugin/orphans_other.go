//go:build !linux

package plugin

import "syscall"

// pluginSysProcAttr: without Linux's parent-death signal, the plugin's own
// watch of its parent ends it when its host dies.
func pluginSysProcAttr() *syscall.SysProcAttr { return nil }
