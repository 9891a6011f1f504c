// Command sandstep-provider-future is a plugin that only speaks a later
// protocol version, as a plugin built against a future sandstep would: the
// host must refuse it at start with a clear error.
package main

import (
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/plugin"
	"github.com/sandstep/sandstep/providers/providertest"
)

func main() {
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: plugin.Handshake,
		VersionedPlugins: map[int]goplugin.PluginSet{
			providers.APIVersion + 1: {plugin.PluginName: &plugin.GRPCPlugin{Impl: providertest.New()}},
		},
		GRPCServer: goplugin.DefaultGRPCServer,
	})
}
