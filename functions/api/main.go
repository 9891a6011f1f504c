// Command api is sandstep's HTTP API as a Lambda behind an API Gateway HTTP
// API; `sandstep serve` serves the same handler with net/http.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/sandstep/sandstep/internal/service/api"
	"github.com/sandstep/sandstep/internal/service/app"
	"github.com/sandstep/sandstep/internal/service/direct"
	"github.com/sandstep/sandstep/internal/service/docsearch"
	"github.com/sandstep/sandstep/internal/service/engine"
	"github.com/sandstep/sandstep/internal/service/providerhost"
	"github.com/sandstep/sandstep/internal/service/quota"
	"github.com/sandstep/sandstep/internal/service/sessions"
	"github.com/sandstep/sandstep/internal/service/tools"
	"github.com/sandstep/sandstep/providers/plugin"
)

func main() {
	f, err := newFunction(context.Background())
	if err != nil {
		slog.Error("init", "err", err)
		os.Exit(1)
	}
	lambda.Start(f.handle)
}

// function is the API as this Lambda runs it, assembled from nothing but
// its environment (see app.FromLambdaEnv and awsenv).
type function struct {
	handle   func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)
	provider *plugin.Client
}

func newFunction(ctx context.Context) (*function, error) {
	a, err := app.FromLambdaEnv()
	if err != nil {
		return nil, err
	}
	auth, err := api.NewAuthenticator(a.Config.Auth, os.Getenv, "")
	if err != nil {
		return nil, err
	}
	// Once per execution environment, so warm invocations reuse the plugin;
	// a failed init is retried by Lambda with a fresh environment.
	prov, err := providerhost.OpenIn(ctx, a.Config, "", a.Logger, providerhost.LambdaSecrets(ctx, a.Config))
	if err != nil {
		return nil, err
	}
	svc, err := sessions.NewForLambda(a.Config, a.Store, a.AWS, prov, a.Logger)
	if err != nil {
		prov.Close()
		return nil, err
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
		Sandboxes: direct.New(direct.Options{Config: a.Config.Sandboxes, Defaults: a.Config.Sandbox, Store: a.Store,
			Sandboxes: a.Sandboxes(prov), Provider: prov, Logger: a.Logger}),
		Store:         a.Store,
		Executor:      engine.NewStepFunctions(a.AWS, os.Getenv(app.EnvStateMachineARN)),
		AgentExecutor: engine.NewStepFunctions(a.AWS, os.Getenv(app.EnvAgentStateMachineARN)),
		Agents:        a.Config.Agents,
		Provider:      prov,
		Deployment:    a.Config.Provider.Deployment,
		Sessions:      svc,
		Docs:          docs,
		Tools:         tools.SettingsFrom(a.Config),
		Auth:          auth,
		Quotas:        quota.New(a.Store, &a.Config.Quotas),
		Pricing:       &a.Config.Pricing,
		Logger:        a.Logger,
		// The body limits of [server] hold behind API Gateway too.
		Server: a.Config.Server,
	})
	return &function{handle: api.LambdaHandler(h), provider: prov}, nil
}
