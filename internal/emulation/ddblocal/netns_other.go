//go:build !linux

package ddblocal

import (
	"net"
	"os/exec"
)

// isolatedCommand runs java directly where Linux network namespaces do not
// exist: DynamoDB Local then listens on every interface of the port; keep
// it behind a firewall.
func isolatedCommand(java string, args []string, ln *net.TCPListener) (*exec.Cmd, error) {
	// The JVM binds the port itself.
	ln.Close()
	cmd := exec.Command(java, args...)
	cmd.SysProcAttr = sysProcAttr()
	return cmd, nil
}

func closeListenerFile(*exec.Cmd) {}
