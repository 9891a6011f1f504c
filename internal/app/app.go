// Package app assembles sandstep from its configuration: the store, the
// provider plugin and the research phases. The Lambdas assemble it from their
// environment (AWS), `sandstep serve` from its flags and DynamoDB Local; both
// get the same pieces wired the same way.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/providerhost"
	"github.com/sandstep/sandstep/internal/research"
	"github.com/sandstep/sandstep/internal/store"
	"github.com/sandstep/sandstep/providers/plugin"
)

// Environment variables the Lambdas read (set by template.yaml).
const (
	EnvTablePrefix     = "SANDSTEP_TABLE_PREFIX"
	EnvPluginDir       = "SANDSTEP_PLUGIN_DIR"
	EnvStateMachineARN = "SANDSTEP_STATE_MACHINE_ARN"
	EnvLogLevel        = "LOG_LEVEL"
)

// App is the assembled application.
type App struct {
	Config   *config.Config
	Store    *store.Store
	Provider *plugin.Client
	Phases   *research.Phases
	Logger   *slog.Logger
}

// New wires an App around a store. The provider plugin starts here, once per
// process: warm Lambda invocations reuse it, and it restarts on its own if it
// dies.
func New(ctx context.Context, cfg *config.Config, st *store.Store, logger *slog.Logger) (*App, error) {
	prov, err := providerhost.Open(ctx, cfg, "", logger)
	if err != nil {
		return nil, err
	}
	return &App{
		Config:   cfg,
		Store:    st,
		Provider: prov,
		Logger:   logger,
		Phases: &research.Phases{
			Store:        st,
			Provider:     prov,
			ProviderName: cfg.Provider.Name,
			Config:       cfg,
			Logger:       logger,
		},
	}, nil
}

// Close stops the provider plugin.
func (a *App) Close() error {
	if a.Provider != nil {
		return a.Provider.Close()
	}
	return nil
}

// FromLambdaEnv assembles the App inside a Lambda: config.toml shipped with
// the function, plugins from the providers layer, tables named by prefix,
// AWS credentials from the execution role (never passed to the plugin).
func FromLambdaEnv(ctx context.Context) (*App, error) {
	logger := NewLogger(os.Stderr, os.Getenv(EnvLogLevel))
	slog.SetDefault(logger)
	cfg, err := config.Load(config.DefaultPath())
	if err != nil {
		return nil, err
	}
	if dir := os.Getenv(EnvPluginDir); dir != "" {
		cfg.Provider.PluginDir = dir
	}
	prefix := os.Getenv(EnvTablePrefix)
	if prefix == "" {
		return nil, errors.New(EnvTablePrefix + " is not set")
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("aws config: %w", err)
	}
	return New(ctx, cfg, store.New(dynamodb.NewFromConfig(awsCfg), prefix), logger)
}

// NewLogger returns a JSON slog logger at the named level (debug, info,
// warn, error; default info).
func NewLogger(w *os.File, level string) *slog.Logger {
	var l slog.Level
	switch strings.ToLower(level) {
	case "debug":
		l = slog.LevelDebug
	case "warn", "warning":
		l = slog.LevelWarn
	case "error":
		l = slog.LevelError
	default:
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}
