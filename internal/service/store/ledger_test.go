package store_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sandstep/sandstep/internal/service/store"
)

func names(es []store.LedgerEntry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Name
	}
	return out
}

func TestLedgerLifecycle(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	now := time.Now()
	deadline := now.Add(time.Hour).Truncate(time.Millisecond)
	e, err := s.LedgerBegin(ctx, store.LedgerEntry{
		Name: "job-1", Provider: "local", Owner: "job:job-1", Parent: "sandbox:p-1", Tenant: "acme",
		Labels: map[string]string{"job": "job-1"}, Deadline: deadline,
	})
	if err != nil {
		t.Fatal(err)
	}
	if e.State != store.LedgerCreating || !e.Deadline.Equal(deadline) || e.Labels["job"] != "job-1" || e.Parent != "sandbox:p-1" || !e.ExpiresAt.IsZero() {
		t.Fatalf("begun entry = %+v", e)
	}
	// A retried create of the same owner is fine and changes nothing.
	if again, err := s.LedgerBegin(ctx, store.LedgerEntry{Name: "job-1", Provider: "local", Owner: "job:job-1", Deadline: deadline.Add(time.Hour)}); err != nil || !again.Deadline.Equal(deadline) {
		t.Fatalf("begin again, same owner = %+v, %v", again, err)
	}
	// Another owner cannot take a live name.
	if _, err := s.LedgerBegin(ctx, store.LedgerEntry{Name: "job-1", Provider: "local", Owner: "session:s", Deadline: deadline}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("begin by another owner: %v, want ErrConflict", err)
	}
	e, err = s.LedgerRunning(ctx, "job-1", "prov-123")
	if err != nil || e.State != store.LedgerRunning || e.ProviderID != "prov-123" || e.RunningAt.IsZero() {
		t.Fatalf("running = %+v, %v", e, err)
	}
	e, err = s.LedgerClose(ctx, "job-1", "completed", nil)
	if err != nil || e.State != store.LedgerTerminated || e.TerminatedAt.IsZero() || e.Reason != "completed" || e.ExpiresAt.IsZero() {
		t.Fatalf("closed = %+v, %v", e, err)
	}
	if again, err := s.LedgerClose(ctx, "job-1", "reaped", nil); err != nil || again.Reason != "completed" || !again.TerminatedAt.Equal(e.TerminatedAt) {
		t.Fatalf("second close = %+v, %v; want a no-op", again, err)
	}
	// A create that finishes after a cancel closed the entry must learn it.
	if _, err := s.LedgerRunning(ctx, "job-1", "prov-123"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("running after close: %v, want ErrConflict", err)
	}
	// The name may be used again, as a fresh live entry without a TTL.
	e, err = s.LedgerBegin(ctx, store.LedgerEntry{Name: "job-1", Provider: "local", Owner: "job:job-1", Deadline: deadline})
	if err != nil || e.State != store.LedgerCreating || e.ProviderID != "" || !e.ExpiresAt.IsZero() || !e.TerminatedAt.IsZero() {
		t.Fatalf("begin after close = %+v, %v", e, err)
	}
	if _, err := s.LedgerClose(ctx, "nope", "x", nil); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("close unknown: %v, want ErrNotFound", err)
	}
	if _, err := s.LedgerRunning(ctx, "nope", "x"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("running unknown: %v, want ErrNotFound", err)
	}
	if _, err := s.LedgerBegin(ctx, store.LedgerEntry{Name: "x", Provider: "local", Owner: "o"}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("begin without deadline: %v, want ErrInvalid", err)
	}
}

