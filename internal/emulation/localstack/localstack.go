// Package localstack runs the whole of sandstep on one machine: DynamoDB
// Local with the tables of template.yaml, the configured provider plugin, the
// local ASL engine running statemachine definitions with the phase handlers
// in-process, and the HTTP API. `sandstep serve` and the end-to-end tests
// start it the same way.
package localstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/emulation/asl"
	"github.com/sandstep/sandstep/internal/emulation/ddblocal"
	"github.com/sandstep/sandstep/internal/emulation/localexec"
	"github.com/sandstep/sandstep/internal/emulation/samtemplate"
	"github.com/sandstep/sandstep/internal/service/agents"
	"github.com/sandstep/sandstep/internal/service/api"
	"github.com/sandstep/sandstep/internal/service/app"
	"github.com/sandstep/sandstep/internal/service/awsenv"
	"github.com/sandstep/sandstep/internal/service/direct"
	"github.com/sandstep/sandstep/internal/service/docsearch"
	"github.com/sandstep/sandstep/internal/service/portproxy"
	"github.com/sandstep/sandstep/internal/service/providerhost"
	"github.com/sandstep/sandstep/internal/service/quota"
	"github.com/sandstep/sandstep/internal/service/reaper"
	"github.com/sandstep/sandstep/internal/service/sessions"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/service/tools"
	"github.com/sandstep/sandstep/providers/plugin"
)

// StateMachineID is the template resource of the deep-research machine.
const StateMachineID = "DeepResearchStateMachine"

// StatusChangeFunction is the function the template's status-change rule
// invokes (Cleanup).
const StatusChangeFunction = "CleanupFunction"

// AgentStateMachineID is the template resource of the agent-run machine;
// AgentFunction serves its phases and its status-change rule.
const (
	AgentStateMachineID = "AgentRunStateMachine"
	AgentFunction       = "AgentFunction"
)

// Options configure a Stack.
type Options struct {
	Config *config.Config
	// Template is template.yaml; default: beside the config file, else
	// $SANDSTEP_TEMPLATE or the first found walking up from the working
	// directory.
	Template string
	// Store, when set, is used as is (tests pass one on a shared DynamoDB
	// Local). Otherwise the stack uses the DynamoDB that
	// AWS_ENDPOINT_URL_DYNAMODB (or AWS_ENDPOINT_URL) names, or else starts
	// DynamoDB Local with its data kept under DataDir/dynamodb; either way
	// the tables are created if missing.
	Store   *store.Store
	DataDir string
	// TablePrefix for a started DynamoDB Local; default "sandstep-local-".
	TablePrefix string
	// DevToken is accepted for tenant "dev" besides config's tokens.
	DevToken string
	// WrapInvoker lets tests inject faults between the engine and the
	// phases, where Lambda's own failures would happen.
	WrapInvoker func(asl.Invoker) asl.Invoker
	CancelGrace time.Duration
	CancelPoll  time.Duration
	// AgentSlice is how long one run phase of an agent run supervises
	// before the machine calls it again (default agents' own).
	AgentSlice time.Duration
	Clock      asl.Clock
	// ReaperInterval overrides [sessions] reaper_interval for the cleanup
	// ticker; negative runs no ticker (tests run Reaper.Pass themselves).
	ReaperInterval time.Duration
	// Now is the clock of direct sandboxes' lifetimes, limits and
	// idleness, and of the reaper's passes (default time.Now).
	Now    func() time.Time
	Logger *slog.Logger
}

// Stack is the running local system.
type Stack struct {
	App      *app.App
	Provider *plugin.Client
	Engine   *localexec.Local
	// AgentEngine runs the agent-run state machine; Agents its phases.
	AgentEngine *localexec.Local
	Agents      *agents.Runs
	Handler     http.Handler
	// Sessions serves the session routes when [sessions] is on; off, it
	// still lets the reaper judge sandboxes sessions left.
	Sessions *sessions.Service
	Reaper   *reaper.Reaper
	// Direct serves /v1/sandboxes.
	Direct *direct.Service
	// Docs is the LLM tools' docs index, nil when sessions are off.
	Docs *docsearch.Service
	ddb  *ddblocal.Instance
	log  *slog.Logger

	stopReaper context.CancelFunc
	reaperDone chan struct{}
	stopDocs   context.CancelFunc
	docsDone   chan struct{}
}

