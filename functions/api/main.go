// Command api is sandstep's HTTP API as a Lambda behind an API Gateway HTTP
// API; `sandstep serve` serves the same handler with net/http.
package main

import (
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/sandstep/sandstep/internal/service/api"
	"github.com/sandstep/sandstep/internal/service/app"
	"github.com/sandstep/sandstep/internal/service/engine"
	"github.com/sandstep/sandstep/internal/service/providerhost"
	"github.com/sandstep/sandstep/internal/service/sessions"
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
	svc, err := sessions.NewForLambda(a.Config, a.Store, a.AWS, prov, a.Logger)
	if err != nil {
		slog.Error("init", "err", err)
		os.Exit(1)
	}
	h := api.New(api.Options{
		Store:    a.Store,
		Executor: engine.NewStepFunctions(a.AWS, os.Getenv(app.EnvStateMachineARN)),
		Provider: prov,
		Sessions: svc,
		Auth:     auth,
		Logger:   a.Logger,
		// The body limits of [server] hold behind API Gateway too.
		Server: a.Config.Server,
	})
	lambda.Start(api.LambdaHandler(h))
}
