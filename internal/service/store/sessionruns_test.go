package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/sandstep/sandstep/internal/service/store"
)

// A session keeps its last MaxSessionEvents events; seqs go on counting.
func TestSessionEventsKeepTheLatest(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	const n = store.MaxSessionEvents + 7
	at := time.Now()
	for i := range n {
		data, _ := json.Marshal(map[string]int{"i": i})
		if _, err := s.AppendSessionEvent(ctx, "s-a", at, store.NewSessionEvent{Type: "e", Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := s.SessionEvents(ctx, "s-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != store.MaxSessionEvents || evs[0].Seq != n-store.MaxSessionEvents+1 || evs[len(evs)-1].Seq != n {
		t.Fatalf("%d events, seqs %d..%d", len(evs), evs[0].Seq, evs[len(evs)-1].Seq)
	}
	var last struct{ I int }
	if err := json.Unmarshal(evs[len(evs)-1].Data, &last); err != nil || last.I != n-1 {
		t.Fatalf("last event data %s", evs[len(evs)-1].Data)
	}
	if after, _ := s.SessionEvents(ctx, "s-a", n-2); len(after) != 2 || after[0].Seq != n-1 {
		t.Fatalf("events after %d: %+v", n-2, after)
	}
	if none, err := s.SessionEvents(ctx, "s-other", 0); err != nil || len(none) != 0 {
		t.Fatalf("events of a session without any: %v %v", none, err)
	}
}

// An event with a Once value is written once per value; a final event
// makes the list expire after the store's retention, and a revived
// session's list no longer does.
func TestSessionEventsOnceFinalRevive(t *testing.T) {
	s, _ := newStore(t, store.WithRetention(time.Hour))
	ctx := testCtx(t)
	at := time.Now()
	for i, want := range []bool{true, false, false} {
		wrote, err := s.AppendSessionEvent(ctx, "s-a", at, store.NewSessionEvent{Type: "session.expiring", Once: "expiring:1"})
		if err != nil || wrote != want {
			t.Fatalf("append %d: wrote %v, %v", i, wrote, err)
		}
	}
	if wrote, err := s.AppendSessionEvent(ctx, "s-a", at, store.NewSessionEvent{Type: "session.expiring", Once: "expiring:2"}); err != nil || !wrote {
		t.Fatalf("another expiry: %v %v", wrote, err)
	}
	if _, err := s.AppendSessionEvent(ctx, "s-a", at, store.NewSessionEvent{Type: "session.expired", Final: true}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.SessionEventsExpiry(ctx, "s-a"); err != nil || got != at.Add(time.Hour).Unix() {
		t.Fatalf("expires_at after the final event = %d, %v", got, err)
	}
	if _, err := s.AppendSessionEvent(ctx, "s-a", at, store.NewSessionEvent{Type: "session.created", Revive: true}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.SessionEventsExpiry(ctx, "s-a"); err != nil || got != 0 {
		t.Fatalf("expires_at after the session started again = %d, %v", got, err)
	}
	evs, _ := s.SessionEvents(ctx, "s-a", 0)
	if len(evs) != 4 {
		t.Fatalf("events = %+v", evs)
	}
}

// A pending record never replaces a finished one; the finished one drops
// the code; a pending one is listed until it ends, and failing it is
// conditional on it still running.
func TestSessionRunRecords(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	now := time.Now().Truncate(time.Millisecond)
	run := store.SessionRun{ID: "r1", Tenant: "acme", SessionID: "s", Status: store.RunRunning, Language: "shell", Timeout: time.Minute, CreatedAt: now, Code: "echo hi"}
	if wrote, err := s.PutPendingRun(ctx, "s-a", run); err != nil || !wrote {
		t.Fatalf("pending: %v %v", wrote, err)
	}
	got, err := s.GetSessionRun(ctx, "s-a", "r1")
	if err != nil || got.Status != store.RunRunning || got.Code != "echo hi" || got.Result != nil || !got.CreatedAt.Equal(now) || got.Timeout != time.Minute {
		t.Fatalf("pending run = %+v %v", got, err)
	}
	pending, err := s.PendingRunsBefore(ctx, now.Add(time.Second))
	if err != nil || len(pending) != 1 || pending[0].ID != "r1" || pending[0].Tenant != "acme" || pending[0].SessionID != "s" {
		t.Fatalf("pending runs = %+v, %v", pending, err)
	}
	if early, err := s.PendingRunsBefore(ctx, now); err != nil || len(early) != 0 {
		t.Fatalf("pending runs created before the run = %+v, %v", early, err)
	}
	run.Status, run.FinishedAt = store.RunFailed, now.Add(time.Second)
	run.Result = json.RawMessage(`{"error":"boom","stdout":"hi\n"}`)
	if err := s.PutFinishedRun(ctx, "s-a", run); err != nil {
		t.Fatal(err)
	}
	if wrote, err := s.PutPendingRun(ctx, "s-a", run); err != nil || wrote {
		t.Fatalf("pending over finished: %v %v", wrote, err)
	}
	got, err = s.GetSessionRun(ctx, "s-a", "r1")
	if err != nil || got.Status != store.RunFailed || got.Code != "" || string(got.Result) != string(run.Result) || !got.FinishedAt.Equal(run.FinishedAt) {
		t.Fatalf("finished run = %+v %v", got, err)
	}
	if pending, err := s.PendingRunsBefore(ctx, now.Add(time.Hour)); err != nil || len(pending) != 0 {
		t.Fatalf("a finished run is still pending: %+v, %v", pending, err)
	}
	if wrote, err := s.FailPendingRun(ctx, "s-a", "r1", now, json.RawMessage(`{}`)); err != nil || wrote {
		t.Fatalf("failing a finished run: %v %v", wrote, err)
	}
	if _, err := s.GetSessionRun(ctx, "s-b", "r1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another session's run: %v", err)
	}

	// A run the server's stop interrupted is failed once.
	run2 := store.SessionRun{ID: "r2", Tenant: "acme", SessionID: "s", Language: "shell", Timeout: time.Minute, CreatedAt: now}
	if _, err := s.PutPendingRun(ctx, "s-a", run2); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false} {
		if wrote, err := s.FailPendingRun(ctx, "s-a", "r2", now.Add(time.Minute), json.RawMessage(`{"error":"interrupted"}`)); err != nil || wrote != want {
			t.Fatalf("fail %d: %v %v", i, wrote, err)
		}
	}
	got, err = s.GetSessionRun(ctx, "s-a", "r2")
	if err != nil || got.Status != store.RunFailed || string(got.Result) != `{"error":"interrupted"}` || !got.FinishedAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("interrupted run = %+v %v", got, err)
	}
	if pending, err := s.PendingRunsBefore(ctx, now.Add(time.Hour)); err != nil || len(pending) != 0 {
		t.Fatalf("a failed run is still pending: %+v, %v", pending, err)
	}
	if wrote, err := s.FailPendingRun(ctx, "s-a", "never", now, json.RawMessage(`{}`)); err != nil || wrote {
		t.Fatalf("failing an unknown run: %v %v", wrote, err)
	}
	if _, err := s.GetSessionRun(ctx, "s-a", "never"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("failing an unknown run created it: %v", err)
	}
}

// An append whose answer was lost and that the SDK sent again is one event,
// not two: the middleware below delivers every UpdateItem twice, as a retry
// after a lost response does.
func TestSessionEventAppendSurvivesARetry(t *testing.T) {
	_, env := newStore(t)
	ctx := testCtx(t)
	twice := func(stack *middleware.Stack) error {
		return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("deliverTwice",
			func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
				if middleware.GetOperationName(ctx) == "UpdateItem" {
					if req, ok := in.Request.(*smithyhttp.Request); ok {
						first := req.Clone()
						if err := first.RewindStream(); err != nil {
							return middleware.FinalizeOutput{}, middleware.Metadata{}, err
						}
						if _, _, err := next.HandleFinalize(ctx, middleware.FinalizeInput{Request: first}); err != nil {
							return middleware.FinalizeOutput{}, middleware.Metadata{}, err
						}
						if err := req.RewindStream(); err != nil {
							return middleware.FinalizeOutput{}, middleware.Metadata{}, err
						}
					}
				}
				return next.HandleFinalize(ctx, in)
			}), middleware.After)
	}
	opts := env.Client.Options()
	opts.APIOptions = append(slices.Clone(opts.APIOptions), twice)
	s := store.New(dynamodb.New(opts), env.Prefix)
	at := time.Now()
	for i := range 3 {
		wrote, err := s.AppendSessionEvent(ctx, "s-r", at, store.NewSessionEvent{Type: "e"})
		if err != nil || !wrote {
			t.Fatalf("append %d: wrote %v, %v", i, wrote, err)
		}
	}
	evs, err := s.SessionEvents(ctx, "s-r", 0)
	if err != nil || len(evs) != 3 || evs[2].Seq != 3 {
		t.Fatalf("events after 3 appends delivered twice each: %+v %v", evs, err)
	}
	if wrote, err := s.AppendSessionEvent(ctx, "s-r", at, store.NewSessionEvent{Type: "x", Once: "o"}); err != nil || !wrote {
		t.Fatalf("a Once append delivered twice: %v %v", wrote, err)
	}
	if wrote, err := s.AppendSessionEvent(ctx, "s-r", at, store.NewSessionEvent{Type: "x", Once: "o"}); err != nil || wrote {
		t.Fatalf("the same Once value again: wrote %v, %v", wrote, err)
	}
}
