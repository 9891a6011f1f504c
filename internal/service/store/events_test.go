package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sandstep/sandstep/internal/service/store"
)

func listAll(t *testing.T, s *store.Store, jobID string, page int) []store.Event {
	t.Helper()
	var all []store.Event
	var after int64
	for range 1000 {
		evs, err := s.ListEvents(testCtx(t), jobID, after, page)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			return all
		}
		all = append(all, evs...)
		after = evs[len(evs)-1].Seq
	}
	t.Fatal("ListEvents never ran out")
	return nil
}

func TestAppendEventsConcurrentGapless(t *testing.T) {
	s, _ := newStore(t)
	newJob(t, s, "j")
	const writers, batches, perBatch = 10, 4, 3
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	got := make([][]int64, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				evs := make([]store.Event, perBatch)
				for i := range evs {
					evs[i] = store.Event{
						Key:  fmt.Sprintf("w%d-b%d-e%d", w, b, i),
						Type: "progress",
						Data: json.RawMessage(fmt.Sprintf(`{"w":%d,"b":%d,"i":%d}`, w, b, i)),
					}
				}
				seqs, err := s.AppendEvents(testCtx(t), "j", evs)
				if err != nil {
					errs <- err
					return
				}
				// One batch is one transaction: its seqs are consecutive.
				for i := 1; i < len(seqs); i++ {
					if seqs[i] != seqs[i-1]+1 {
						errs <- fmt.Errorf("writer %d batch %d: seqs %v not consecutive", w, b, seqs)
						return
					}
				}
				got[w] = append(got[w], seqs...)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	const total = writers * batches * perBatch
	all := listAll(t, s, "j", 37)
	if len(all) != total {
		t.Fatalf("%d events stored, want %d", len(all), total)
	}
	keys := map[string]bool{}
	for i, ev := range all {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: not gapless", i, ev.Seq)
		}
		if keys[ev.Key] {
			t.Fatalf("key %s stored twice", ev.Key)
		}
		keys[ev.Key] = true
	}
	// Each writer's seqs increase: its batches were appended in order.
	for w, seqs := range got {
		if !slices.IsSorted(seqs) || len(seqs) != batches*perBatch {
			t.Fatalf("writer %d got seqs %v", w, seqs)
		}
	}
	job, err := s.GetJob(testCtx(t), "j")
	if err != nil || job.LastEventSeq != total {
		t.Fatalf("LastEventSeq = %d, %v; want %d", job.LastEventSeq, err, total)
	}
}

func TestAppendEventsRetryWritesNothingNew(t *testing.T) {
	s, env := newStore(t)
	ctx := testCtx(t)
	newJob(t, s, "j")
	batch := []store.Event{
		{Key: "crawl-1", Type: "page", Data: json.RawMessage(`{"url":"a"}`)},
		{Key: "crawl-2", Type: "page", Data: json.RawMessage(`{"url":"b"}`)},
		{Type: "log", Data: json.RawMessage(`"no key"`)},
	}
	first, err := s.AppendEvents(ctx, "j", batch[:2])
	if err != nil || !slices.Equal(first, []int64{1, 2}) {
		t.Fatalf("first append = %v, %v", first, err)
	}
	before := s.Stats()
	again, err := s.AppendEvents(ctx, "j", batch[:2])
	if err != nil || !slices.Equal(again, first) {
		t.Fatalf("retried append = %v, %v; want the original seqs %v", again, err, first)
	}
	if d := s.Stats().Sub(before); d.WriteUnits != 0 {
		t.Fatalf("a retry consumed %v write units (%+v)", d.WriteUnits, d)
	}
	// A retry from another process (no cached counter), mixing old and new.
	other := store.NewLocal(env.Endpoint, env.Prefix)
	mixed, err := other.AppendEvents(ctx, "j", []store.Event{
		batch[1], {Key: "crawl-3", Type: "page"}, batch[2], {Key: "crawl-3", Type: "page"},
	})
	if err != nil || !slices.Equal(mixed, []int64{2, 3, 4, 3}) {
		t.Fatalf("mixed append = %v, %v; want [2 3 4 3]", mixed, err)
	}
	// The first Store's cached counter is now stale; it must still append
	// at the right place.
	next, err := s.AppendEvents(ctx, "j", []store.Event{{Key: "crawl-4", Type: "page"}})
	if err != nil || !slices.Equal(next, []int64{5}) {
		t.Fatalf("append with a stale counter = %v, %v; want [5]", next, err)
	}
	all := listAll(t, s, "j", 100)
	var keys []string
	for _, ev := range all {
		keys = append(keys, ev.Key)
	}
	if strings.Join(keys, ",") != "crawl-1,crawl-2,crawl-3,,crawl-4" {
		t.Fatalf("stored keys = %q", keys)
	}
	if string(all[0].Data) != `{"url":"a"}` || all[0].Type != "page" || all[0].At.IsZero() {
		t.Fatalf("first event = %+v", all[0])
	}
}

