package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/sandstep/sandstep/internal/service/store"
)

func testRecords(t *testing.T) (*records, context.Context) {
	t.Helper()
	env := testddb.ForTests(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return &records{db: env.Client, table: env.Prefix + store.SessionsTableSuffix, retention: time.Hour}, ctx
}

// A session keeps its last MaxEvents events; seqs go on counting.
func TestEventsKeepTheLatest(t *testing.T) {
	r, ctx := testRecords(t)
	const n = MaxEvents + 7
	at := time.Now()
	for i := range n {
		if _, err := r.appendEvent(ctx, "acme/s", at, event{typ: "e", data: map[string]int{"i": i}}); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := r.events(ctx, "acme/s", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != MaxEvents || evs[0].Seq != n-MaxEvents+1 || evs[len(evs)-1].Seq != n {
		t.Fatalf("%d events, seqs %d..%d", len(evs), evs[0].Seq, evs[len(evs)-1].Seq)
	}
	var last struct{ I int }
	if err := json.Unmarshal(evs[len(evs)-1].Data, &last); err != nil || last.I != n-1 {
		t.Fatalf("last event data %s", evs[len(evs)-1].Data)
	}
	if after, _ := r.events(ctx, "acme/s", n-2); len(after) != 2 || after[0].Seq != n-1 {
		t.Fatalf("events after %d: %+v", n-2, after)
	}
	if none, err := r.events(ctx, "acme/other", 0); err != nil || len(none) != 0 {
		t.Fatalf("events of a session without any: %v %v", none, err)
	}
}

// An event with a once value is written once per value; a final event
// makes the list expire, and a revived session's list no longer does.
func TestEventsOnceFinalRevive(t *testing.T) {
	r, ctx := testRecords(t)
	at := time.Now()
	for i, want := range []bool{true, false, false} {
		wrote, err := r.appendEvent(ctx, "acme/s", at, event{typ: EventExpiring, once: "expiring:1"})
		if err != nil || wrote != want {
			t.Fatalf("append %d: wrote %v, %v", i, wrote, err)
		}
	}
	if wrote, err := r.appendEvent(ctx, "acme/s", at, event{typ: EventExpiring, once: "expiring:2"}); err != nil || !wrote {
		t.Fatalf("another expiry: %v %v", wrote, err)
	}
	if _, err := r.appendEvent(ctx, "acme/s", at, event{typ: EventExpired, final: true}); err != nil {
		t.Fatal(err)
	}
	if got := r.expiresAt(t, ctx, "acme/s"); got != at.Add(time.Hour).Unix() {
		t.Fatalf("expires_at after the final event = %d", got)
	}
	if _, err := r.appendEvent(ctx, "acme/s", at, event{typ: EventCreated, revive: true}); err != nil {
		t.Fatal(err)
	}
	if got := r.expiresAt(t, ctx, "acme/s"); got != 0 {
		t.Fatalf("expires_at after the session started again = %d", got)
	}
	evs, _ := r.events(ctx, "acme/s", 0)
	if len(evs) != 4 {
		t.Fatalf("events = %+v", evs)
	}
}

func (r *records) expiresAt(t *testing.T, ctx context.Context, key string) int64 {
	t.Helper()
	out, err := r.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &r.table, Key: eventsKey(key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	return getN(out.Item, "expires_at")
}

// A pending record never replaces a finished one; the finished one drops
// the code.
func TestRunRecords(t *testing.T) {
	r, ctx := testRecords(t)
	now := time.Now().Truncate(time.Millisecond)
	run := Run{ID: "r1", Tenant: "acme", SessionID: "s", Status: RunRunning, Language: LangShell, Timeout: time.Minute, CreatedAt: now, Code: "echo hi"}
	if wrote, err := r.putPending(ctx, "acme/s", run); err != nil || !wrote {
		t.Fatalf("pending: %v %v", wrote, err)
	}
	got, err := r.getRun(ctx, "acme/s", "r1")
	if err != nil || got.Status != RunRunning || got.Code != "echo hi" || got.Result != nil || !got.CreatedAt.Equal(now) || got.Timeout != time.Minute {
		t.Fatalf("pending run = %+v %v", got, err)
	}
	msg := "boom"
	run.Status, run.FinishedAt = RunFailed, now.Add(time.Second)
	run.Result = &Result{Error: &msg, Result: json.RawMessage("null"), ExitCode: 2, Stdout: "hi\n"}
	if err := r.putFinished(ctx, "acme/s", run); err != nil {
		t.Fatal(err)
	}
	if wrote, err := r.putPending(ctx, "acme/s", run); err != nil || wrote {
		t.Fatalf("pending over finished: %v %v", wrote, err)
	}
	got, err = r.getRun(ctx, "acme/s", "r1")
	if err != nil || got.Status != RunFailed || got.Code != "" || got.Result == nil || *got.Result.Error != "boom" || got.Result.Stdout != "hi\n" {
		t.Fatalf("finished run = %+v %+v %v", got, got.Result, err)
	}
	if _, err := r.getRun(ctx, "globex/s", "r1"); !errors.Is(err, errNoRecord) {
		t.Fatalf("another tenant's run: %v", err)
	}
}
