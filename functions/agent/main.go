// Command agent is every phase of the agent-run state machine as one
// Lambda (the input names the phase), and its cleanup for executions that
// ended where no Catch ran; the local engine runs the same handler
// in-process.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/sandstep/sandstep/internal/service/agents"
	"github.com/sandstep/sandstep/internal/service/app"
	"github.com/sandstep/sandstep/internal/service/direct"
	"github.com/sandstep/sandstep/internal/service/providerhost"
)

func main() {
	a, err := app.FromLambdaEnv()
	if err != nil {
		slog.Error("init", "err", err)
		os.Exit(1)
	}
	prov := providerhost.Lambda(a.Config, a.Logger)
	runs := agents.New(agents.Options{
		Store: a.Store,
		Direct: direct.New(direct.Options{Config: a.Config.Sandboxes, Defaults: a.Config.Sandbox, Store: a.Store,
			Sandboxes: a.Sandboxes(prov), Provider: prov, Logger: a.Logger}),
		Agents:  a.Config.Agents,
		Pricing: a.Config.Pricing,
		Secret:  providerhost.LambdaSecrets(context.Background(), a.Config),
		Logger:  a.Logger,
	})
	lambda.Start(runs.Handle)
}
