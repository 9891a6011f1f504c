// Command sandstep-provider-test serves the in-memory provider of providers/providertest as a
// plugin, for the tests and benchmarks of providers/plugin.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/plugin"
	"github.com/sandstep/sandstep/providers/providertest"
)

// printEnv, when set, has every Info call print its value to the plugin's
// os.Stdout and os.Stderr, which go-plugin streams to the host after the
// handshake: the host must relay both to its log (and, by reading them,
// keep the plugin's writes from blocking).
const printEnv = "SANDSTEP_TEST_PRINT"

type printing struct{ providers.Provider }

func (p printing) Info(ctx context.Context) (providers.Info, error) {
	if s := os.Getenv(printEnv); s != "" {
		fmt.Fprintln(os.Stdout, s+" on stdout")
		fmt.Fprintln(os.Stderr, s+" on stderr")
	}
	return p.Provider.Info(ctx)
}

func main() {
	plugin.Serve(printing{providertest.New()})
}
