//go:build !sandstep.noserve

package plugin_test

import (
	"testing"

	"github.com/sandstep/sandstep/providers/plugin/plugintest"
	"github.com/sandstep/sandstep/providers/providertest"
)

// BenchmarkCallOverTestConn is the in-process harness (plugintest): the
// same gRPC, no subprocess.
func BenchmarkCallOverTestConn(b *testing.B) {
	benchGet(b, plugintest.Connect(b, providertest.New()))
}
