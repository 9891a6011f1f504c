// Package app assembles sandstep from its configuration: the store, the
// provider plugin and the research phases. The Lambdas assemble it from their
// environment (AWS), `sandstep serve` from its flags and DynamoDB Local; both
// get the same pieces wired the same way.
package app

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/awsenv"
	"github.com/sandstep/sandstep/internal/service/report"
	"github.com/sandstep/sandstep/internal/service/research"
	"github.com/sandstep/sandstep/internal/service/search"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/providers"
)

// Environment variables the Lambdas read (set by template.yaml).
const (
	EnvTablePrefix     = "SANDSTEP_TABLE_PREFIX"
	EnvPluginDir       = "SANDSTEP_PLUGIN_DIR"
	EnvStateMachineARN = "SANDSTEP_STATE_MACHINE_ARN"
	EnvLogLevel        = "LOG_LEVEL"
	// EnvCrawler is the crawler binary to upload to sandboxes (in Lambda,
	// the providers layer's /opt/sandbox/sandstep-crawler).
	EnvCrawler = "SANDSTEP_CRAWLER"
)

// App is the assembled application.
type App struct {
	Config *config.Config
	// AWS is the environment's AWS configuration (Lambdas only): region,
	// credentials and the AWS_ENDPOINT_URL* endpoints.
	AWS    awsenv.Env
	Store  *store.Store
	Phases *research.Phases
	Logger *slog.Logger
}

// New wires an App around a store, without a provider: phases that touch a
// sandbox get one with UseProvider. This package does not import the plugin
// glue so that Lambdas which never open a sandbox (discover, report) do not
// link gRPC and stay small.
func New(cfg *config.Config, st *store.Store, logger *slog.Logger) (*App, error) {
	backends, err := search.FromConfig(cfg.Research.Search, os.Getenv, search.HTTP{})
	if err != nil {
		return nil, err
	}
	llm, err := report.FromConfig(cfg.Research.LLM, os.Getenv)
	if errors.Is(err, report.ErrNoModel) {
		llm, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	crawler := os.Getenv(EnvCrawler)
	if crawler == "" {
		crawler = filepath.Join(cfg.Dir, "bin", "sandbox", "sandstep-crawler")
	}
	return &App{
		Config: cfg,
		Store:  st,
		Logger: logger,
		Phases: &research.Phases{
			Store:         st,
			ProviderName:  cfg.Provider.Name,
			Config:        cfg,
			Logger:        logger,
			Search:        backends,
			LLM:           llm,
			CrawlerBinary: crawler,
		},
	}, nil
}

// UseProvider gives the phases their sandbox provider.
func (a *App) UseProvider(p providers.Provider) { a.Phases.Provider = p }

// FromLambdaEnv assembles the App inside a Lambda: config.toml shipped with
// the function, plugins from the providers layer (SANDSTEP_PLUGIN_DIR), tables
// named by prefix, AWS credentials from the execution role and endpoints
// from AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_<SERVICE> (see awsenv).
func FromLambdaEnv() (*App, error) {
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
	env := awsenv.FromEnv(os.Getenv)
	if ep := env.ConfiguredEndpoint(awsenv.DynamoDB); ep != "" {
		logger.Info("DynamoDB endpoint from the environment", "endpoint", awsenv.Redact(ep))
	}
	a, err := New(cfg, store.New(env.DynamoDB(), prefix), logger)
	if err != nil {
		return nil, err
	}
	a.AWS = env
	return a, nil
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
