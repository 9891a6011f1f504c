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
	"github.com/sandstep/sandstep/internal/testkit/apitest"
	"github.com/sandstep/sandstep/internal/testkit/testbin"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
)

// pluginDir holds the local provider plugin, built once for the tests.
var pluginDir string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sandstep-api-lambda-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if pluginDir, err = testbin.Build(dir, testbin.LocalPlugin, testbin.SandyPlugin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return testddb.RunTests(m)
}

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

// lambdaEnv is the ApiFunction assembled as Lambda assembles it, from its
// environment alone: the deployed config.toml (one issued token, plus
// edits), the provider plugin from SANDSTEP_PLUGIN_DIR, and AWS endpoints
// from AWS_ENDPOINT_URL_*: DynamoDB Local for DynamoDB, a stand-in for Step
// Functions, and whatever extra sets.
type lambdaEnv struct {
	fn   *function
	db   *testddb.TestEnv
	sfn  *stepFunctions
	logs func() string
	ctx  context.Context
}

func newLambdaEnv(t *testing.T, edit func(cfg []byte) []byte, extra map[string]string) *lambdaEnv {
	t.Helper()
	e, err := initLambda(t, edit, extra)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// initLambda is newLambdaEnv returning the init's error: a Lambda whose
// init fails is retried by Lambda, and logs say why.
func initLambda(t *testing.T, edit func(cfg []byte) []byte, extra map[string]string) (*lambdaEnv, error) {
	t.Helper()
	db := testddb.ForTests(t)
	root, err := testbin.Root()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sum := sha256.Sum256([]byte(token))
	raw = replaceLine(t, raw, "tokens = []", fmt.Sprintf("tokens = [{tenant = \"acme\", sha256 = %q}]", hex.EncodeToString(sum[:])))
	raw = replaceLine(t, raw, `data_dir = ".sandstep"`, fmt.Sprintf("data_dir = %q", dir))
	if edit != nil {
		raw = edit(raw)
	}
	cfgPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgPath, raw, 0o600); err != nil {
		t.Fatal(err)
	}

	sfn := &stepFunctions{}
	sfnSrv := httptest.NewServer(sfn)
	t.Cleanup(sfnSrv.Close)

	// The environment template.yaml gives the function, and the one
	// variable that points it at DynamoDB Local.
	env := map[string]string{
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
		"AWS_ENDPOINT_URL_LAMBDA":             "",
		"LOG_LEVEL":                           "debug",
	}
	for k, v := range extra {
		env[k] = v
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	// The Lambda logs to stderr: keep what it writes to look for secrets.
	logs := captureStderr(t)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	fn, err := newFunction(ctx)
	if err != nil {
		return &lambdaEnv{db: db, sfn: sfn, logs: logs, ctx: ctx}, err
	}
	t.Cleanup(func() { fn.provider.Close() })
	return &lambdaEnv{fn: fn, db: db, sfn: sfn, logs: logs, ctx: ctx}, nil
}

func replaceLine(t *testing.T, raw []byte, old, new string) []byte {
	t.Helper()
	o := []byte("\n" + old + "\n")
	if !bytes.Contains(raw, o) {
		t.Fatalf("config.toml has no line %s to replace", old)
	}
	return bytes.Replace(raw, o, []byte("\n"+new+"\n"), 1)
}

// call invokes the function with an API Gateway HTTP API v2 event and
// decodes its JSON answer.
func (e *lambdaEnv) call(t *testing.T, method, path, body string, want int) map[string]any {
	t.Helper()
	res, err := e.fn.handle(e.ctx, event(method, path, body))
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if res.StatusCode != want {
		t.Fatalf("%s %s = %d, want %d: %s", method, path, res.StatusCode, want, res.Body)
	}
	// The ApiFunction's answers are the API's: checked against openapi.json.
	header := http.Header{}
	for k, v := range res.Headers {
		header.Set(k, v)
	}
	apitest.CheckResponse(t, httptest.NewRequest(method, path, nil), res.StatusCode, header, []byte(res.Body))
	var m map[string]any
	if err := json.Unmarshal([]byte(res.Body), &m); err != nil {
		t.Fatalf("%s %s: %v: %s", method, path, err, res.Body)
	}
	return m
}

// TestJobThroughTheLambdaOnDynamoDBLocal drives a job through the
// ApiFunction as Lambda runs it: assembled from its environment alone, with
// AWS_ENDPOINT_URL_DYNAMODB pointing at DynamoDB Local (and
// AWS_ENDPOINT_URL_SFN at a stand-in for Step Functions), then invoked with
// API Gateway HTTP API v2 events. The job lands in DynamoDB Local's tables.
func TestJobThroughTheLambdaOnDynamoDBLocal(t *testing.T) {
	e := newLambdaEnv(t, nil, nil)
	db, sfn, ctx := e.db, e.sfn, e.ctx
	call := func(method, path, body string, want int) map[string]any {
		t.Helper()
		return e.call(t, method, path, body, want)
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

	if out := e.logs(); strings.Contains(out, secretKey) || !strings.Contains(out, "127.0.0.1") {
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

// lambdaService stands in for the Lambda service, which cannot run here: it
// takes the asynchronous Invoke of the RunFunction (signed for "lambda",
// InvocationType Event) and keeps the events.
type lambdaService struct {
	mu      sync.Mutex
	invokes []string // function name + " " + payload
	bad     []string
}

func (l *lambdaService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	l.mu.Lock()
	defer l.mu.Unlock()
	auth := r.Header.Get("Authorization")
	name, ok := strings.CutPrefix(r.URL.Path, "/2015-03-31/functions/")
	name, ok2 := strings.CutSuffix(name, "/invocations")
	if !ok || !ok2 || r.Header.Get("X-Amz-Invocation-Type") != "Event" ||
		!strings.Contains(auth, "Credential=AKIDLAMBDATEST/") || !strings.Contains(auth, "/us-east-1/lambda/aws4_request") {
		l.bad = append(l.bad, r.URL.Path+" "+auth)
		w.WriteHeader(http.StatusForbidden)
		return
	}
	l.invokes = append(l.invokes, name+" "+string(body))
	w.WriteHeader(http.StatusAccepted)
}

// With sessions on, a run_code request to the ApiFunction is recorded in
// DynamoDB Local and handed to the RunFunction through the Lambda endpoint
// AWS_ENDPOINT_URL_LAMBDA names; the API answers 202 once sync_wait passes
// with the run still pending.
func TestSessionRunInvokesTheRunFunctionAtAWSEndpointURLLambda(t *testing.T) {
	lam := &lambdaService{}
	srv := httptest.NewServer(lam)
	t.Cleanup(srv.Close)
	e := newLambdaEnv(t, func(cfg []byte) []byte {
		i := bytes.Index(cfg, []byte("\n[sessions]\n"))
		if i < 0 {
			t.Fatal("config.toml has no [sessions]")
		}
		cfg = append(cfg[:i:i], replaceLine(t, cfg[i:], "enabled = false", "enabled = true")...)
		return replaceLine(t, cfg, `sync_wait = "25s"`, `sync_wait = "1s"`)
	}, map[string]string{
		"SANDSTEP_RUN_FUNCTION":   "sandstep-RunFunction",
		"AWS_ENDPOINT_URL_LAMBDA": srv.URL,
	})
	run := e.call(t, "POST", "/v1/sessions/s1/run", `{"language":"python","code":"6 * 7"}`, http.StatusAccepted)
	lam.mu.Lock()
	invokes, bad := lam.invokes, lam.bad
	lam.mu.Unlock()
	if len(bad) > 0 || len(invokes) != 1 {
		t.Fatalf("invokes %v, refused %v", invokes, bad)
	}
	var task struct {
		Tenant    string `json:"tenant"`
		SessionID string `json:"session_id"`
		RunID     string `json:"run_id"`
	}
	name, payload, _ := strings.Cut(invokes[0], " ")
	if err := json.Unmarshal([]byte(payload), &task); err != nil || name != "sandstep-RunFunction" ||
		task.Tenant != "acme" || task.SessionID != "s1" || task.RunID == "" || fmt.Sprint(run["run_id"]) != task.RunID {
		t.Fatalf("invoke of %s with %s (%v); run = %v", name, payload, err, run)
	}
}
