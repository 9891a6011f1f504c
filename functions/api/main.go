// Command api is sandstep's HTTP API as a Lambda behind an API Gateway HTTP
// API; `sandstep serve` serves the same handler with net/http.
package main

import (
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sfn"

	"github.com/sandstep/sandstep/internal/service/api"
	"github.com/sandstep/sandstep/internal/service/app"
	"github.com/sandstep/sandstep/internal/service/docsearch"
	"github.com/sandstep/sandstep/internal/service/engine"
	"github.com/sandstep/sandstep/internal/service/providerhost"
	"github.com/sandstep/sandstep/internal/service/sessions"
	"github.com/sandstep/sandstep/internal/service/tools"
)

func main() {
	a, err := app.FromLambdaEnv()
	if err != nil {
		slog.Error("init", "err", err)
		os.Exit(1)
	}
	auth, err := api.NewAuthenticator(a.Config.Auth, os.Getenv, "")
	if err != nil {
		slog.Error("init", "err", err)
		os.Exit(1)
	}
	prov := providerhost.Lambda(a.Config, a.Logger)
	svc, err := sessions.NewForLambda(a.Config, a.Store, app.LambdaAWSConfig(), prov, a.Logger)
	if err != nil {
		slog.Error("init", "err", err)
		os.Exit(1)
	}
	// The docs index is read here and cached across warm invocations; the
	// ReaperFunction's schedule builds it.
	var docs *docsearch.Service
	if a.Config.Sessions.Enabled {
		emb, err := docsearch.NewEmbedder(a.Config.Tools.Embeddings, os.Getenv, nil)
		if err != nil {
			slog.Error("init", "err", err)
			os.Exit(1)
		}
		docs = docsearch.New(docsearch.Options{Config: a.Config, Store: a.Store, Embedder: emb, Logger: a.Logger})
	}
	h := api.New(api.Options{
		Store: a.Store,
		Executor: &engine.StepFunctions{
			Client:          sfn.NewFromConfig(app.LambdaAWSConfig()),
			StateMachineARN: os.Getenv(app.EnvStateMachineARN),
		},
		Provider: prov,
		Sessions: svc,
		Docs:     docs,
		Tools:    tools.SettingsFrom(a.Config),
		Auth:     auth,
		Logger:   a.Logger,
		// The body limits of [server] hold behind API Gateway too.
		Server: a.Config.Server,
	})
	lambda.Start(api.LambdaHandler(h))
}
