package store_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sandstep/sandstep/internal/service/store"
)

func TestExecutionRecordLifecycle(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	start := time.Now().Truncate(time.Millisecond).UTC()
	rec := store.ExecutionRecord{
		Name: "job-1", StateMachine: "DeepResearchStateMachine", Fingerprint: "abc",
		Input: json.RawMessage(`{"job_id":"job-1"}`), StartTime: start,
		State: "Discover", StateInput: json.RawMessage(`{"job_id":"job-1"}`), EnteredTime: start,
		Status: store.ExecutionRunning,
	}
	created, err := s.PutExecution(ctx, rec)
	if err != nil || created.Version != 1 {
		t.Fatalf("create: %+v, %v", created, err)
	}
	// The name is taken: a second create is refused.
	if _, err := s.PutExecution(ctx, rec); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second create: %v", err)
	}
	next := created
	next.State, next.StateInput, next.RetryCounts, next.RetryCount = "Crawl", json.RawMessage(`{"job_id":"job-1","crawl":{"offset":3}}`), []int64{2, 0}, 2
	moved, err := s.PutExecution(ctx, next)
	if err != nil || moved.Version != 2 {
		t.Fatalf("update: %+v, %v", moved, err)
	}
	// A writer that read version 1 lost: it gets the stored record.
	stale := created
	stale.State = "Report"
	cur, err := s.PutExecution(ctx, stale)
	if !errors.Is(err, store.ErrConflict) || cur.Version != 2 || cur.State != "Crawl" {
		t.Fatalf("stale update: %+v, %v", cur, err)
	}
	got, err := s.GetExecution(ctx, "job-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != "Crawl" || string(got.StateInput) != `{"job_id":"job-1","crawl":{"offset":3}}` || !slices.Equal(got.RetryCounts, []int64{2, 0}) ||
		got.RetryCount != 2 || !got.StartTime.Equal(start) || !got.EnteredTime.Equal(start) || got.Fingerprint != "abc" || got.Status != store.ExecutionRunning {
		t.Fatalf("read back %+v", got)
	}
	if _, err := s.PutExecution(ctx, store.ExecutionRecord{Name: "job-2", State: "Discover", Status: store.ExecutionRunning, StartTime: start, StateInput: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListExecutions(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "job-1" || list[1].Name != "job-2" {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if err := s.DeleteExecution(ctx, "job-1", 1); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("delete at an old version: %v", err)
	}
	if err := s.DeleteExecution(ctx, "job-1", 2); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteExecution(ctx, "job-1", 2); err != nil {
		t.Fatalf("deleting again: %v", err)
	}
	if _, err := s.GetExecution(ctx, "job-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	// Executions are not jobs: the job of the same name is untouched.
	if _, err := s.GetJob(ctx, "job-2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetJob: %v", err)
	}
}

func TestExecutionRecordLimits(t *testing.T) {
	s, env := newStore(t)
	ctx := testCtx(t)
	big := json.RawMessage(`"` + strings.Repeat("x", store.MaxExecutionBytes) + `"`)
	_, err := s.PutExecution(ctx, store.ExecutionRecord{Name: "j", State: "A", Status: store.ExecutionRunning, StartTime: time.Now(), StateInput: big})
	if !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("oversized: %v", err)
	}
	if _, err := s.PutExecution(ctx, store.ExecutionRecord{Name: "j", Status: store.ExecutionRunning, StartTime: time.Now()}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("no state: %v", err)
	}
	// A record damaged on disk is listed, marked, not dropped.
	_, err = env.Client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(env.Prefix + store.JobsTableSuffix),
		Item: map[string]types.AttributeValue{
			"pk":           &types.AttributeValueMemberS{Value: "#local-executions"},
			"sk":           &types.AttributeValueMemberS{Value: "damaged"},
			"status":       &types.AttributeValueMemberS{Value: "RUNNING"},
			"retry_counts": &types.AttributeValueMemberS{Value: "[1]"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	list, err := s.ListExecutions(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "damaged" || list[0].Status != "" || !strings.Contains(list[0].Error, "corrupt") {
		t.Fatalf("list: %+v, %v", list, err)
	}
}