// Start brings the stack up; Shutdown takes it down. Before it returns (and
// so before anything is served), it takes up what a previous process on the
// same data left behind: executions resume, and the reaper's startup pass
// ends what nothing claims (see recover.go).
func Start(ctx context.Context, opts Options) (_ *Stack, err error) {
	cfg := opts.Config
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if opts.Template == "" {
		opts.Template = filepath.Join(cfg.Dir, "template.yaml")
		if _, err := os.Stat(opts.Template); err != nil {
			if opts.Template, err = ddblocal.FindTemplate(); err != nil {
				return nil, err
			}
		}
	}
	tmpl, err := samtemplate.Load(opts.Template)
	if err != nil {
		return nil, err
	}
	started := time.Now()
	s := &Stack{log: log}
	defer func() {
		if err != nil {
			s.Shutdown(context.WithoutCancel(ctx))
		}
	}()
	st := opts.Store
	if st == nil {
		prefix := opts.TablePrefix
		if prefix == "" {
			prefix = "sandstep-local-"
		}
		// A DynamoDB the environment names (AWS_ENDPOINT_URL_DYNAMODB, as
		// the AWS SDKs read it) is used as it is; otherwise one of our own.
		client, endpoint := ddblocal.FromEnv(os.Getenv)
		if client == nil {
			dataDir := opts.DataDir
			if dataDir == "" {
				dataDir = cfg.Server.DataDir
			}
			s.ddb, err = ddblocal.Start(ctx, ddblocal.Options{DBPath: filepath.Join(dataDir, "dynamodb")})
			if err != nil {
				return nil, fmt.Errorf("DynamoDB Local: %w", err)
			}
			client = s.ddb.Client()
			// Where to look at the tables with any DynamoDB client.
			log.Info("DynamoDB Local started", "endpoint", s.ddb.Endpoint(), "table_prefix", prefix, "data", filepath.Join(dataDir, "dynamodb"))
		} else {
			log.Info("DynamoDB from the environment", "endpoint", awsenv.Redact(endpoint), "table_prefix", prefix)
		}
		if err := ddblocal.CreateTables(ctx, client, tmpl.Path, prefix); err != nil {
			return nil, fmt.Errorf("create tables: %w", err)
		}
		st = store.New(client, prefix)
	}
	if s.App, err = app.New(cfg, st, log); err != nil {
		return nil, err
	}
	s.Provider, err = providerhost.Open(ctx, cfg, "", log)
	if err != nil {
		return nil, err
	}
	s.App.UseProvider(s.Provider)
	s.App.Phases.CancelPoll = opts.CancelPoll

	def, subs, err := stateMachine(tmpl, StateMachineID)
	if err != nil {
		return nil, err
	}
	var inv asl.Invoker = localexec.NewInvoker(localexec.Functions{
		"DiscoverFunction":  s.App.Phases.Discover,
		"ProvisionFunction": s.App.Phases.Provision,
		"CrawlFunction":     s.App.Phases.Crawl,
		"SummarizeFunction": s.App.Phases.Summarize,
		"ReportFunction":    s.App.Phases.Report,
		"CleanupFunction":   s.App.Phases.Cleanup,
	})
	if faultHook != nil {
		inv = faultHook(inv)
	}
	if opts.WrapInvoker != nil {
		inv = opts.WrapInvoker(inv)
	}
	s.Engine, err = localexec.NewLocal(localexec.LocalOptions{
		Definition:           def,
		Substitutions:        subs,
		Name:                 StateMachineID,
		Invoker:              inv,
		StatusChangeFunction: StatusChangeFunction,
		CancelGrace:          opts.CancelGrace,
		Store:                st,
		Siblings:             []string{AgentStateMachineID},
		Clock:                opts.Clock,
		Logger:               log,
	})
	if err != nil {
		return nil, err
	}
	auth, err := api.NewAuthenticator(cfg.Auth, os.Getenv, opts.DevToken)
	if err != nil {
		return nil, err
	}
	s.Direct = direct.New(direct.Options{Config: cfg.Sandboxes, Defaults: cfg.Sandbox, Store: st,
		Sandboxes: s.App.Phases.Sandboxes, Provider: s.Provider, Logger: log, Now: opts.Now})
	if err := s.startAgents(opts, tmpl, st); err != nil {
		return nil, err
	}
	if err := s.startSessions(ctx, opts, st); err != nil {
		return nil, err
	}
	if err := s.startDocs(opts, st); err != nil {
		return nil, err
	}
	s.recover(ctx, started)
	s.startReaper(opts)
	s.Handler = api.New(api.Options{
		Store:         st,
		Executor:      s.Engine,
		AgentExecutor: s.AgentEngine,
		Agents:        cfg.Agents,
		Provider:      s.Provider,
		Deployment:    cfg.Provider.Deployment,
		Auth:          auth,
		Quotas:        quota.New(st, &cfg.Quotas),
		Pricing:       &cfg.Pricing,
		Sessions:      s.Sessions,
		Sandboxes:     s.Direct,
		PortProxy:     portproxy.New,
		Now:           opts.Now,
		Docs:          s.Docs,
		Tools:         tools.SettingsFrom(cfg),
		Logger:        log,
		Streaming:     true,
		Server:        cfg.Server,
	})
	return s, nil
}

