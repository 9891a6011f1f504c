//go:build !sandstep.noserve

// The plugin's side: go-plugin's Serve. Hosts built with the tag
// sandstep.noserve (the Lambdas, lambda.mk) leave it out, and with it
// go-plugin, which links net/rpc, gob, html/template and yamux whether or
// not they are used (BENCHMARKS.md); the host side of the protocol is in
// process.go.

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

	"github.com/sandstep/sandstep/providers"
	pb "github.com/sandstep/sandstep/providers/proto"
)

// Handshake is go-plugin's handshake configuration for provider plugins.
var Handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  providers.APIVersion,
	MagicCookieKey:   magicCookieKey,
	MagicCookieValue: magicCookieValue,
}

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

func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return levelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	case hclog.Off:
		return slog.LevelError + 100
	default:
		return slog.LevelInfo
	}
}
