package store_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sandstep/sandstep/internal/service/store"
)

func newJob(t *testing.T, s *store.Store, id string) store.Job {
	t.Helper()
	job, created, err := s.CreateJob(testCtx(t), store.NewJob{
		ID: id, Tenant: "acme", Request: json.RawMessage(`{"query":"q"}`), RequestHash: "h1",
	})
	if err != nil || !created {
		t.Fatalf("CreateJob(%s) = created %v, %v", id, created, err)
	}
	return job
}

func ptr[T any](v T) *T { return &v }

func TestCreateAndGetJob(t *testing.T) {
	const retention = 48 * time.Hour
	s, env := newStore(t, store.WithRetention(retention))
	ctx := testCtx(t)
	before := time.Now()
	created := newJob(t, s, "job-1")

	got, err := s.GetJob(ctx, "job-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != "job-1" || got.Tenant != "acme" || got.Status != store.StatusQueued || got.Version != 1 ||
		got.RequestHash != "h1" || string(got.Request) != `{"query":"q"}` || got.LastEventSeq != 0 {
		t.Fatalf("GetJob = %+v", got)
	}
	if got.Version != created.Version || !got.CreatedAt.Equal(created.CreatedAt) {
		t.Fatalf("created %+v, read back %+v", created, got)
	}
	if len(got.Steps) != len(store.Steps) {
		t.Fatalf("steps = %+v", got.Steps)
	}
	for i, st := range got.Steps {
		if st.ID != store.Steps[i] || st.State != store.StepPending {
			t.Fatalf("step %d = %+v", i, st)
		}
	}
	// The TTL attribute is on the item, in epoch seconds, one retention ahead.
	raw, err := env.Client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(env.Prefix + store.JobsTableSuffix),
		Key: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "job-1"}, "sk": &types.AttributeValueMemberS{Value: "JOB"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := raw.Item["expires_at"].(*types.AttributeValueMemberN); !ok {
		t.Fatalf("job item has no numeric expires_at: %v", raw.Item["expires_at"])
	}
	if lo, hi := before.Add(retention).Add(-2*time.Second), time.Now().Add(retention).Add(2*time.Second); got.ExpiresAt.Before(lo) || got.ExpiresAt.After(hi) {
		t.Fatalf("ExpiresAt = %v, want within [%v, %v]", got.ExpiresAt, lo, hi)
	}

	if _, err := s.GetJob(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetJob(missing) = %v, want ErrNotFound", err)
	}
}

func TestCreateJobIdempotent(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	first := newJob(t, s, "job-1")
	if _, err := s.SetStatus(ctx, "job-1", nil, store.StatusRunning); err != nil {
		t.Fatal(err)
	}

	again, created, err := s.CreateJob(ctx, store.NewJob{ID: "job-1", Tenant: "acme", Request: json.RawMessage(`{"query":"q"}`), RequestHash: "h1"})
	if err != nil || created {
		t.Fatalf("resubmit with the same hash = created %v, %v", created, err)
	}
	if again.Status != store.StatusRunning || !again.CreatedAt.Equal(first.CreatedAt) {
		t.Fatalf("resubmit returned %+v, want the existing running job", again)
	}

	other, created, err := s.CreateJob(ctx, store.NewJob{ID: "job-1", Tenant: "acme", Request: json.RawMessage(`{"query":"other"}`), RequestHash: "h2"})
	if !errors.Is(err, store.ErrConflict) || created || other.RequestHash != "h1" {
		t.Fatalf("resubmit with another hash = %+v, created %v, %v; want the existing job and ErrConflict", other, created, err)
	}
	if _, _, err := s.CreateJob(ctx, store.NewJob{ID: "job-1", Tenant: "evil", Request: json.RawMessage(`{"query":"q"}`), RequestHash: "h1"}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("same id and hash, other tenant: %v, want ErrConflict", err)
	}
}

// The record keeps the client's id beside the key; the same key under
// another client id is a different job (a key collision), never a match.
func TestCreateJobKeepsClientID(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	nj := store.NewJob{ID: "j-key", Tenant: "acme", ClientID: "report-7", Request: json.RawMessage(`{"query":"q"}`), RequestHash: "h1"}
	if _, created, err := s.CreateJob(ctx, nj); err != nil || !created {
		t.Fatalf("create = %v, %v", created, err)
	}
	got, err := s.GetJob(ctx, "j-key")
	if err != nil || got.ClientID != "report-7" || got.Tenant != "acme" {
		t.Fatalf("GetJob = %+v, %v; want client id report-7", got, err)
	}
	if again, created, err := s.CreateJob(ctx, nj); err != nil || created || again.ClientID != "report-7" {
		t.Fatalf("resubmit = %+v, %v, %v", again, created, err)
	}
	nj.ClientID = "report-8"
	if _, _, err := s.CreateJob(ctx, nj); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("same key, other client id: %v, want ErrConflict", err)
	}
}

