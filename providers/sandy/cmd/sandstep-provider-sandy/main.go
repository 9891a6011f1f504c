// Command sandstep-provider-sandy is the Sandy sandbox provider plugin: the
// host starts it through go-plugin and it speaks Sandy's HTTP API.
package main

import (
	"github.com/sandstep/sandstep/providers/plugin"
	"github.com/sandstep/sandstep/providers/sandy"
)

func main() {
	plugin.Serve(sandy.New())
}