// startSessions wires the run_code sessions and the cleanup: the
// dependency snapshot starts building now, and the reaper runs every
// reaper_interval.
func (s *Stack) startSessions(ctx context.Context, opts Options, st *store.Store) error {
	cfg := opts.Config
	var err error
	s.Sessions, err = sessions.New(sessions.Options{Config: cfg, Store: st, Provider: s.Provider, Logger: s.log})
	if err != nil {
		return err
	}
	if cfg.Sessions.Enabled {
		if err := s.Sessions.StartSnapshot(ctx); err != nil {
			return err
		}
	}
	s.Reaper = &reaper.Reaper{Store: st, Sandboxes: s.App.Phases.Sandboxes, Sessions: s.Sessions, Direct: s.Direct,
		Executions: executions{s}, CancelGrace: opts.CancelGrace, Now: opts.Now, Logger: s.log}
	return nil
}

// startReaper runs the cleanup every reaper_interval.
func (s *Stack) startReaper(opts Options) {
	interval := opts.ReaperInterval
	if interval == 0 {
		interval = opts.Config.Sessions.ReaperInterval.D()
	}
	if interval < 0 {
		return
	}
	rctx, stop := context.WithCancel(context.Background())
	s.stopReaper, s.reaperDone = stop, make(chan struct{})
	go func() {
		defer close(s.reaperDone)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
				// Pass logs its counts and errors.
				_, _ = s.Reaper.Pass(rctx)
			}
		}
	}()
}

// stateMachine reads a state machine's definition and its substitutions
// (placeholder -> function logical id) from the template.
func stateMachine(t *samtemplate.Template, id string) ([]byte, map[string]string, error) {
	uri, ok := t.Property(id, "DefinitionUri")
	path, isString := uri.(string)
	if !ok || !isString {
		return nil, nil, fmt.Errorf("template: %s has no DefinitionUri file", id)
	}
	def, err := os.ReadFile(filepath.Join(t.Dir, path))
	if err != nil {
		return nil, nil, fmt.Errorf("template: %s: %w", id, err)
	}
	raw, _ := t.Property(id, "DefinitionSubstitutions")
	m, _ := raw.(map[string]any)
	subs := make(map[string]string, len(m))
	for ph, v := range m {
		target, err := getAttArn(v)
		if err != nil {
			return nil, nil, fmt.Errorf("template: %s substitution %s: %w", id, ph, err)
		}
		subs[ph] = target
	}
	return def, subs, nil
}

// getAttArn returns X of {"Fn::GetAtt": ["X", "Arn"]}: the only kind of
// substitution the local engine can map to an in-process handler.
func getAttArn(v any) (string, error) {
	m, _ := v.(map[string]any)
	args, _ := m["Fn::GetAtt"].([]any)
	if len(args) == 2 {
		res, _ := args[0].(string)
		attr, _ := args[1].(string)
		if res != "" && attr == "Arn" {
			return res, nil
		}
	}
	return "", fmt.Errorf("want !GetAtt <Function>.Arn, got %v", v)
}

// Shutdown stops every execution (their cleanups terminate the sandboxes),
// terminates whatever the ledger still holds as live, stops the plugin and
// DynamoDB Local. Nothing is left running.
func (s *Stack) Shutdown(ctx context.Context) error {
	var errs []error
	if s.stopReaper != nil {
		s.stopReaper()
		<-s.reaperDone
	}
	if s.stopDocs != nil {
		s.stopDocs()
		<-s.docsDone
	}
	if s.Sessions != nil {
		errs = append(errs, s.Sessions.Shutdown(ctx))
	}
	if s.Engine != nil {
		errs = append(errs, s.Engine.Shutdown(ctx))
	}
	if s.AgentEngine != nil {
		errs = append(errs, s.AgentEngine.Shutdown(ctx))
	}
	if s.App != nil && s.Provider != nil {
		errs = append(errs, s.terminateLive(ctx))
	}
	if s.Provider != nil {
		errs = append(errs, s.Provider.Close())
	}
	if s.ddb != nil {
		errs = append(errs, s.ddb.Stop())
	}
	return errors.Join(errs...)
}

// terminateLive is the backstop for sandboxes no cleanup reached.
func (s *Stack) terminateLive(ctx context.Context) error {
	_, err := s.App.Phases.Sandboxes.ReleaseAll(ctx, "shutdown")
	return err
}
