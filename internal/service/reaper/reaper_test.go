package reaper_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/awsenv"
	"github.com/sandstep/sandstep/internal/service/engine"
	"github.com/sandstep/sandstep/internal/service/providerhost"
	"github.com/sandstep/sandstep/internal/service/reaper"
	"github.com/sandstep/sandstep/internal/service/sandboxes"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/testbin"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
	"github.com/sandstep/sandstep/providers"
)

var pluginDir string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sandstep-reaper-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if pluginDir, err = testbin.Build(dir, testbin.LocalPlugin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return testddb.RunTests(m)
}

type env struct {
	db   *testddb.TestEnv
	st   *store.Store
	prov providers.Provider
	log  *slog.Logger
	r    *reaper.Reaper
}

// newEnv gives a test the real local provider plugin and its own tables.
func newEnv(t *testing.T) *env {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("bwrap is missing (Debian package bubblewrap)")
		}
		t.Skip("bwrap is missing (Debian package bubblewrap)")
	}
	db := testddb.ForTests(t)
	cfg, err := config.Parse([]byte(fmt.Sprintf("[server]\ndata_dir = %q\n[provider]\nplugin_dir = %q\n", t.TempDir(), pluginDir)), "config.toml", ".")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := providerhost.Open(context.Background(), cfg, "", log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	st := store.New(db.Client, db.Prefix)
	return &env{db: db, st: st, prov: p, log: log, r: &reaper.Reaper{Store: st, Sandboxes: managerOf(st, p, log), Logger: log}}
}

