package api_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/api"
	"github.com/sandstep/sandstep/internal/service/ids"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/apitest"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
	"github.com/sandstep/sandstep/internal/testkit/testlog"
	"github.com/sandstep/sandstep/providers"
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		os.Exit(runAPIChild())
	}
	os.Exit(testddb.RunTests(m))
}

// Tokens of the test tenants. The dev token is passed as the one the serve
// command would generate.
const (
	tokenAcme   = "acme-7f1c2e9b5d4a4c3e8b1f0a6d2c9e7b31"
	tokenGlobex = "globex-0d8b3f6a1e2c4b9d7a5f3c1e0b8d6a42"
	tokenDev    = "dev-3c5e7a9b1d2f4e6a8c0b2d4f6a8c0e13"
)

// acmeKey and devKey are the store keys of the tenants' jobs.
func acmeKey(id string) string { return ids.JobKey("acme", id) }
func devKey(id string) string  { return ids.JobKey("dev", id) }

func hashOf(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// recordingExecutor stands in for Step Functions and the local engine,
// which are wired elsewhere: it records what the API asks of it and starts
// an execution once per job, as both of them do by execution name.
type recordingExecutor struct {
	mu      sync.Mutex
	fail    error
	starts  []startCall
	cancels [][2]string
	started map[string]string
}

type startCall struct {
	jobID string
	input string
}

func (e *recordingExecutor) Start(_ context.Context, jobID string, input []byte) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.starts = append(e.starts, startCall{jobID, string(input)})
	if e.fail != nil {
		return "", e.fail
	}
	if e.started == nil {
		e.started = map[string]string{}
	}
	if id, ok := e.started[jobID]; ok {
		return id, nil
	}
	id := "exec:" + jobID
	e.started[jobID] = id
	return id, nil
}

func (e *recordingExecutor) Cancel(_ context.Context, jobID, executionID string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cancels = append(e.cancels, [2]string{jobID, executionID})
	return nil
}

func (e *recordingExecutor) setFail(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fail = err
}

func (e *recordingExecutor) startCalls() []startCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]startCall(nil), e.starts...)
}

func (e *recordingExecutor) cancelCalls() [][2]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([][2]string(nil), e.cancels...)
}

type staticProvider providers.Info

func (p staticProvider) Info(context.Context) (providers.Info, error) { return providers.Info(p), nil }

type testEnv struct {
	t       testing.TB
	store   *store.Store
	exec    *recordingExecutor
	handler http.Handler
	srv     *httptest.Server
	logs    *testlog.Buffer
}

// newEnv serves the API on 127.0.0.1 over tables of the test's own.
func newEnv(t testing.TB, adjust ...func(*api.Options)) *testEnv {
	t.Helper()
	dbenv := testddb.ForTests(t)
	return newEnvOn(t, store.NewLocal(dbenv.Endpoint, dbenv.Prefix), adjust...)
}

func newEnvOn(t testing.TB, st *store.Store, adjust ...func(*api.Options)) *testEnv {
	t.Helper()
	auth, err := api.NewAuthenticator(config.AuthConfig{
		DevTokenEnv: "SANDSTEP_DEV_TOKEN",
		Tokens: []config.AuthToken{
			{Tenant: "acme", SHA256: hashOf(tokenAcme)},
			{Tenant: "globex", SHA256: hashOf(tokenGlobex)},
		},
	}, func(string) string { return "" }, tokenDev)
	if err != nil {
		t.Fatal(err)
	}
	e := &testEnv{t: t, store: st, exec: &recordingExecutor{}, logs: &testlog.Buffer{}}
	opts := api.Options{
		Store:    st,
		Executor: e.exec,
		Provider: staticProvider{Name: "local", Version: "1.2.3", APIVersion: 1, Capabilities: providers.Capabilities{
			Volumes: true, Snapshots: true, ExecStreaming: true, FileAPI: true, HostScopedSecrets: true,
			NetworkModes: []providers.NetworkMode{providers.NetworkNone, providers.NetworkAll},
			MaxLifetime:  2 * time.Hour,
			Limits:       providers.Limits{Cgroups: "v1", Volumes: "ext4-image", Enforced: []string{providers.LimitMemory, providers.LimitVolumeCapacity}},
		}},
		Deployment: "stack-a",
		Auth:       auth,
		Logger:     slog.New(slog.NewJSONHandler(e.logs, nil)),
	}
	for _, f := range adjust {
		f(&opts)
	}
	e.handler = api.New(opts)
	// Served by the server `sandstep serve` runs, with its timeouts.
	sc := opts.Server
	if sc == (config.ServerConfig{}) {
		sc = config.DefaultServer()
	}
	// Every answer a test gets is checked against openapi.json.
	validated := apitest.Validate(t, e.handler)
	e.srv = httptest.NewUnstartedServer(validated)
	e.srv.Config = api.NewServer(validated, sc, opts.Logger)
	e.srv.Start()
	t.Cleanup(e.srv.Close)
	return e
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// response is a finished HTTP exchange.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("response %d is not a JSON object: %v\n%s", r.status, err, r.body)
	}
	return m
}

// apiError returns the error object of an error response.
func (r response) apiError(t testing.TB) map[string]any {
	t.Helper()
	e, ok := r.json(t)["error"].(map[string]any)
	if !ok {
		t.Fatalf("response %d has no error object: %s", r.status, r.body)
	}
	return e
}

// do sends a request with token ("" = none) and reads the whole answer.
func (e *testEnv) do(method, path, token string, body io.Reader, headers ...string) response {
	e.t.Helper()
	req, err := http.NewRequestWithContext(ctxFor(e.t), method, e.srv.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return response{status: res.StatusCode, header: res.Header, body: b}
}

func (e *testEnv) get(path, token string, headers ...string) response {
	e.t.Helper()
	return e.do(http.MethodGet, path, token, nil, headers...)
}

func (e *testEnv) post(path, token, body string) response {
	e.t.Helper()
	return e.do(http.MethodPost, path, token, strings.NewReader(body), "Content-Type", "application/json")
}

// submit creates a job of the token's tenant with the given id.
func (e *testEnv) submit(token, id string) map[string]any {
	e.t.Helper()
	res := e.post("/v1/jobs", token, fmt.Sprintf(`{"query":"solar panels","job_id":%q}`, id))
	if res.status != http.StatusAccepted {
		e.t.Fatalf("submit %s: %d %s", id, res.status, res.body)
	}
	return res.json(e.t)
}

func wantStatus(t testing.TB, r response, status int) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
}

// wantError asserts an error response: status, code and field ("" = none).
func wantError(t testing.TB, r response, status int, code, field string) map[string]any {
	t.Helper()
	wantStatus(t, r, status)
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("error Content-Type %q", ct)
	}
	e := r.apiError(t)
	gotField, _ := e["field"].(string)
	if e["code"] != code || gotField != field {
		t.Fatalf("error = %v, want code %q field %q", e, code, field)
	}
	if msg, _ := e["message"].(string); msg == "" {
		t.Fatalf("error without a message: %v", e)
	}
	return e
}

// closedURL returns the URL of a port on 127.0.0.1 that nothing listens on.
func closedURL(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
