package sessions_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/sessions"
)

// fakeLambda accepts asynchronous invokes of the RunFunction the way
// Lambda does (202, then the function runs on its own) and runs them with
// a Service of its own, as the RunFunction would.
type fakeLambda struct {
	t      *testing.T
	runner *sessions.Service
	mu     sync.Mutex
	fail   bool
	wg     sync.WaitGroup
}

func (f *fakeLambda) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	auth := r.Header.Get("Authorization")
	if r.Method != http.MethodPost || r.URL.Path != "/2015-03-31/functions/sandstep-RunFunction/invocations" ||
		r.Header.Get("X-Amz-Invocation-Type") != "Event" || r.Header.Get("X-Amz-Date") == "" ||
		!strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential=AKIDTEST/") || !strings.Contains(auth, "/us-east-1/lambda/aws4_request") {
		f.t.Errorf("unexpected invoke: %s %s %v", r.Method, r.URL.Path, r.Header)
		http.Error(w, `{"Type":"User","message":"bad request"}`, http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	fail := f.fail
	f.mu.Unlock()
	if fail {
		http.Error(w, `{"Type":"User","message":"AccessDeniedException"}`, http.StatusForbidden)
		return
	}
	var task sessions.Task
	if err := json.NewDecoder(r.Body).Decode(&task); err != nil {
		f.t.Errorf("invoke body: %v", err)
		return
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		if err := f.runner.ExecuteStored(context.Background(), task); err != nil {
			f.t.Errorf("RunFunction: %v", err)
		}
	}()
	w.WriteHeader(http.StatusAccepted)
}

// The AWS path: the API records the run, invokes the RunFunction
// asynchronously and polls the record; a run past sync_wait is 202 and
// its record has the result once the RunFunction ends.
func TestRunsLaunchedOnTheRunFunction(t *testing.T) {
	e := newEnv(t, envConfig{})
	log := slog.New(slog.NewJSONHandler(e.logs, nil))
	runner, err := sessions.New(sessions.Options{Config: e.cfg, Store: e.st, DB: e.db.Client, Provider: e.stack.Provider, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	lambda := &fakeLambda{t: t, runner: runner}
	srv := httptest.NewServer(lambda)
	defer srv.Close()
	cfg := *e.cfg
	cfg.Sessions.SyncWait = config.Duration(time.Second)
	api, err := sessions.New(sessions.Options{
		Config: &cfg, Store: e.st, DB: e.db.Client, Provider: e.stack.Provider, Logger: log,
		Launcher: &sessions.LambdaLauncher{
			Function: "sandstep-RunFunction", Region: "us-east-1", Endpoint: srv.URL,
			Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", ""),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		lambda.wg.Wait()
		_ = runner.Shutdown(context.Background())
	})
	ctx := ctxFor(t)
	// The session's sandbox starts first (the tools image with Deno takes
	// its time on a first start), so that the quick run is quick.
	wantOK(t, e.run(tokenAcme, "aws", "shell", "true"))

	quick, err := api.Run(ctx, "acme", "aws", sessions.RunRequest{Language: "python", Code: "open('/workspace/f', 'w').write('x')\n6 * 7"})
	if err != nil {
		t.Fatal(err)
	}
	if quick.Status != sessions.RunSucceeded || string(quick.Result.Result) != "42" {
		t.Fatalf("quick run = %+v %+v", quick, quick.Result)
	}

	slow, err := api.Run(ctx, "acme", "aws", sessions.RunRequest{Language: "shell", Code: "sleep 2; cat /workspace/f"})
	if err != nil {
		t.Fatal(err)
	}
	if slow.Status != sessions.RunRunning || slow.Result != nil {
		t.Fatalf("slow run = %+v, want it still running after sync_wait", slow)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		got, err := api.GetRun(ctx, "acme", "aws", slow.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != sessions.RunRunning {
			if got.Status != sessions.RunSucceeded || got.Result.Stdout != "x" || got.Code != "" {
				t.Fatalf("slow run ended as %+v %+v", got, got.Result)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow run did not end")
		}
		time.Sleep(50 * time.Millisecond)
	}

	// An invoke Lambda refuses is an error now, and the run's record
	// says it failed.
	lambda.mu.Lock()
	lambda.fail = true
	lambda.mu.Unlock()
	_, err = api.Run(ctx, "acme", "aws", sessions.RunRequest{Language: "shell", Code: "true"})
	if sessions.KindOf(err) != sessions.KindUnavailable || !strings.Contains(err.Error(), "AccessDeniedException") {
		t.Fatalf("refused invoke: %v", err)
	}
}
