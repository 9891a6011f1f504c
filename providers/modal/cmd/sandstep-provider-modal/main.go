// Command sandstep-provider-modal is the Modal sandbox provider plugin: the
// host starts it through go-plugin and it speaks Modal's gRPC API.
package main

import (
	"github.com/sandstep/sandstep/providers/modal"
	"github.com/sandstep/sandstep/providers/plugin"
)

func main() {
	plugin.Serve(modal.New())
}
