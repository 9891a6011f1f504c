// Package plugin connects sandstep to its sandbox providers through
// hashicorp/go-plugin: a provider binary calls Serve from its main, and the
// host calls Start to run that binary as a subprocess and use it as a
// providers.Provider.
//
// The wire protocol is providers/proto (gRPC only). Provider errors cross it
// as codes, so providers.CodeOf and errors.Is(err, providers.ErrNotFound)
// work on the host exactly as inside the plugin. A plugin that dies is
// restarted on the next call; one that speaks another protocol version is
// refused at start with both versions named.
package plugin

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/sandstep/sandstep/internal/service/logging"
	"github.com/sandstep/sandstep/providers"
	pb "github.com/sandstep/sandstep/providers/proto"
)

// PluginName is the key of the provider in go-plugin's plugin sets.
const PluginName = "provider"

// BinaryPrefix starts the file name of every provider plugin:
// sandstep-provider-<name>.
const BinaryPrefix = "sandstep-provider-"

// Handshake is shared by the host and every plugin. The cookie only tells a
// binary started by hand that it is a plugin; it is not a secret.
var Handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  providers.APIVersion,
	MagicCookieKey:   "SANDSTEP_PLUGIN",
	MagicCookieValue: "b6f1c3e08d7a4925e6c2f4a1d93b7e50c18a2f6d",
}

// logLevelEnv carries the host's log level to the plugin, so that a plugin
// does not produce (and the host parse) lines the host would drop.
const logLevelEnv = "SANDSTEP_PLUGIN_LOG_LEVEL"

// GRPCPlugin is the go-plugin plugin for protocol version 1. Impl is set on
// the plugin side only. It is exported so that a binary serving several
// protocol versions can put it in its own VersionedPlugins.
type GRPCPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	Impl providers.Provider
}

// GRPCServer registers the provider service on the plugin's server.
func (p *GRPCPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterProviderServer(s, &server{impl: p.Impl})
	return nil
}

// GRPCClient returns the host's side of the connection, a providers.Provider.
func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return newGRPCClient(c), nil
}

// Serve runs p as a plugin until the host ends it; call it from main. Logs
// go to stderr as JSON lines, which the host relays to its own logger: both
// go-plugin's and any written through slog's default logger, which Serve
// sets up.
func Serve(p providers.Provider) {
	// go-plugin points os.Stderr at a pipe of its own once serving; logs
	// must go to the real stderr, which the host reads line by line.
	stderr := os.Stderr
	level := hclog.LevelFromString(os.Getenv(logLevelEnv))
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	slog.SetDefault(slog.New(newPluginLogHandler(stderr, slogLevel(level))))
	watchHost()
	ignoreTerm()
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: Handshake,
		VersionedPlugins: map[int]goplugin.PluginSet{
			providers.APIVersion: {PluginName: &GRPCPlugin{Impl: p}},
		},
		GRPCServer: newGRPCServer,
		Logger: hclog.New(&hclog.LoggerOptions{
			Output:     stderr,
			Level:      level,
			JSONFormat: true,
		}),
	})
}

// Logger returns a logger for a provider to keep from its constructor. It
// writes through the logger Serve sets up even when made before Serve runs,
// as main builds the provider first: the host then shows each line with
// its own level and attributes. A logger taken from slog.Default() in the
// constructor would write through the standard library's text handler,
// and the host would show "INFO configured ..." as a message.
func Logger(args ...any) *slog.Logger { return logging.Default(args...) }

// ignoreTerm keeps the plugin alive through a SIGTERM: the host ends its
// plugin (Client.Close), after using it to stop what runs, and the plugin
// dies with the host in any case (watchHost, the parent-death signal). A
// SIGTERM sent to the host's whole process group (systemd stopping the
// service, timeout(1)) would otherwise end the plugin first, with an error
// in the host's log and no plugin to terminate sandboxes through. go-plugin
// does the same with SIGINT. The signal is caught, not ignored: an ignored
// signal would stay ignored in the processes the plugin starts.
func ignoreTerm() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM)
	go func() {
		for range ch {
			slog.Debug("SIGTERM ignored: the host ends its plugin")
		}
	}()
}
