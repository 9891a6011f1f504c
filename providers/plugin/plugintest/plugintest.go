// Package plugintest serves a providers.Provider over the plugin protocol
// inside the test process, through go-plugin's gRPC test connection: no
// binary to build, no subprocess, but every call crosses the same gRPC
// server and client that a plugin subprocess and its host use, so errors
// lose what codes cannot carry, streams are chunked and contexts are
// cancelled across the wire, as in production.
//
// It is for a provider's own tests, in the spirit of net/http/httptest:
//
//	func TestConformance(t *testing.T) {
//		p := plugintest.Connect(t, mine.New())
//		if err := p.Configure(t.Context(), providers.Config{Settings: settings}); err != nil {
//			t.Fatal(err)
//		}
//		conformance.Run(t, p, conformance.Options{})
//	}
//
// What only a subprocess shows (a plugin that crashes or hangs, the
// handshake, logs relayed from stderr) needs providers/plugin.Start and a
// built binary.
package plugintest

import (
	"testing"

	goplugin "github.com/hashicorp/go-plugin"

	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/plugin"
)

// Connect serves impl on an in-process gRPC plugin server and returns the
// host's side of the connection. Both are closed when t's test ends.
func Connect(t testing.TB, impl providers.Provider) providers.Provider {
	t.Helper()
	client, server := goplugin.TestPluginGRPCConn(t, false, goplugin.PluginSet{
		plugin.PluginName: &plugin.GRPCPlugin{Impl: impl},
	})
	t.Cleanup(func() {
		// The server first: the client's Close asks the server to stop
		// itself (go-plugin's Shutdown RPC), and go-plugin's Stop is not
		// safe to run twice at once.
		server.Stop()
		_ = client.Close()
	})
	raw, err := client.Dispense(plugin.PluginName)
	if err != nil {
		t.Fatalf("plugintest: dispense: %v", err)
	}
	p, ok := raw.(providers.Provider)
	if !ok {
		t.Fatalf("plugintest: the plugin client is a %T, not a providers.Provider", raw)
	}
	return p
}
