// Command cleanup is the Cleanup phase of the deep-research state machine as a
// Lambda; the local engine runs the same handler in-process.
package main

import (
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/sandstep/sandstep/internal/service/app"
	"github.com/sandstep/sandstep/internal/service/providerhost"
)

func main() {
	a, err := app.FromLambdaEnv()
	if err != nil {
		slog.Error("init", "err", err)
		os.Exit(1)
	}
	a.UseProvider(providerhost.Lambda(a.Config, a.Logger))
	lambda.Start(a.Phases.Cleanup)
}
