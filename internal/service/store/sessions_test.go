package store_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/store"
)

func TestSessionLifecycle(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	ns := store.NewSession{ID: "s1", Tenant: "acme", VolumeSlug: "vol-s1", IdleTTL: time.Hour}
	sess, created, err := s.CreateSession(ctx, ns)
	if err != nil || !created || sess.State != store.SessionIdle || sess.Version != 1 || !sess.ExpiresAt.IsZero() {
		t.Fatalf("create = %+v, %v, %v", sess, created, err)
	}
	if got, created, err := s.CreateSession(ctx, ns); err != nil || created || got.Version != 1 {
		t.Fatalf("create again = %+v, %v, %v; want the existing session", got, created, err)
	}
	if _, _, err := s.CreateSession(ctx, store.NewSession{ID: "s1", Tenant: "evil", VolumeSlug: "v"}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("another tenant's id: %v, want ErrConflict", err)
	}
	if _, _, err := s.CreateSession(ctx, store.NewSession{ID: "s1", Tenant: "acme", ClientID: "other", VolumeSlug: "v"}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("same key, other client id: %v, want ErrConflict", err)
	}
	ck, _, err := s.CreateSession(ctx, store.NewSession{ID: "s-key", Tenant: "acme", ClientID: "notebook", VolumeSlug: "vol-k", IdleTTL: time.Hour})
	if err != nil || ck.ClientID != "notebook" {
		t.Fatalf("create with a client id = %+v, %v", ck, err)
	}
	if got, err := s.GetSession(ctx, "s-key"); err != nil || got.ClientID != "notebook" {
		t.Fatalf("GetSession = %+v, %v; want client id notebook", got, err)
	}

	run, err := s.BeginRun(ctx, "s1", 1, time.Hour)
	if err != nil || run.State != store.SessionRunning || run.Version != 2 {
		t.Fatalf("begin run = %+v, %v", run, err)
	}
	if _, err := s.BeginRun(ctx, "s1", 2, time.Hour); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second concurrent run: %v, want ErrConflict", err)
	}
	run, err = s.SetSessionSandbox(ctx, "s1", run.Version, "sb-1")
	if err != nil || run.SandboxID != "sb-1" || run.Version != 3 {
		t.Fatalf("set sandbox = %+v, %v", run, err)
	}
	if _, err := s.EndRun(ctx, "s1", 2, time.Hour); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("end run at a stale version: %v, want ErrConflict", err)
	}
	// End the run with a zero idle TTL: the session is expired at once.
	idle, err := s.EndRun(ctx, "s1", run.Version, 0)
	if err != nil || idle.State != store.SessionIdle || idle.SandboxID != "sb-1" || idle.Version != 4 {
		t.Fatalf("end run = %+v, %v", idle, err)
	}

	// Not yet expired as of a time before the expiry: refused.
	if _, err := s.BeginDelete(ctx, "s1", idle.IdleExpiresAt.Add(-time.Second)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("delete before expiry: %v, want ErrConflict", err)
	}
	after := idle.IdleExpiresAt.Add(time.Second)
	expired, err := s.ListSessions(ctx, store.SessionIdle, after, 0)
	if err != nil || len(expired) != 1 || expired[0].ID != "s1" {
		t.Fatalf("expired idle sessions = %+v, %v", expired, err)
	}
	del, err := s.BeginDelete(ctx, "s1", after)
	if err != nil || del.State != store.SessionDeleting {
		t.Fatalf("begin delete = %+v, %v", del, err)
	}
	if _, err := s.BeginRun(ctx, "s1", del.Version, time.Hour); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("run while deleting: %v, want ErrConflict", err)
	}
	// A cleanup that crashed mid-way finds it again.
	if stuck, err := s.ListSessions(ctx, store.SessionDeleting, after, 0); err != nil || len(stuck) != 1 {
		t.Fatalf("deleting sessions = %+v, %v", stuck, err)
	}
	gone, err := s.FinishDelete(ctx, "s1")
	if err != nil || gone.State != store.SessionDeleted || gone.ExpiresAt.IsZero() || gone.SandboxID != "" {
		t.Fatalf("finish delete = %+v, %v", gone, err)
	}
	if again, err := s.FinishDelete(ctx, "s1"); err != nil || again.Version != gone.Version {
		t.Fatalf("finish delete again = %+v, %v; want a no-op", again, err)
	}
	for _, st := range []store.SessionState{store.SessionIdle, store.SessionDeleting} {
		if left, err := s.ListSessions(ctx, st, after, 0); err != nil || len(left) != 0 {
			t.Fatalf("%s sessions after deletion = %+v, %v", st, left, err)
		}
	}
	// The id can start a new session, without the old TTL.
	fresh, created, err := s.CreateSession(ctx, ns)
	if err != nil || !created || fresh.State != store.SessionIdle || !fresh.ExpiresAt.IsZero() {
		t.Fatalf("recreate = %+v, %v, %v", fresh, created, err)
	}
	if _, err := s.BeginRun(ctx, "nope", 1, time.Hour); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("run of unknown session: %v, want ErrNotFound", err)
	}
	if _, err := s.ListSessions(ctx, store.SessionDeleted, after, 0); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("list deleted: %v, want ErrInvalid", err)
	}
}

