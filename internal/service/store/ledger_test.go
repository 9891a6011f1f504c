package store_test

import (
	"errors"
	"slices"
	"testing"
	"time"

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
	e, err = s.LedgerClose(ctx, "job-1", "completed")
	if err != nil || e.State != store.LedgerTerminated || e.TerminatedAt.IsZero() || e.Reason != "completed" || e.ExpiresAt.IsZero() {
		t.Fatalf("closed = %+v, %v", e, err)
	}
	if again, err := s.LedgerClose(ctx, "job-1", "reaped"); err != nil || again.Reason != "completed" || !again.TerminatedAt.Equal(e.TerminatedAt) {
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
	if _, err := s.LedgerClose(ctx, "nope", "x"); !errors.Is(err, store.ErrNotFound) {
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
	if _, err := s.LedgerClose(ctx, "overdue-closed", "done"); err != nil {
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
