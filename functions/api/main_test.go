package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/sandstep/sandstep/internal/service/ids"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/testbin"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
)

func TestMain(m *testing.M) { os.Exit(testddb.RunTests(m)) }

const (
	token   = "acme-5b7d9f1a3c5e7a9b1d3f5a7c9e1b3d5f"
	machine = "arn:aws:states:us-east-1:000000000000:stateMachine:sandstep-research"
	// secretKey must never reach a log line.
	secretKey = "wJalrXUtnFEMI-not-a-real-key-EXAMPLEKEY"
)

// stepFunctions stands in for AWS Step Functions, which cannot run here:
// it takes StartExecution as the service does (signed, JSON 1.0) and keeps
// the inputs, so the test sees what the API asked of it.
type stepFunctions struct {
	mu     sync.Mutex
	inputs map[string]string // execution name -> input
	bad    []string
}

func (s *stepFunctions) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var in map[string]string
	_ = json.NewDecoder(r.Body).Decode(&in)
	s.mu.Lock()
	defer s.mu.Unlock()
	auth := r.Header.Get("Authorization")
	if r.Header.Get("X-Amz-Target") != "AWSStepFunctions.StartExecution" || in["stateMachineArn"] != machine ||
		!strings.Contains(auth, "Credential=AKIDLAMBDATEST/") || !strings.Contains(auth, "/us-east-1/states/aws4_request") {
		s.bad = append(s.bad, fmt.Sprintf("%s %v %q", r.Header.Get("X-Amz-Target"), in, auth))
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if s.inputs == nil {
		s.inputs = map[string]string{}
	}
	s.inputs[in["name"]] = in["input"]
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	_ = json.NewEncoder(w).Encode(map[string]any{"executionArn": strings.Replace(machine, ":stateMachine:", ":execution:", 1) + ":" + in["name"], "startDate": 1})
}

func event(method, path, body string) events.APIGatewayV2HTTPRequest {
	ev := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: "$default", RawPath: path,
		Headers: map[string]string{"host": "api.example.com", "authorization": "Bearer " + token},
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			Stage: "$default", DomainName: "api.example.com", RequestID: "req-" + method,
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: method, Path: path, Protocol: "HTTP/1.1", SourceIP: "203.0.113.9"},
		},
	}
	if body != "" {
		ev.Headers["content-type"] = "application/json"
		ev.Body = body
	}
	return ev
}

