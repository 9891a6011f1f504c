package store_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/store"
)

// BenchmarkJobLifecycle runs what one deep-research job asks of DynamoDB:
// create, start, the sandbox's ledger entry, 8 step updates, 20 events in
// batches of 5, 10 sources, a report, the sandbox closed, the job finished.
// It reports DynamoDB calls and item writes per job (the design's "writes
// per job" budget) next to the time per job against DynamoDB Local.
func BenchmarkJobLifecycle(b *testing.B) {
	s, _ := newStore(b)
	ctx := testCtx(b)
	report := strings.Repeat("Finding with a citation [3]. ", 700) // about 20 KB
	sources := make([]store.Source, 10)
	for i := range sources {
		sources[i] = store.Source{
			N: i + 1, URL: fmt.Sprintf("https://example.org/%d", i), Title: "Title",
			Snippet: "snippet", Content: strings.Repeat("page text ", 300), Origin: store.OriginCrawl,
		}
	}
	before := s.Stats()
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprintf("job-%d", i)
		must := func(err error) {
			if err != nil {
				b.Fatal(err)
			}
		}
		_, _, err := s.CreateJob(ctx, store.NewJob{ID: id, Tenant: "t", Request: json.RawMessage(`{"query":"q"}`), RequestHash: "h"})
		must(err)
		_, err = s.SetStatus(ctx, id, []store.Status{store.StatusQueued}, store.StatusRunning)
		must(err)
		_, err = s.LedgerBegin(ctx, store.LedgerEntry{Name: id, Provider: "local", Owner: "job:" + id, Deadline: time.Now().Add(time.Hour)})
		must(err)
		_, err = s.LedgerRunning(ctx, id, "p-"+id)
		must(err)
		for _, st := range store.Steps {
			_, err = s.SetStep(ctx, id, store.Step{ID: st, State: store.StepComplete})
			must(err)
		}
		for batch := range 4 {
			evs := make([]store.Event, 5)
			for e := range evs {
				evs[e] = store.Event{Key: fmt.Sprintf("b%d-e%d", batch, e), Type: "progress", Data: json.RawMessage(`{"pct":50}`)}
			}
			_, err = s.AppendEvents(ctx, id, evs)
			must(err)
		}
		must(s.PutSources(ctx, id, sources))
		must(s.PutReport(ctx, id, report, true))
		_, err = s.LedgerClose(ctx, id, "completed", nil)
		must(err)
		_, err = s.SetStatus(ctx, id, []store.Status{store.StatusRunning}, store.StatusSucceeded)
		must(err)
	}
	b.StopTimer()
	d := s.Stats().Sub(before)
	n := float64(b.N)
	var writeCalls int64
	for _, op := range []string{"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"} {
		writeCalls += d.Calls[op]
	}
	b.ReportMetric(float64(d.Total())/n, "calls/job")
	b.ReportMetric(float64(writeCalls)/n, "write-calls/job")
	b.ReportMetric(float64(d.ItemWrites)/n, "item-writes/job")
}
