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
	"github.com/sandstep/sandstep/internal/service/awsenv"
	"github.com/sandstep/sandstep/internal/service/secrets"
	"github.com/sandstep/sandstep/providers/plugin"
)

// Open starts provider name's plugin (cfg.Provider.Name when name is "") and
// configures it from cfg. Secrets are resolved from the environment here, in
// the host, because the plugin inherits no environment; a reference to an
// AWS secret store is an error naming it (Lambdas use OpenIn with
// LambdaSecrets).
func Open(ctx context.Context, cfg *config.Config, name string, logger *slog.Logger) (*plugin.Client, error) {
	return OpenIn(ctx, cfg, name, logger, config.EnvLookup(os.Getenv))
}

// LambdaSecrets reads the secrets config.toml references in a Lambda: from
// its environment, Secrets Manager and SSM Parameter Store, with the
// execution role's credentials and the AWS_ENDPOINT_URL* endpoints. Each
// value is read once, at init: the provider is configured with it for the
// execution environment's life.
func LambdaSecrets(ctx context.Context) config.SecretLookup {
	r := &secrets.Resolver{AWS: awsenv.FromEnv(os.Getenv)}
	return r.Lookup(ctx)
}

// OpenIn is Open reading secrets through lookup.
func OpenIn(ctx context.Context, cfg *config.Config, name string, logger *slog.Logger, lookup config.SecretLookup) (*plugin.Client, error) {
	if name == "" {
		name = cfg.Provider.Name
	}
	secrets, err := cfg.ProviderSecretsFrom(name, lookup)
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
	ctx := context.Background()
	p, err := OpenIn(ctx, cfg, "", logger, LambdaSecrets(ctx))
	if err != nil {
		logger.Error("init: provider", "err", err)
		os.Exit(1)
	}
	return p
}