func TestLedgerListLiveByDeadline(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	now := time.Now()
	begin := func(name, owner string, deadline time.Time) {
		t.Helper()
		if _, err := s.LedgerBegin(ctx, store.LedgerEntry{Name: name, Provider: "local", Owner: owner, Deadline: deadline}); err != nil {
			t.Fatal(err)
		}
	}
	begin("overdue-creating", "job:a", now.Add(-2*time.Hour))
	begin("overdue-running", "job:a", now.Add(-3*time.Hour))
	begin("overdue-running-2", "job:b", now.Add(-1*time.Hour))
	begin("overdue-closed", "job:b", now.Add(-4*time.Hour))
	begin("future", "job:b", now.Add(time.Hour))
	for _, n := range []string{"overdue-running", "overdue-running-2", "future"} {
		if _, err := s.LedgerRunning(ctx, n, "p-"+n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.LedgerClose(ctx, "overdue-closed", "done", nil); err != nil {
		t.Fatal(err)
	}

	live, err := s.LedgerListLive(ctx, now, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"overdue-creating", "overdue-running", "overdue-running-2"}
	if !slices.Equal(names(live), want) {
		t.Fatalf("live past deadline = %v, want %v", names(live), want)
	}
	if live[1].ProviderID != "p-overdue-running" {
		t.Fatalf("entry from the index = %+v", live[1])
	}
	if two, err := s.LedgerListLive(ctx, now, 2); err != nil || !slices.Equal(names(two), want[:2]) {
		t.Fatalf("limit 2 = %v, %v", names(two), err)
	}
	if all, err := s.LedgerListLive(ctx, now.Add(2*time.Hour), 0); err != nil || len(all) != 4 {
		t.Fatalf("live before +2h = %v, %v; want 4", names(all), err)
	}

	byOwner, err := s.LedgerListByOwner(ctx, "job:b")
	if err != nil {
		t.Fatal(err)
	}
	got := names(byOwner)
	slices.Sort(got)
	if !slices.Equal(got, []string{"future", "overdue-closed", "overdue-running-2"}) {
		t.Fatalf("by owner job:b = %v", got)
	}
}

// TestLedgerListLiveEveryShardPaged lists live entries spread over every
// shard of the live index with pages of 2 items, so each shard's query
// follows LastEvaluatedKey, and finds each entry once, earliest deadline
// first, creating ones first; closed entries leave the index.
func TestLedgerListLiveEveryShardPaged(t *testing.T) {
	s, _ := newStore(t, store.WithPageSize(2))
	ctx := testCtx(t)
	now := time.Now().Truncate(time.Millisecond)
	var wantCreating, wantRunning []string
	for i := range 70 {
		name := fmt.Sprintf("sb-%03d", i)
		if _, err := s.LedgerBegin(ctx, store.LedgerEntry{Name: name, Provider: "local", Owner: "job:x", Deadline: now.Add(-time.Duration(70-i) * time.Minute)}); err != nil {
			t.Fatal(err)
		}
		switch i % 3 {
		case 0:
			wantCreating = append(wantCreating, name)
		case 1:
			if _, err := s.LedgerRunning(ctx, name, "p-"+name); err != nil {
				t.Fatal(err)
			}
			wantRunning = append(wantRunning, name)
		case 2:
			if _, err := s.LedgerClose(ctx, name, "done", nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	live, err := s.LedgerListLive(ctx, now, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := append(slices.Clone(wantCreating), wantRunning...); !slices.Equal(names(live), want) {
		t.Fatalf("live = %v\nwant %v", names(live), want)
	}
	if five, err := s.LedgerListLive(ctx, now, 5); err != nil || !slices.Equal(names(five), wantCreating[:5]) {
		t.Fatalf("limit 5 = %v, %v", names(five), err)
	}
}

// TestMigrateLedgerIndex: live entries written before the live index
// existed (no live_shard) are invisible to the reaper's query until the
// migration gives them their key; closed ones are left alone; a second run
// changes nothing.
func TestMigrateLedgerIndex(t *testing.T) {
	s, env := newStore(t)
	ctx := testCtx(t)
	now := time.Now()
	for _, n := range []string{"old-creating", "old-running", "old-closed"} {
		if _, err := s.LedgerBegin(ctx, store.LedgerEntry{Name: n, Provider: "local", Owner: "job:o", Deadline: now.Add(-time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.LedgerRunning(ctx, "old-running", "p1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LedgerClose(ctx, "old-closed", "done", nil); err != nil {
		t.Fatal(err)
	}
	// What the previous release wrote: the same items without the key.
	for _, n := range []string{"old-creating", "old-running"} {
		if _, err := env.Client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:        aws.String(env.Prefix + store.SandboxesTableSuffix),
			Key:              map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: n}},
			UpdateExpression: aws.String("REMOVE live_shard"),
		}); err != nil {
			t.Fatal(err)
		}
	}
	if live, err := s.LedgerListLive(ctx, now, 0); err != nil || len(live) != 0 {
		t.Fatalf("before the migration the index holds %v, %v", names(live), err)
	}
	n, err := s.MigrateLedgerIndex(ctx)
	if err != nil || n != 2 {
		t.Fatalf("migrated %d, %v; want 2", n, err)
	}
	live, err := s.LedgerListLive(ctx, now, 0)
	if err != nil || !slices.Equal(names(live), []string{"old-creating", "old-running"}) {
		t.Fatalf("after the migration = %v, %v", names(live), err)
	}
	if n, err := s.MigrateLedgerIndex(ctx); err != nil || n != 0 {
		t.Fatalf("second run migrated %d, %v", n, err)
	}
}

// A ledger entry keeps what its sandbox's usage needs besides its times:
// the job it counts for, the commands run in it while it lived (not after
// it closed), and the bytes out measured at its close, absent when not
// measured (never a 0 for unknown).
func TestLedgerKeepsJobExecsAndBytesOut(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	deadline := time.Now().Add(time.Hour)
	for _, name := range []string{"sbx-measured", "sbx-unmeasured"} {
		if _, err := s.LedgerBegin(ctx, store.LedgerEntry{Name: name, Provider: "local", Owner: "tenant:acme", Tenant: "acme", Job: "acme#run-1", Deadline: deadline}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.LedgerRunning(ctx, name, "p-"+name); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if err := s.LedgerAddExec(ctx, "sbx-measured"); err != nil {
			t.Fatal(err)
		}
	}
	sent := int64(123456)
	e, err := s.LedgerClose(ctx, "sbx-measured", "done", &sent)
	if err != nil || e.BytesOut == nil || *e.BytesOut != sent || e.Execs != 3 || e.Job != "acme#run-1" {
		t.Fatalf("closed = %+v, %v", e, err)
	}
	// An exec counted after the close (it raced the terminate) changes
	// nothing, and neither does one of an unknown sandbox.
	if err := s.LedgerAddExec(ctx, "sbx-measured"); err != nil {
		t.Fatal(err)
	}
	if err := s.LedgerAddExec(ctx, "sbx-nope"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.LedgerGet(ctx, "sbx-measured"); err != nil || got.Execs != 3 || *got.BytesOut != sent {
		t.Fatalf("after a late exec: %+v, %v", got, err)
	}
	if _, err := s.LedgerGet(ctx, "sbx-nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an exec of an unknown sandbox made an entry: %v", err)
	}
	e, err = s.LedgerClose(ctx, "sbx-unmeasured", "done", nil)
	if err != nil || e.BytesOut != nil || e.Execs != 0 {
		t.Fatalf("closed unmeasured = %+v, %v", e, err)
	}
	if u := store.EntryUsage(e, time.Now()); len(u.BytesOut) != 0 || u.SandboxSeconds["local/0"] <= 0 {
		t.Fatalf("usage of the unmeasured entry %+v", u)
	}
	e, _ = s.LedgerGet(ctx, "sbx-measured")
	if u := store.EntryUsage(e, time.Now()); u.BytesOut["local"] != sent || u.Execs != 3 {
		t.Fatalf("usage of the measured entry %+v", u)
	}
}
