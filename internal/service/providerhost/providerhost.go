// Package providerhost starts the provider plugin that config.toml names,
// handing it only its own settings table (which it checks itself) and
// secrets. The CLI, the local server and
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
	secrets, err := cfg.ProviderSecrets(name, os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("provider %q: %w", name, err)
	}
	if logger == nil {
		logger = slog.Default()
	}
	p, err := plugin.Start(ctx, plugin.Options{
		Path:     cfg.PluginPath(name),
		Name:     name,
		Settings: cfg.ProviderSettings(name),
		Secrets:  secrets,
		Defaults: cfg.SandboxDefaults(),
		BaseDir:  cfg.Dir,
		DataDir:  cfg.ProviderDataDir(name),
		Logger:   logger,
	})
	if err != nil {
		// The provider checks its own table; its problems name keys,
		// which the config turns into lines of the file.
		return nil, cfg.ProviderError(name, err)
	}
	return p, nil
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
