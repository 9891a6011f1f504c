// Package app assembles sandstep from its configuration: the store, the
// provider plugin and the research phases. The Lambdas assemble it from their
// environment (AWS), `sandstep serve` from its flags and DynamoDB Local; both
// get the same pieces wired the same way.
package app

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/awsenv"
	"github.com/sandstep/sandstep/internal/service/logging"
	"github.com/sandstep/sandstep/internal/service/quota"
	"github.com/sandstep/sandstep/internal/service/report"
	"github.com/sandstep/sandstep/internal/service/research"
	"github.com/sandstep/sandstep/internal/service/sandboxes"
	"github.com/sandstep/sandstep/internal/service/search"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/providers"
)

// Environment variables the Lambdas read (set by template.yaml).
const (
	EnvTablePrefix     = "SANDSTEP_TABLE_PREFIX"
	EnvPluginDir       = "SANDSTEP_PLUGIN_DIR"
	EnvStateMachineARN = "SANDSTEP_STATE_MACHINE_ARN"
	// EnvAgentStateMachineARN is the agent-run state machine's.
	EnvAgentStateMachineARN = "SANDSTEP_AGENT_STATE_MACHINE_ARN"
	// EnvDeployment is the deployment id (the stack name), which replaces
	// [provider] deployment.
	EnvDeployment = "SANDSTEP_DEPLOYMENT"
	EnvLogLevel   = "LOG_LEVEL"
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
			Config:        cfg,
			Logger:        logger,
			Search:        backends,
			LLM:           llm,
			CrawlerBinary: crawler,
		},
	}, nil
}

// UseProvider gives the phases their sandbox provider, and the owner of
// its sandboxes' lifecycle over it.
func (a *App) UseProvider(p providers.Provider) {
	a.Phases.Provider = p
	a.Phases.Sandboxes = a.Sandboxes(p)
}

// Sandboxes returns the owner of the sandbox lifecycle over p, for this
// App's store and configured provider.
func (a *App) Sandboxes(p providers.Provider) *sandboxes.Manager {
	return sandboxes.New(sandboxes.Options{Store: a.Store, Provider: p, ProviderName: a.Config.Provider.Name, Deployment: a.Config.Provider.Deployment, Logger: a.Logger,
		Quotas: quota.New(a.Store, &a.Config.Quotas)})
}

// FromLambdaEnv assembles the App inside a Lambda: config.toml shipped with
// the function, plugins from the providers layer (SANDSTEP_PLUGIN_DIR), tables
// named by prefix, AWS credentials from the execution role and endpoints
// from AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_<SERVICE> (see awsenv).
func FromLambdaEnv() (*App, error) {
	logger := logging.MustNew(os.Stderr, os.Getenv(EnvLogLevel))
	slog.SetDefault(logger)
	cfg, err := config.Load(config.DefaultPath())
	if err != nil {
		return nil, err
	}
	if dir := os.Getenv(EnvPluginDir); dir != "" {
		cfg.Provider.PluginDir = dir
	}
	if id := os.Getenv(EnvDeployment); id != "" {
		if err := config.CheckDeployment(id); err != nil {
			return nil, fmt.Errorf("%s: %w", EnvDeployment, err)
		}
		cfg.Provider.Deployment = id
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
