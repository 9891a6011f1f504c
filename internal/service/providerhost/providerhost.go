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
	"maps"
	"os"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/awsenv"
	"github.com/sandstep/sandstep/internal/service/secrets"
	"github.com/sandstep/sandstep/providers"
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
// value is read at init, and again every [provider] secret_refresh when it
// is set.
func LambdaSecrets(ctx context.Context, cfg *config.Config) config.SecretLookup {
	r := &secrets.Resolver{AWS: awsenv.FromEnv(os.Getenv), Refresh: cfg.Provider.SecretRefresh.D()}
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
	if every := cfg.Provider.SecretRefresh.D(); every > 0 && len(secrets) > 0 {
		go refresh(p, cfg, name, logger, lookup, secrets, every)
	}
	return p, nil
}

// refresh reads the provider's secrets every period and configures the
// plugin again when one changed, until the client is closed. In a Lambda
// it runs while an invocation does: a frozen environment catches up when
// it thaws, before the invocation's own calls get far.
func refresh(p *plugin.Client, cfg *config.Config, name string, logger *slog.Logger, lookup config.SecretLookup, current map[string]string, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for range t.C {
		if p.Closed() {
			return
		}
		next, err := cfg.ProviderSecretsFrom(name, lookup)
		if err != nil {
			// Keep the values that work; the error names references only.
			logger.Warn("provider secrets could not be read again; keeping the current ones", "provider", name, "err", err)
			continue
		}
		if maps.Equal(next, current) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err = p.Configure(ctx, providers.Config{
			Settings: cfg.ProviderSettings(name), Secrets: next, Defaults: cfg.SandboxDefaults(),
			BaseDir: cfg.Dir, DataDir: cfg.ProviderDataDir(name),
		})
		cancel()
		if err != nil {
			logger.Warn("the provider refused its refreshed secrets; keeping the current ones", "provider", name, "err", err)
			continue
		}
		current = next
		logger.Info("provider secrets changed; the provider now uses the new values", "provider", name)
	}
}

// Lambda opens the configured provider in a Lambda's init: once per
// execution environment, so warm invocations reuse the plugin. A failure is
// fatal, as Lambda retries a failed init with a fresh environment.
func Lambda(cfg *config.Config, logger *slog.Logger) *plugin.Client {
	ctx := context.Background()
	p, err := OpenIn(ctx, cfg, "", logger, LambdaSecrets(ctx, cfg))
	if err != nil {
		logger.Error("init: provider", "err", err)
		os.Exit(1)
	}
	return p
}
