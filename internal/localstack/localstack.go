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
	"github.com/sandstep/sandstep/internal/api"
	"github.com/sandstep/sandstep/internal/app"
	"github.com/sandstep/sandstep/internal/asl"
	"github.com/sandstep/sandstep/internal/ddblocal"
	"github.com/sandstep/sandstep/internal/engine"
	"github.com/sandstep/sandstep/internal/providerhost"
	"github.com/sandstep/sandstep/internal/samtemplate"
	"github.com/sandstep/sandstep/internal/store"
	"github.com/sandstep/sandstep/providers/plugin"
)

// StateMachineID is the template resource of the deep-research machine.
const StateMachineID = "DeepResearchStateMachine"

// StatusChangeFunction is the function the template's status-change rule
// invokes (Cleanup).
const StatusChangeFunction = "CleanupFunction"

// Options configure a Stack.
type Options struct {
	Config *config.Config
	// Template is template.yaml; default: beside the config file.
	Template string
	// Store, when set, is used as is (tests pass one on a shared DynamoDB
	// Local). Otherwise DynamoDB Local is started with its data kept under
	// DataDir/dynamodb and the tables are created if missing.
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
	Clock       asl.Clock
	Logger      *slog.Logger
}

// Stack is the running local system.
type Stack struct {
	App      *app.App
	Provider *plugin.Client
	Engine   *engine.Local
	Handler  http.Handler
	ddb      *ddblocal.Instance
	log      *slog.Logger
}

// Start brings the stack up; Shutdown takes it down.
func Start(ctx context.Context, opts Options) (_ *Stack, err error) {
	cfg := opts.Config
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if opts.Template == "" {
		opts.Template = filepath.Join(cfg.Dir, "template.yaml")
	}
	tmpl, err := samtemplate.Load(opts.Template)
	if err != nil {
		return nil, err
	}
	s := &Stack{log: log}
	defer func() {
		if err != nil {
			s.Shutdown(context.WithoutCancel(ctx))
		}
	}()
	st := opts.Store
	if st == nil {
		dataDir := opts.DataDir
		if dataDir == "" {
			dataDir = cfg.Server.DataDir
		}
		s.ddb, err = ddblocal.Start(ctx, ddblocal.Options{DBPath: filepath.Join(dataDir, "dynamodb")})
		if err != nil {
			return nil, fmt.Errorf("DynamoDB Local: %w", err)
		}
		prefix := opts.TablePrefix
		if prefix == "" {
			prefix = "sandstep-local-"
		}
		if err := store.CreateTables(ctx, s.ddb.Client(), tmpl.Path, prefix); err != nil {
			return nil, fmt.Errorf("create tables: %w", err)
		}
		st = store.New(s.ddb.Client(), prefix)
	}
	s.App = app.New(cfg, st, log)
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
	var inv asl.Invoker = engine.NewInvoker(engine.Functions{
		"DiscoverFunction":  s.App.Phases.Discover,
		"ProvisionFunction": s.App.Phases.Provision,
		"CrawlFunction":     s.App.Phases.Crawl,
		"SummarizeFunction": s.App.Phases.Summarize,
		"ReportFunction":    s.App.Phases.Report,
		"CleanupFunction":   s.App.Phases.Cleanup,
	})
	if opts.WrapInvoker != nil {
		inv = opts.WrapInvoker(inv)
	}
	s.Engine, err = engine.NewLocal(engine.LocalOptions{
		Definition:           def,
		Substitutions:        subs,
		Name:                 StateMachineID,
		Invoker:              inv,
		StatusChangeFunction: StatusChangeFunction,
		CancelGrace:          opts.CancelGrace,
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
	s.Handler = api.New(api.Options{
		Store:     st,
		Executor:  s.Engine,
		Provider:  s.Provider,
		Auth:      auth,
		Logger:    log,
		Streaming: true,
	})
	return s, nil
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
	if s.Engine != nil {
		errs = append(errs, s.Engine.Shutdown(ctx))
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
	live, err := s.App.Store.LedgerListLive(ctx, time.Now().Add(100*365*24*time.Hour), 1000)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	var errs []error
	for _, e := range live {
		if e.ProviderID != "" {
			if err := s.Provider.Terminate(ctx, e.ProviderID); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if _, err := s.App.Store.LedgerClose(ctx, e.Name, "shutdown"); err != nil {
			errs = append(errs, err)
		}
		s.log.Info("terminated sandbox at shutdown", "sandbox_id", e.ProviderID, "name", e.Name)
	}
	return errors.Join(errs...)
}
