// Package providerhost starts the provider plugin that config.toml names,
// handing it only its own settings and secrets. The CLI, the local server and
// every Lambda open their provider through here, so they all start it the
// same way.
package providerhost

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/providers/plugin"
)

// Open starts provider name's plugin (cfg.Provider.Name when name is "") and
// configures it from cfg. Secrets are resolved from the environment here, in
// the host, because the plugin inherits no environment.
func Open(ctx context.Context, cfg *config.Config, name string, logger *slog.Logger) (*plugin.Client, error) {
	if name == "" {
		name = cfg.Provider.Name
	}
	settings, err := cfg.ProviderSettings(name)
	if err != nil {
		return nil, fmt.Errorf("provider %q: %w", name, err)
	}
	secrets, err := cfg.ProviderSecrets(name, os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("provider %q: %w", name, err)
	}
	if logger == nil {
		logger = slog.Default()
	}
	return plugin.Start(ctx, plugin.Options{
		Path:     cfg.PluginPath(name),
		Name:     name,
		Settings: settings,
		Secrets:  secrets,
		Defaults: cfg.SandboxDefaults(),
		Logger:   logger,
	})
}

// Lambda opens the configured provider in a Lambda's init: once per
// execution environment, so warm invocations reuse the plugin. A failure is
// fatal, as Lambda retries a failed init with a fresh environment.
func Lambda(cfg *config.Config, logger *slog.Logger) *plugin.Client {
	p, err := Open(context.Background(), cfg, "", logger)
	if err != nil {
		logger.Error("init: provider", "err", err)
		os.Exit(1)
	}
	return p
}