func TestListSessionsAcrossShards(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	for i := range 12 {
		ttl := time.Duration(0)
		if i%3 == 0 {
			ttl = time.Hour // not expired
		}
		if _, _, err := s.CreateSession(ctx, store.NewSession{ID: fmt.Sprintf("s%02d", i), Tenant: "t", VolumeSlug: "v", IdleTTL: ttl}); err != nil {
			t.Fatal(err)
		}
	}
	before := time.Now().Add(time.Minute)
	all, err := s.ListSessions(ctx, store.SessionIdle, before, 0)
	if err != nil || len(all) != 8 {
		t.Fatalf("expired = %d sessions, %v; want 8", len(all), err)
	}
	if some, err := s.ListSessions(ctx, store.SessionIdle, before, 5); err != nil || len(some) != 5 {
		t.Fatalf("limit 5 = %d sessions, %v", len(some), err)
	}
}

// TestRunRacesDelete: a run starting and the cleanup deleting the same
// expired idle session at the same moment. DynamoDB must let exactly one
// through, every time.
func TestRunRacesDelete(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	runs, deletes := 0, 0
	for i := range 50 {
		id := fmt.Sprintf("race-%d", i)
		sess, _, err := s.CreateSession(ctx, store.NewSession{ID: id, Tenant: "t", VolumeSlug: "v-" + id})
		if err != nil {
			t.Fatal(err)
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		var runErr, delErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			_, runErr = s.BeginRun(ctx, id, sess.Version, time.Hour)
		}()
		go func() {
			defer wg.Done()
			<-start
			_, delErr = s.BeginDelete(ctx, id, time.Now().Add(time.Minute))
		}()
		close(start)
		wg.Wait()
		for _, err := range []error{runErr, delErr} {
			if err != nil && !errors.Is(err, store.ErrConflict) {
				t.Fatalf("iteration %d: %v", i, err)
			}
		}
		if (runErr == nil) == (delErr == nil) {
			t.Fatalf("iteration %d: run err %v, delete err %v; want exactly one winner", i, runErr, delErr)
		}
		final, err := s.GetSession(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case runErr == nil:
			runs++
			if final.State != store.SessionRunning {
				t.Fatalf("iteration %d: run won but state is %s", i, final.State)
			}
		default:
			deletes++
			if final.State != store.SessionDeleting {
				t.Fatalf("iteration %d: delete won but state is %s", i, final.State)
			}
		}
	}
	t.Logf("runs won %d, deletes won %d", runs, deletes)
}