func TestAppendEventsSplitsLargeBatches(t *testing.T) {
	s, _ := newStore(t)
	newJob(t, s, "j")
	evs := make([]store.Event, 130)
	for i := range evs {
		evs[i] = store.Event{Key: fmt.Sprintf("k%03d", i), Type: "t"}
	}
	before := s.Stats()
	seqs, err := s.AppendEvents(testCtx(t), "j", evs)
	if err != nil {
		t.Fatal(err)
	}
	for i, seq := range seqs {
		if seq != int64(i+1) {
			t.Fatalf("seqs = %v", seqs)
		}
	}
	// 49 keyed events fit one transaction (49 events + 49 markers + counter).
	d := s.Stats().Sub(before)
	if n := d.Calls["TransactWriteItems"]; n != 3 {
		t.Fatalf("%d transactions for 130 keyed events, want 3", n)
	}
	if d.ItemWrites != 130*2+3 {
		t.Fatalf("%d item writes, want %d (events, markers, one counter update per transaction)", d.ItemWrites, 130*2+3)
	}
	if all := listAll(t, s, "j", 1000); len(all) != 130 {
		t.Fatalf("%d events stored", len(all))
	}
}

func TestListEventsPages(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	newJob(t, s, "j")
	evs := make([]store.Event, 25)
	for i := range evs {
		evs[i] = store.Event{Type: "t", Data: json.RawMessage(fmt.Sprint(i + 1))}
	}
	if _, err := s.AppendEvents(ctx, "j", evs); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		after       int64
		limit       int
		first, last int64
		n           int
	}{
		{0, 10, 1, 10, 10},
		{10, 10, 11, 20, 10},
		{20, 10, 21, 25, 5},
		{25, 10, 0, 0, 0},
		{3, 0, 4, 25, 22}, // default page size
	} {
		page, err := s.ListEvents(ctx, "j", tc.after, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) != tc.n || (tc.n > 0 && (page[0].Seq != tc.first || page[len(page)-1].Seq != tc.last)) {
			t.Fatalf("after %d limit %d: %d events %v", tc.after, tc.limit, len(page), page)
		}
		if tc.n > 0 && string(page[0].Data) != fmt.Sprint(tc.first) {
			t.Fatalf("event %d data = %s", tc.first, page[0].Data)
		}
	}
	// The event listing does not pick up the markers or other job items.
	if _, err := s.AppendEvents(ctx, "j", []store.Event{{Key: "x", Type: "t"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSources(ctx, "j", []store.Source{{N: 1, URL: "http://x"}}); err != nil {
		t.Fatal(err)
	}
	if page, err := s.ListEvents(ctx, "j", 25, 10); err != nil || len(page) != 1 || page[0].Key != "x" {
		t.Fatalf("after 25: %v, %v", page, err)
	}
}

func TestEventDataIsCapped(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	newJob(t, s, "j")
	big, _ := json.Marshal(map[string]string{"text": strings.Repeat("ü\"", store.MaxEventDataBytes)})
	if _, err := s.AppendEvents(ctx, "j", []store.Event{{Type: "t", Data: big}}); err != nil {
		t.Fatal(err)
	}
	evs, err := s.ListEvents(ctx, "j", 0, 1)
	if err != nil || len(evs) != 1 {
		t.Fatalf("%v, %v", evs, err)
	}
	ev := evs[0]
	if !ev.Truncated || len(ev.Data) > store.MaxEventDataBytes || !json.Valid(ev.Data) {
		t.Fatalf("truncated %v, %d bytes, valid JSON %v", ev.Truncated, len(ev.Data), json.Valid(ev.Data))
	}
}

func TestAppendEventsToMissingJob(t *testing.T) {
	s, _ := newStore(t)
	if _, err := s.AppendEvents(testCtx(t), "missing", []store.Event{{Type: "t"}}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("append to a missing job: %v, want ErrNotFound", err)
	}
}
