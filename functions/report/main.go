// Command report is the Report phase of the deep-research state machine as a
// Lambda; the local engine runs the same handler in-process.
package main

import (
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/sandstep/sandstep/internal/service/app"
)

func main() {
	a, err := app.FromLambdaEnv()
	if err != nil {
		slog.Error("init", "err", err)
		os.Exit(1)
	}
	lambda.Start(a.Phases.Report)
}