func managerOf(st *store.Store, p providers.Provider, log *slog.Logger) *sandboxes.Manager {
	return sandboxes.New(sandboxes.Options{Store: st, Provider: p, ProviderName: "local", Deployment: "test", Logger: log})
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

var ours = sandboxes.Labels("test")

// create starts a sandbox; with owner set it is recorded in the ledger
// first, as sandstep does.
func (e *env) create(t *testing.T, name, owner string, labels map[string]string, deadline time.Time) providers.Sandbox {
	t.Helper()
	ctx := ctxFor(t)
	if owner != "" {
		if _, err := e.st.LedgerBegin(ctx, store.LedgerEntry{Name: name, Provider: "local", Owner: owner, Deadline: deadline}); err != nil {
			t.Fatal(err)
		}
	}
	sb, err := e.prov.Create(ctx, providers.CreateSpec{Name: name, Labels: labels, Lifetime: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.prov.Terminate(context.Background(), sb.ID) })
	if owner != "" {
		if _, err := e.st.LedgerRunning(ctx, name, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	return sb
}

func (e *env) alive(t *testing.T, id string) bool {
	t.Helper()
	sb, err := e.prov.Get(ctxFor(t), id)
	if err != nil && !providers.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil && sb.State == providers.StateRunning
}

func (e *env) ledgerState(t *testing.T, name string) store.LedgerState {
	t.Helper()
	en, err := e.st.LedgerGet(ctxFor(t), name)
	if err != nil {
		t.Fatal(err)
	}
	return en.State
}

// A pass terminates what nothing needs and leaves the rest: a sandbox made
// behind the ledger's back, one past its deadline, one whose job ended;
// an entry whose sandbox vanished is closed.
func TestPassReconcilesLedgerAndProvider(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	now := time.Now()
	far := now.Add(time.Hour)

	orphan := e.create(t, "behind-the-back", "", ours, time.Time{})
	foreign := e.create(t, "not-ours", "", map[string]string{providers.LabelOwner: "someone-else"}, time.Time{})

	if _, _, err := e.st.CreateJob(ctx, store.NewJob{ID: "job-done", Tenant: "acme", Request: []byte(`{}`), RequestHash: "h1"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.st.CreateJob(ctx, store.NewJob{ID: "job-live", Tenant: "acme", Request: []byte(`{}`), RequestHash: "h2"}); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		from []store.Status
		to   store.Status
	}{{[]store.Status{store.StatusQueued}, store.StatusRunning}, {[]store.Status{store.StatusRunning}, store.StatusSucceeded}} {
		if _, err := e.st.SetStatus(ctx, "job-done", step.from, step.to); err != nil {
			t.Fatal(err)
		}
	}
	ended := e.create(t, "job-done", "job:job-done", ours, far)
	live := e.create(t, "job-live", "job:job-live", ours, far)
	late := e.create(t, "late", "job:job-live", ours, now.Add(time.Minute))
	vanished := e.create(t, "vanished", "job:job-live", ours, far)
	if err := e.prov.Terminate(ctx, vanished.ID); err != nil {
		t.Fatal(err)
	}
	// Recorded before a create that never happened.
	if _, err := e.st.LedgerBegin(ctx, store.LedgerEntry{Name: "never", Provider: "local", Owner: "job:job-live", Deadline: far}); err != nil {
		t.Fatal(err)
	}

	e.r.Now = func() time.Time { return now.Add(5 * time.Minute) }
	c, err := e.r.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.Orphans != 1 || c.LedgerReaped != 2 || c.LedgerGone != 1 || c.Errors != 0 {
		t.Fatalf("counts = %+v, want 1 orphan, 2 reaped (deadline, job ended), 1 gone", c)
	}
	for _, sb := range []providers.Sandbox{orphan, ended, late} {
		if e.alive(t, sb.ID) {
			t.Errorf("%s (%s) is still running", sb.Name, sb.ID)
		}
	}
	for _, sb := range []providers.Sandbox{foreign, live} {
		if !e.alive(t, sb.ID) {
			t.Errorf("%s (%s) was terminated", sb.Name, sb.ID)
		}
	}
	for name, want := range map[string]store.LedgerState{
		"job-done": store.LedgerTerminated, "late": store.LedgerTerminated, "vanished": store.LedgerTerminated,
		"job-live": store.LedgerRunning, "never": store.LedgerCreating,
	} {
		if got := e.ledgerState(t, name); got != want {
			t.Errorf("ledger %s = %s, want %s", name, got, want)
		}
	}

	// The create that never happened is given up after the grace period;
	// a second pass changes nothing else.
	e.r.Now = func() time.Time { return now.Add(15 * time.Minute) }
	if c, err = e.r.Pass(ctx); err != nil || c.LedgerReaped != 1 || c.Total() != 1 {
		t.Fatalf("second pass: %+v %v, want only the unconfirmed create reaped", c, err)
	}
	if got := e.ledgerState(t, "never"); got != store.LedgerTerminated {
		t.Fatalf("ledger never = %s", got)
	}
}

// noList is the local provider as one that cannot list sandboxes.
type noList struct{ providers.Provider }

func (p noList) Info(ctx context.Context) (providers.Info, error) {
	info, err := p.Provider.Info(ctx)
	info.Capabilities.ListByLabels = false
	return info, err
}

func (p noList) List(context.Context, providers.ListFilter) ([]providers.Sandbox, error) {
	return nil, providers.Errorf(providers.Unsupported, "list", "this provider cannot list")
}

// Without listing, the ledger is the truth: each live entry is looked up,
// and one whose sandbox is gone is closed.
func TestPassWithoutListingAsksPerEntry(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	far := time.Now().Add(time.Hour)
	if _, _, err := e.st.CreateJob(ctx, store.NewJob{ID: "j", Tenant: "acme", Request: []byte(`{}`), RequestHash: "h"}); err != nil {
		t.Fatal(err)
	}
	kept := e.create(t, "kept", "job:j", ours, far)
	gone := e.create(t, "gone", "job:j", ours, far)
	if err := e.prov.Terminate(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	e.r.Sandboxes = managerOf(e.st, noList{e.prov}, e.log)
	c, err := e.r.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.LedgerGone != 1 || c.Total() != 1 {
		t.Fatalf("counts = %+v", c)
	}
	if e.ledgerState(t, "gone") != store.LedgerTerminated || e.ledgerState(t, "kept") != store.LedgerRunning || !e.alive(t, kept.ID) {
		t.Fatal("the pass closed the wrong entry")
	}
}

// stopRecorder lists given executions and records stops.
type stopRecorder struct {
	mu      sync.Mutex
	running []string
	stopped []string
}

func (s *stopRecorder) Running(context.Context) ([]string, error) { return s.running, nil }

func (s *stopRecorder) Stop(_ context.Context, jobID, _ string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = append(s.stopped, jobID)
	return nil
}

func TestPassStopsCancelledExecutions(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	for _, id := range []string{"cancelled", "running"} {
		if _, _, err := e.st.CreateJob(ctx, store.NewJob{ID: id, Tenant: "acme", Request: []byte(`{}`), RequestHash: id}); err != nil {
			t.Fatal(err)
		}
	}
	job, err := e.st.RequestCancel(ctx, "cancelled")
	if err != nil {
		t.Fatal(err)
	}
	rec := &stopRecorder{running: []string{"cancelled", "running", "unknown"}}
	e.r.Executions, e.r.CancelGrace = rec, 30*time.Second

	e.r.Now = func() time.Time { return job.CancelRequestedAt.Add(10 * time.Second) }
	if c, err := e.r.Pass(ctx); err != nil || c.ExecutionsStopped != 0 {
		t.Fatalf("within the grace period: %+v %v", c, err)
	}
	e.r.Now = func() time.Time { return job.CancelRequestedAt.Add(31 * time.Second) }
	if c, err := e.r.Pass(ctx); err != nil || c.ExecutionsStopped != 1 {
		t.Fatalf("after the grace period: %+v %v", c, err)
	}
	if !slices.Equal(rec.stopped, []string{"cancelled"}) {
		t.Fatalf("stopped %v", rec.stopped)
	}
}

// The Step Functions adapter pages through running executions of both
// machines and stops one by its ARN on each (a machine without it answers
// ExecutionDoesNotExist), against a server speaking the service's JSON
// protocol.
func TestStepFunctionsExecutions(t *testing.T) {
	const machine = "arn:aws:states:us-east-1:000000000000:stateMachine:research"
	const agents = "arn:aws:states:us-east-1:000000000000:stateMachine:agents"
	var mu sync.Mutex
	var stops []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in map[string]any
		_ = json.NewDecoder(r.Body).Decode(&in)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		switch r.Header.Get("X-Amz-Target") {
		case "AWSStepFunctions.ListExecutions":
			if in["stateMachineArn"] == agents && in["statusFilter"] == "RUNNING" {
				fmt.Fprint(w, `{"executions":[{"name":"run-c","executionArn":"z","stateMachineArn":"a","status":"RUNNING","startDate":1}]}`)
				return
			}
			if in["stateMachineArn"] != machine || in["statusFilter"] != "RUNNING" {
				http.Error(w, `{"__type":"InvalidArn"}`, http.StatusBadRequest)
				return
			}
			if in["nextToken"] == nil {
				fmt.Fprint(w, `{"executions":[{"name":"job-a","executionArn":"x","stateMachineArn":"m","status":"RUNNING","startDate":1}],"nextToken":"p2"}`)
				return
			}
			fmt.Fprint(w, `{"executions":[{"name":"job-b","executionArn":"y","stateMachineArn":"m","status":"RUNNING","startDate":1}]}`)
		case "AWSStepFunctions.StopExecution":
			mu.Lock()
			stops = append(stops, in["executionArn"].(string))
			mu.Unlock()
			if strings.Contains(in["executionArn"].(string), ":agents:") {
				w.WriteHeader(http.StatusBadRequest)
				fmt.Fprint(w, `{"__type":"ExecutionDoesNotExist"}`)
				return
			}
			fmt.Fprint(w, `{"stopDate":1}`)
		default:
			http.Error(w, `{"__type":"UnknownOperation"}`, http.StatusBadRequest)
		}
	}))
	defer srv.Close()
	env := awsenv.FromEnv(func(k string) string {
		return map[string]string{"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_ENDPOINT_URL_SFN": srv.URL}[k]
	})
	x := reaper.StepFunctions{SF: engine.NewStepFunctions(env, machine), Agents: engine.NewStepFunctions(env, agents)}
	ids, err := x.Running(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, []string{"job-a", "job-b", "run-c"}) {
		t.Fatalf("running = %v", ids)
	}
	if err := x.Stop(ctxFor(t), "job-a", "cancelled"); err != nil {
		t.Fatal(err)
	}
	if len(stops) != 2 || !strings.HasSuffix(stops[0], ":execution:research:job-a") || !strings.HasSuffix(stops[1], ":execution:agents:job-a") {
		t.Fatalf("stops = %v", stops)
	}
}

// A startup pass reaps at once what no running owner claims: the sandbox
// of a job whose execution does not run any more (its cleanup is asked
// for), not that of a job the engine resumed, nor one of another
// provider, which this provider cannot see.
func TestStartupPassEndsJobsWithoutAnExecution(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	far := time.Now().Add(time.Hour)
	for _, id := range []string{"resumed", "stranded"} {
		if _, _, err := e.st.CreateJob(ctx, store.NewJob{ID: id, Tenant: "acme", Request: []byte(`{}`), RequestHash: id}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.st.SetStatus(ctx, id, nil, store.StatusRunning); err != nil {
			t.Fatal(err)
		}
	}
	resumed := e.create(t, "resumed", "job:resumed", ours, far)
	stranded := e.create(t, "stranded", "job:stranded", ours, far)
	// A resumed job may be creating its sandbox right now.
	if _, err := e.st.LedgerBegin(ctx, store.LedgerEntry{Name: "resumed-2", Provider: "local", Owner: "job:resumed", Deadline: far}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.LedgerBegin(ctx, store.LedgerEntry{Name: "elsewhere", Provider: "sandy", Owner: "job:stranded", Deadline: far}); err != nil {
		t.Fatal(err)
	}
	rec := &stopRecorder{running: []string{"resumed"}}
	e.r.Executions = rec
	// A normal pass keeps them all: the jobs did not end.
	if c, err := e.r.Pass(ctx); err != nil || c.LedgerReaped != 0 || c.JobsEnded != 0 {
		t.Fatalf("pass: %+v, %v", c, err)
	}
	c, err := e.r.Startup(ctx, time.Now())
	if err != nil || c.JobsEnded != 1 || c.LedgerReaped != 1 {
		t.Fatalf("startup pass: %+v, %v", c, err)
	}
	if !slices.Equal(rec.stopped, []string{"stranded"}) {
		t.Fatalf("asked to end %v", rec.stopped)
	}
	if e.alive(t, stranded.ID) || e.ledgerState(t, "stranded") != store.LedgerTerminated {
		t.Fatal("the stranded job's sandbox is still there")
	}
	if !e.alive(t, resumed.ID) || e.ledgerState(t, "resumed") != store.LedgerRunning || e.ledgerState(t, "resumed-2") != store.LedgerCreating {
		t.Fatal("the startup pass took the sandbox of a running job")
	}
	if e.ledgerState(t, "elsewhere") != store.LedgerCreating {
		t.Fatal("the startup pass closed another provider's entry")
	}
}

// A ledger entry written before the sharded live index (no live_shard) is
// invisible to a pass; the migrating pass gives it its key and reaps it
// when its deadline has passed.
func TestMigratePassReapsEntriesOfAnOlderRelease(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	old := e.create(t, "older-release", "job:gone-job", ours, time.Now().Add(-time.Minute))
	if _, err := e.db.Client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        aws.String(e.db.Prefix + store.SandboxesTableSuffix),
		Key:              map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "older-release"}},
		UpdateExpression: aws.String("REMOVE live_shard"),
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if !e.alive(t, old.ID) || e.ledgerState(t, "older-release") != store.LedgerRunning {
		t.Fatal("a plain pass saw the unmigrated entry; the test does not model an older release")
	}
	c, err := e.r.Migrate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.LedgerMigrated != 1 || c.LedgerReaped != 1 {
		t.Fatalf("counts = %+v, want 1 migrated and 1 reaped", c)
	}
	if e.alive(t, old.ID) || e.ledgerState(t, "older-release") != store.LedgerTerminated {
		t.Fatal("the migrated entry past its deadline was not reaped")
	}
}
