package sessions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/awsenv"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/providers"
)

// EnvRunFunction names the environment variable that holds the
// RunFunction's name (template.yaml sets it for the ApiFunction).
const EnvRunFunction = "SANDSTEP_RUN_FUNCTION"

// NewForLambda assembles the Service inside a Lambda: where
// SANDSTEP_RUN_FUNCTION is set (the API), runs launched on the RunFunction
// through env's Lambda endpoint (AWS_ENDPOINT_URL_LAMBDA when set).
func NewForLambda(cfg *config.Config, st *store.Store, env awsenv.Env, p providers.Provider, log *slog.Logger) (*Service, error) {
	opts := Options{Config: cfg, Store: st, Provider: p, Logger: log}
	if fn := os.Getenv(EnvRunFunction); fn != "" {
		opts.Launcher = &LambdaLauncher{Function: fn, Region: env.Region, Credentials: env.Credentials, Endpoint: env.Endpoint(awsenv.Lambda)}
	}
	return New(opts)
}

// LambdaLauncher starts runs on the RunFunction with an asynchronous
// Lambda Invoke (InvocationType Event): Lambda queues the event and
// answers at once, and the RunFunction, with up to 15 minutes, executes
// the run and records its result for the API to poll. The call goes
// through awsenv's signed JSON client rather than the SDK's Lambda client,
// which would add a module and several megabytes to the API's bootstrap
// for one request.
type LambdaLauncher struct {
	// Function is the RunFunction's name or ARN.
	Function    string
	Region      string
	Credentials aws.CredentialsProvider
	// Endpoint overrides https://lambda.<region>.amazonaws.com.
	Endpoint string
	// Client defaults to one with a 10 s timeout.
	Client *http.Client
}

// Launch queues the task.
func (l *LambdaLauncher) Launch(ctx context.Context, t Task) error {
	if l.Function == "" || l.Region == "" || l.Credentials == nil {
		return errors.New("lambda launcher: Function, Region and Credentials are required")
	}
	endpoint := l.Endpoint
	if endpoint == "" {
		endpoint = awsenv.Env{Region: l.Region}.Endpoint(awsenv.Lambda)
	}
	c := &awsenv.Client{Service: awsenv.Lambda, Region: l.Region, Credentials: l.Credentials, Endpoint: endpoint, HTTP: l.Client}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Amz-Invocation-Type", "Event")
	err := c.Do(ctx, awsenv.Request{
		Path:   "/2015-03-31/functions/" + url.PathEscape(l.Function) + "/invocations",
		Header: h, Body: t, OK: http.StatusAccepted,
	}, nil)
	if err != nil {
		return fmt.Errorf("invoke %s: %w", l.Function, err)
	}
	return nil
}
