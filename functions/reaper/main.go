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
	"github.com/aws/aws-sdk-go-v2/service/sfn"

	"github.com/sandstep/sandstep/internal/service/app"
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
	awsCfg := app.LambdaAWSConfig()
	prov := providerhost.Lambda(a.Config, a.Logger)
	svc, err := sessions.NewForLambda(a.Config, a.Store, awsCfg, prov, a.Logger)
	if err != nil {
		slog.Error("init", "err", err)
		os.Exit(1)
	}
	r := &reaper.Reaper{
		Store:        a.Store,
		Provider:     prov,
		ProviderName: a.Config.Provider.Name,
		Sessions:     svc,
		Executions: reaper.StepFunctions{SF: &engine.StepFunctions{
			Client:          sfn.NewFromConfig(awsCfg),
			StateMachineARN: os.Getenv(app.EnvStateMachineARN),
		}},
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
	// The scheduled event carries nothing the pass needs.
	lambda.Start(func(ctx context.Context) (reaper.Counts, error) { return r.Pass(ctx) })
}