func TestCreateJobRefusesBadInput(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	big := json.RawMessage(`"` + strings.Repeat("x", store.MaxRequestBytes) + `"`)
	if _, _, err := s.CreateJob(ctx, store.NewJob{ID: "j", Tenant: "t", Request: big}); !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("oversized request: %v, want ErrTooLarge", err)
	}
	if _, _, err := s.CreateJob(ctx, store.NewJob{ID: "j", Tenant: "t", Request: json.RawMessage(`{`)}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("invalid JSON: %v, want ErrInvalid", err)
	}
	if _, _, err := s.CreateJob(ctx, store.NewJob{ID: "", Tenant: "t", Request: json.RawMessage(`{}`)}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("empty id: %v, want ErrInvalid", err)
	}
}

func TestStatusTransitions(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	newJob(t, s, "j")

	// Never legal: refused before any write.
	if _, err := s.SetStatus(ctx, "j", []store.Status{store.StatusQueued}, store.StatusSucceeded); !errors.Is(err, store.ErrIllegalTransition) {
		t.Fatalf("queued -> succeeded: %v, want ErrIllegalTransition", err)
	}
	if _, err := s.SetStatus(ctx, "j", nil, store.StatusQueued); !errors.Is(err, store.ErrIllegalTransition) {
		t.Fatalf("-> queued: %v, want ErrIllegalTransition", err)
	}
	job, err := s.SetStatus(ctx, "j", []store.Status{store.StatusQueued}, store.StatusRunning)
	if err != nil || job.Status != store.StatusRunning || job.Version != 2 {
		t.Fatalf("queued -> running = %+v, %v", job, err)
	}
	// Legal in general but not from the current status: DynamoDB refuses,
	// and the current job comes back with the error.
	cur, err := s.SetStatus(ctx, "j", []store.Status{store.StatusQueued}, store.StatusRunning)
	if !errors.Is(err, store.ErrConflict) || cur.Status != store.StatusRunning || cur.Version != 2 {
		t.Fatalf("second queued -> running = %+v, %v; want ErrConflict with the running job", cur, err)
	}
	// Optimistic concurrency on the version.
	if _, err := s.UpdateJob(ctx, "j", store.JobUpdate{IfVersion: 1, Phase: ptr("crawl")}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("update at stale version: %v, want ErrConflict", err)
	}
	job, err = s.UpdateJob(ctx, "j", store.JobUpdate{IfVersion: 2, Phase: ptr("crawl")})
	if err != nil || job.Phase != "crawl" || job.Version != 3 {
		t.Fatalf("update at current version = %+v, %v", job, err)
	}
	job, err = s.SetStatus(ctx, "j", nil, store.StatusSucceeded)
	if err != nil || job.Status != store.StatusSucceeded || job.FinishedAt.IsZero() {
		t.Fatalf("running -> succeeded = %+v, %v", job, err)
	}
	// Terminal: any change of status is refused.
	if _, err := s.SetStatus(ctx, "j", []store.Status{store.StatusSucceeded}, store.StatusFailed); !errors.Is(err, store.ErrIllegalTransition) {
		t.Fatalf("succeeded -> failed: %v, want ErrIllegalTransition", err)
	}
	cur, err = s.SetStatus(ctx, "j", nil, store.StatusFailed)
	if !errors.Is(err, store.ErrConflict) || cur.Status != store.StatusSucceeded {
		t.Fatalf("-> failed after success = %+v, %v; want ErrConflict", cur, err)
	}
	if _, err := s.SetStatus(ctx, "missing", nil, store.StatusRunning); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing job: %v, want ErrNotFound", err)
	}
}

