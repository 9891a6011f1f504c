// Command sandstep-provider-local is the local sandbox provider plugin:
// sandboxes on this machine with bubblewrap. The host starts it through
// go-plugin; inside each sandbox sandstep-local-agent, from the same
// folder, runs as the agent, or this binary when that one is missing. Build
// it with CGO_ENABLED=0 so that the agent needs no libraries from the
// sandbox.
package main

import (
	"github.com/sandstep/sandstep/providers/local"
	"github.com/sandstep/sandstep/providers/plugin"
)

func main() {
	local.RunSandboxRole() // never returns in the launcher, agent, shim and exec roles
	plugin.Serve(local.New())
}
