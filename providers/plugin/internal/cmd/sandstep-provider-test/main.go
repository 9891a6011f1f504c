// Command sandstep-provider-test serves the in-memory provider of providers/providertest as a
// plugin, for the tests and benchmarks of providers/plugin.
package main

import (
	"github.com/sandstep/sandstep/providers/plugin"
	"github.com/sandstep/sandstep/providers/providertest"
)

func main() {
	plugin.Serve(providertest.New())
}