func TestUpdateJobFields(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	newJob(t, s, "j")
	long := strings.Repeat("é", store.MaxErrorBytes) // 2 bytes each
	job, err := s.UpdateJob(ctx, "j", store.JobUpdate{
		SandboxID: ptr("sb-1"), ExecutionID: ptr("arn:exec"), Error: ptr(long),
		AddFallbacks: []string{"snippets", "raw_extracts"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if job.SandboxID != "sb-1" || job.ExecutionID != "arn:exec" || len(job.Error) > store.MaxErrorBytes ||
		!strings.HasSuffix(job.Error, "[truncated]") || strings.Join(job.Fallbacks, ",") != "raw_extracts,snippets" {
		t.Fatalf("after update: %+v", job)
	}
	job, err = s.UpdateJob(ctx, "j", store.JobUpdate{AddFallbacks: []string{"snippets"}, SandboxID: ptr(""), Error: ptr("")})
	if err != nil {
		t.Fatal(err)
	}
	if job.SandboxID != "" || job.Error != "" || len(job.Fallbacks) != 2 {
		t.Fatalf("after removing fields and re-adding a fallback: %+v", job)
	}
}

func TestRequestCancel(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	newJob(t, s, "j")
	job, err := s.RequestCancel(ctx, "j")
	if err != nil || !job.CancelRequested || job.CancelRequestedAt.IsZero() {
		t.Fatalf("RequestCancel = %+v, %v", job, err)
	}
	again, err := s.RequestCancel(ctx, "j")
	if err != nil || !again.CancelRequested || again.Version != job.Version {
		t.Fatalf("second RequestCancel = %+v, %v; want the same job, unchanged", again, err)
	}
	// Phases learn about the request from their own writes.
	stepped, err := s.SetStep(ctx, "j", store.Step{ID: store.StepSearch, State: store.StepRunning})
	if err != nil || !stepped.CancelRequested {
		t.Fatalf("SetStep after cancel = %+v, %v", stepped, err)
	}
	if _, err := s.SetStatus(ctx, "j", nil, store.StatusCancelled); err != nil {
		t.Fatal(err)
	}
	newJob(t, s, "done")
	if _, err := s.SetStatus(ctx, "done", nil, store.StatusRunning); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetStatus(ctx, "done", nil, store.StatusSucceeded); err != nil {
		t.Fatal(err)
	}
	if cur, err := s.RequestCancel(ctx, "done"); !errors.Is(err, store.ErrConflict) || cur.Status != store.StatusSucceeded {
		t.Fatalf("cancel a finished job = %+v, %v; want ErrConflict", cur, err)
	}
	if _, err := s.RequestCancel(ctx, "missing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("cancel a missing job: %v, want ErrNotFound", err)
	}
}

func TestSetStep(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	newJob(t, s, "j")
	job, err := s.SetStep(ctx, "j", store.Step{ID: store.StepCrawl, State: store.StepRunning, Current: 3, Total: 22})
	if err != nil {
		t.Fatal(err)
	}
	if st := job.Step(store.StepCrawl); st.State != store.StepRunning || st.Current != 3 || st.Total != 22 {
		t.Fatalf("crawl step = %+v", st)
	}
	if job.Version != 1 {
		t.Fatalf("a step update changed the version to %d", job.Version)
	}
	if _, err := s.SetStep(ctx, "j", store.Step{ID: store.StepCrawl, State: store.StepComplete, Current: 22, Total: 22}); err != nil {
		t.Fatal(err)
	}
	// A late progress update must not move a complete step back.
	cur, err := s.SetStep(ctx, "j", store.Step{ID: store.StepCrawl, State: store.StepRunning, Current: 21, Total: 22})
	if !errors.Is(err, store.ErrConflict) || cur.Step(store.StepCrawl).State != store.StepComplete {
		t.Fatalf("running after complete = %+v, %v; want ErrConflict", cur.Step(store.StepCrawl), err)
	}
	if _, err := s.SetStep(ctx, "j", store.Step{ID: store.StepCrawl, State: store.StepComplete, Current: 22, Total: 22}); err != nil {
		t.Fatalf("complete again (a retry): %v", err)
	}
	if _, err := s.SetStep(ctx, "j", store.Step{ID: "deploy", State: store.StepRunning}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("unknown step: %v, want ErrInvalid", err)
	}
	if _, err := s.SetStep(ctx, "missing", store.Step{ID: store.StepSearch, State: store.StepRunning}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing job: %v, want ErrNotFound", err)
	}
}

func TestStatsCountCalls(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	before := s.Stats()
	newJob(t, s, "j")
	if _, err := s.GetJob(ctx, "j"); err != nil {
		t.Fatal(err)
	}
	d := s.Stats().Sub(before)
	if d.Calls["PutItem"] != 1 || d.Calls["GetItem"] != 1 || d.Total() != 2 || d.ItemWrites != 1 {
		t.Fatalf("calls = %v, %d item writes; want one PutItem and one GetItem, 1 item write", d.Calls, d.ItemWrites)
	}
	if d.WriteUnits <= 0 || d.ReadUnits <= 0 {
		t.Fatalf("capacity = %v read, %v write; want both reported", d.ReadUnits, d.WriteUnits)
	}
}
