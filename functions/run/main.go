// Command run executes one run_code run as a Lambda. The API function
// records the run with its code and invokes this one asynchronously, so a
// run may outlast API Gateway's 30 s limit; the result goes to the run's
// record, where GET /v1/sessions/{sid}/runs/{run} finds it.
package main

import (
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/sandstep/sandstep/internal/service/app"
	"github.com/sandstep/sandstep/internal/service/providerhost"
	"github.com/sandstep/sandstep/internal/service/sessions"
)

func main() {
	a, err := app.FromLambdaEnv()
	if err != nil {
		slog.Error("init", "err", err)
		os.Exit(1)
	}
	svc, err := sessions.NewForLambda(a.Config, a.Store, a.AWS, providerhost.Lambda(a.Config, a.Logger), a.Logger)
	if err != nil {
		slog.Error("init", "err", err)
		os.Exit(1)
	}
	lambda.Start(svc.ExecuteStored)
}
