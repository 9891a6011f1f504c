// Command reaper is the scheduled cleanup as a Lambda (an EventBridge
// schedule in template.yaml): one pass deletes session volumes idle past
// their TTL, closes idle session sandboxes, terminates sandboxes nothing
// needs, and stops executions of cancelled jobs that did not stop. `sandstep
// serve` runs the same pass on a ticker.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/sandstep/sandstep/internal/service/app"
	"github.com/sandstep/sandstep/internal/service/direct"
	"github.com/sandstep/sandstep/internal/service/docsearch"
	"github.com/sandstep/sandstep/internal/service/engine"
	"github.com/sandstep/sandstep/internal/service/providerhost"
	"github.com/sandstep/sandstep/internal/service/reaper"
	"github.com/sandstep/sandstep/internal/service/sessions"
)

func main() {
	a, err := app.FromLambdaEnv()
	if err != nil {
		slog.Error("init", "err", err)
		os.Exit(1)
	}
	prov := providerhost.Lambda(a.Config, a.Logger)
	svc, err := sessions.NewForLambda(a.Config, a.Store, a.AWS, prov, a.Logger)
	if err != nil {
		slog.Error("init", "err", err)
		os.Exit(1)
	}
	mgr := a.Sandboxes(prov)
	r := &reaper.Reaper{
		Store:     a.Store,
		Sandboxes: mgr,
		Direct: direct.New(direct.Options{Config: a.Config.Sandboxes, Defaults: a.Config.Sandbox, Store: a.Store,
			Sandboxes: mgr, Provider: prov, Logger: a.Logger}),
		Sessions: svc,
		Executions: reaper.StepFunctions{SF: engine.NewStepFunctions(a.AWS, os.Getenv(app.EnvStateMachineARN)),
			Agents: engine.NewStepFunctions(a.AWS, os.Getenv(app.EnvAgentStateMachineARN))},
		Logger: a.Logger,
	}
	if a.Config.Sessions.Enabled {
		// The docs of the LLM tools are indexed from this schedule every
		// [tools] reindex_interval.
		emb, err := docsearch.NewEmbedder(a.Config.Tools.Embeddings, os.Getenv, nil)
		if err != nil {
			slog.Error("init", "err", err)
			os.Exit(1)
		}
		r.Docs = docsearch.New(docsearch.Options{Config: a.Config, Store: a.Store, Embedder: emb, Logger: a.Logger})
	}
	// The scheduled event carries nothing the pass needs; an operator
	// invoking it with {"migrate_ledger_index": true} after upgrading past
	// the sharded ledger index runs the migration first (docs/capacity.md).
	lambda.Start(func(ctx context.Context, in struct {
		MigrateLedgerIndex bool `json:"migrate_ledger_index"`
	}) (reaper.Counts, error) {
		if in.MigrateLedgerIndex {
			return r.Migrate(ctx)
		}
		return r.Pass(ctx)
	})
}
