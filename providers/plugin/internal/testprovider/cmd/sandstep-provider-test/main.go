// Command sandstep-provider-test serves the in-memory test provider as a
// plugin, for the tests and benchmarks of providers/plugin.
package main

import (
	"github.com/sandstep/sandstep/providers/plugin"
	"github.com/sandstep/sandstep/providers/plugin/internal/testprovider"
)

func main() {
	plugin.Serve(testprovider.New())
}
