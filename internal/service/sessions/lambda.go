package sessions

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/providers"
)

// EnvRunFunction names the environment variable that holds the
// RunFunction's name (template.yaml sets it for the ApiFunction).
const EnvRunFunction = "SANDSTEP_RUN_FUNCTION"

// NewForLambda assembles the Service inside a Lambda: where
// SANDSTEP_RUN_FUNCTION is set (the API), runs are launched on the
// RunFunction with the credentials of awsCfg.
func NewForLambda(cfg *config.Config, st *store.Store, awsCfg aws.Config, p providers.Provider, log *slog.Logger) (*Service, error) {
	opts := Options{Config: cfg, Store: st, Provider: p, Logger: log}
	if fn := os.Getenv(EnvRunFunction); fn != "" {
		opts.Launcher = &LambdaLauncher{Function: fn, Region: awsCfg.Region, Credentials: awsCfg.Credentials}
	}
	return New(opts)
}

// LambdaLauncher starts runs on the RunFunction with an asynchronous
// Lambda Invoke (InvocationType Event): Lambda queues the event and
// answers at once, and the RunFunction, with up to 15 minutes, executes
// the run and records its result for the API to poll. The call is signed
// here with the SDK's SigV4 signer rather than through the Lambda client,
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
	body, err := json.Marshal(t)
	if err != nil {
		return err
	}
	endpoint := l.Endpoint
	if endpoint == "" {
		endpoint = "https://lambda." + l.Region + ".amazonaws.com"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost,
		strings.TrimRight(endpoint, "/")+"/2015-03-31/functions/"+url.PathEscape(l.Function)+"/invocations", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Amz-Invocation-Type", "Event")
	creds, err := l.Credentials.Retrieve(ctx)
	if err != nil {
		return fmt.Errorf("lambda launcher: credentials: %w", err)
	}
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "lambda", l.Region, time.Now()); err != nil {
		return fmt.Errorf("lambda launcher: sign: %w", err)
	}
	client := l.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	res, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("invoke %s: %w", l.Function, err)
	}
	defer res.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
	if res.StatusCode != http.StatusAccepted {
		return fmt.Errorf("invoke %s: %s: %s", l.Function, res.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}