// TestJobThroughTheLambdaOnDynamoDBLocal drives a job through the
// ApiFunction as Lambda runs it: assembled from its environment alone, with
// AWS_ENDPOINT_URL_DYNAMODB pointing at DynamoDB Local (and
// AWS_ENDPOINT_URL_SFN at a stand-in for Step Functions), then invoked with
// API Gateway HTTP API v2 events. The job lands in DynamoDB Local's tables.
func TestJobThroughTheLambdaOnDynamoDBLocal(t *testing.T) {
	db := testddb.ForTests(t)
	pluginDir, err := testbin.Build(t.TempDir(), testbin.LocalPlugin)
	if err != nil {
		t.Fatal(err)
	}
	// The deployed config.toml with one issued token.
	root, err := testbin.Root()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(token))
	tokens := fmt.Sprintf("tokens = [{tenant = \"acme\", sha256 = %q}]", hex.EncodeToString(sum[:]))
	if !bytes.Contains(raw, []byte("\ntokens = []\n")) {
		t.Fatal("config.toml has no `tokens = []` line to replace")
	}
	raw = bytes.Replace(raw, []byte("\ntokens = []\n"), []byte("\n"+tokens+"\n"), 1)
	dir := t.TempDir()
	if !bytes.Contains(raw, []byte("\ndata_dir = \".sandstep\"\n")) {
		t.Fatal("config.toml has no `data_dir = \".sandstep\"` line to replace")
	}
	raw = bytes.Replace(raw, []byte("\ndata_dir = \".sandstep\"\n"), []byte(fmt.Sprintf("\ndata_dir = %q\n", dir)), 1)
	cfgPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgPath, raw, 0o600); err != nil {
		t.Fatal(err)
	}

	sfn := &stepFunctions{}
	sfnSrv := httptest.NewServer(sfn)
	t.Cleanup(sfnSrv.Close)

	// The environment template.yaml gives the function, and the one
	// variable that points it at DynamoDB Local.
	for k, v := range map[string]string{
		"SANDSTEP_CONFIG":                     cfgPath,
		"SANDSTEP_TABLE_PREFIX":               db.Prefix,
		"SANDSTEP_PLUGIN_DIR":                 pluginDir,
		"SANDSTEP_STATE_MACHINE_ARN":          machine,
		"SANDSTEP_RUN_FUNCTION":               "",
		"SANDSTEP_DEV_TOKEN":                  "",
		"AWS_REGION":                          "us-east-1",
		"AWS_DEFAULT_REGION":                  "",
		"AWS_ACCESS_KEY_ID":                   "AKIDLAMBDATEST",
		"AWS_SECRET_ACCESS_KEY":               secretKey,
		"AWS_SESSION_TOKEN":                   "",
		"AWS_ENDPOINT_URL":                    "",
		"AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "",
		"AWS_ENDPOINT_URL_DYNAMODB":           db.Endpoint,
		"AWS_ENDPOINT_URL_SFN":                sfnSrv.URL,
		"LOG_LEVEL":                           "debug",
	} {
		t.Setenv(k, v)
	}
	// The Lambda logs to stderr: keep what it writes to look for secrets.
	logs := captureStderr(t)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fn, err := newFunction(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fn.provider.Close() })

	call := func(method, path, body string, want int) map[string]any {
		t.Helper()
		res, err := fn.handle(ctx, event(method, path, body))
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		if res.StatusCode != want {
			t.Fatalf("%s %s = %d, want %d: %s", method, path, res.StatusCode, want, res.Body)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(res.Body), &m); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, res.Body)
		}
		return m
	}

	sub := call("POST", "/v1/jobs", `{"query":"heat pump efficiency in cold climates","mode":"light","job_id":"lambda-1"}`, http.StatusAccepted)
	if sub["job_id"] != "lambda-1" {
		t.Fatalf("submit = %v", sub)
	}
	key := ids.JobKey("acme", "lambda-1")
	sfn.mu.Lock()
	input, bad := sfn.inputs[key], sfn.bad
	sfn.mu.Unlock()
	if len(bad) > 0 || !strings.Contains(input, key) {
		t.Fatalf("Step Functions got input %q for %s; refused %v", input, key, bad)
	}

	// The record is in DynamoDB Local's table, read here without the API.
	st := store.NewLocal(db.Endpoint, db.Prefix)
	job, err := st.GetJob(ctx, key)
	if err != nil {
		t.Fatalf("the job is not in DynamoDB Local: %v", err)
	}
	var req store.JobRequest
	if err := json.Unmarshal(job.Request, &req); err != nil || req.Query != "heat pump efficiency in cold climates" || req.Mode != "light" {
		t.Fatalf("stored request %s (%v)", job.Request, err)
	}
	if job.ExecutionID == "" || !strings.HasSuffix(job.ExecutionID, ":"+key) {
		t.Fatalf("execution id = %q", job.ExecutionID)
	}

	// A phase moves the job on (as the Discover Lambda would); the API
	// reads it back through the same endpoint.
	phase := "discover"
	if _, err := st.UpdateJob(ctx, key, store.JobUpdate{IfStatus: []store.Status{store.StatusQueued}, Status: store.StatusRunning, Phase: &phase}); err != nil {
		t.Fatal(err)
	}
	if got := call("GET", "/v1/jobs/lambda-1", "", http.StatusOK); got["status"] != "running" {
		t.Fatalf("status = %v", got)
	}
	call("GET", "/v1/jobs/lambda-1/events", "", http.StatusOK)
	call("POST", "/v1/jobs/lambda-1/cancel", "", http.StatusAccepted)
	if job, err = st.GetJob(ctx, key); err != nil || !job.CancelRequested {
		t.Fatalf("after cancel: %+v, %v", job, err)
	}

	if out := logs(); strings.Contains(out, secretKey) || !strings.Contains(out, "127.0.0.1") {
		t.Fatalf("the Lambda's log leaks the secret key or does not name the endpoint:\n%s", out)
	}
}

// captureStderr redirects os.Stderr (where the Lambda's logger writes)
// into a pipe until the test ends; the returned function reads what came.
func captureStderr(t *testing.T) func() string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	orig := os.Stderr
	os.Stderr = w
	var buf bytes.Buffer
	done := make(chan struct{})
	go func() { _, _ = io.Copy(&buf, r); close(done) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			os.Stderr = orig
			w.Close()
			<-done
			r.Close()
		})
	}
	t.Cleanup(stop)
	return func() string { stop(); return buf.String() }
}
