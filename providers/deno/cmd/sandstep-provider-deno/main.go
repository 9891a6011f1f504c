// Command sandstep-provider-deno is the Deno Sandbox provider plugin: the
// host starts it through go-plugin and it speaks Deno's console REST API and
// regional WebSocket JSON-RPC API.
package main

import (
	"github.com/sandstep/sandstep/providers/deno"
	"github.com/sandstep/sandstep/providers/plugin"
)

func main() {
	plugin.Serve(deno.New())
}
