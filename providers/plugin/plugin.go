// Package plugin connects sandstep to its sandbox providers through
// hashicorp/go-plugin: a provider binary calls Serve (go-plugin's server)
// from its main, and the host calls Start to run that binary as a
// subprocess and use it as a providers.Provider. The host speaks
// go-plugin's client protocol itself (process.go), so that hosts built
// with the tag sandstep.noserve, the Lambdas, link no go-plugin at all.
//
// The wire protocol is providers/proto (gRPC only). Provider errors cross it
// as codes, so providers.CodeOf and errors.Is(err, providers.ErrNotFound)
// work on the host exactly as inside the plugin. A plugin that dies is
// restarted on the next call; one that speaks another protocol version is
// refused at start with both versions named.
package plugin

import (
	"log/slog"

	"github.com/sandstep/sandstep/internal/service/logging"
)

// PluginName is the key of the provider in go-plugin's plugin sets.
const PluginName = "provider"

// BinaryPrefix starts the file name of every provider plugin:
// sandstep-provider-<name>.
const BinaryPrefix = "sandstep-provider-"

// The handshake's magic cookie, shared by the host and every plugin. It
// only tells a binary started by hand that it is a plugin; it is not a
// secret.
const (
	magicCookieKey   = "SANDSTEP_PLUGIN"
	magicCookieValue = "b6f1c3e08d7a4925e6c2f4a1d93b7e50c18a2f6d"
)

// logLevelEnv carries the host's log level to the plugin, so that a plugin
// does not produce (and the host parse) lines the host would drop.
const logLevelEnv = "SANDSTEP_PLUGIN_LOG_LEVEL"

// Logger returns a logger for a provider to keep from its constructor. It
// writes through the logger Serve sets up even when made before Serve runs,
// as main builds the provider first: the host then shows each line with
// its own level and attributes. A logger taken from slog.Default() in the
// constructor would write through the standard library's text handler,
// and the host would show "INFO configured ..." as a message.
func Logger(args ...any) *slog.Logger { return logging.Default(args...) }
