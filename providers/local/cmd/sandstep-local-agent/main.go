// Command sandstep-local-agent is the local provider's side inside each
// sandbox: bubblewrap starts it as the sandbox's pid 1, the agent that runs
// commands and file operations for the plugin. It is the provider package
// without the plugin's gRPC machinery, whose package initialisation alone
// costs milliseconds at every sandbox start. The plugin takes it from its
// own folder (make build puts both in bin/plugins) and falls back to its
// own binary without it. Build it with CGO_ENABLED=0: it runs where only
// the host's /usr is visible.
package main

import (
	"fmt"
	"os"

	"github.com/sandstep/sandstep/providers/local"
)

func main() {
	local.RunSandboxRole() // never returns in a sandbox role
	fmt.Fprintln(os.Stderr, "sandstep-local-agent runs inside sandboxes that sandstep-provider-local starts; it is not run by hand")
	os.Exit(2)
}
