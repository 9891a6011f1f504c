package store_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/store"
)

// Many contenders for few slots, on two Stores (two clients, as two Lambdas
// have): exactly the limit get one, each refusal names the limit, a retry
// by a holder keeps its one slot, and a release lets the next one in.
func TestSlotsAreExactUnderContention(t *testing.T) {
	st, env := newStore(t)
	other := store.NewLocal(env.Endpoint, env.Prefix)
	ctx := testCtx(t)
	const max, contenders = 5, 30
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		granted []string
		refused int
	)
	for i := range contenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := st
			if i%2 == 1 {
				s = other
			}
			holder := fmt.Sprintf("job-%02d", i)
			err := s.AcquireSlot(ctx, "acme", store.QuotaConcurrentJobs, max, holder)
			mu.Lock()
			defer mu.Unlock()
			var le *store.LimitError
			switch {
			case err == nil:
				granted = append(granted, holder)
			case errors.As(err, &le):
				if le.Limit != store.QuotaConcurrentJobs || le.Max != max || le.Scope != "tenant" {
					t.Errorf("refusal %+v", le)
				}
				refused++
			default:
				t.Errorf("acquire %s: %v", holder, err)
			}
		}()
	}
	wg.Wait()
	if len(granted) != max || refused != contenders-max {
		t.Fatalf("granted %d, refused %d; want %d and %d", len(granted), refused, max, contenders-max)
	}
	holders, err := st.SlotHolders(ctx, "acme", store.QuotaConcurrentJobs)
	if err != nil || len(holders) != max {
		t.Fatalf("holders %v, %v", holders, err)
	}
	// A holder's retry is its own slot again, not a refusal.
	if err := other.AcquireSlot(ctx, "acme", store.QuotaConcurrentJobs, max, granted[0]); err != nil {
		t.Fatalf("a holder's retry: %v", err)
	}
	// Another tenant has slots of its own.
	if err := st.AcquireSlot(ctx, "globex", store.QuotaConcurrentJobs, max, "job-x"); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
	if err := st.ReleaseSlot(ctx, "acme", store.QuotaConcurrentJobs, granted[1]); err != nil {
		t.Fatal(err)
	}
	// Twice is harmless, and does not free a second slot.
	if err := st.ReleaseSlot(ctx, "acme", store.QuotaConcurrentJobs, granted[1]); err != nil {
		t.Fatal(err)
	}
	if err := st.AcquireSlot(ctx, "acme", store.QuotaConcurrentJobs, max, "job-late"); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if err := st.AcquireSlot(ctx, "acme", store.QuotaConcurrentJobs, max, "job-later"); !errors.As(err, new(*store.LimitError)) {
		t.Fatalf("past the limit again: %v", err)
	}
	tenants, err := st.QuotaTenants(ctx)
	if err != nil || len(tenants) != 2 {
		t.Fatalf("quota tenants %v, %v", tenants, err)
	}
}

// A job's slot goes back when the job ends, however it ends.
func TestAJobEndingGivesItsSlotBack(t *testing.T) {
	st, _ := newStore(t)
	ctx := testCtx(t)
	job, _, err := st.CreateJob(ctx, store.NewJob{ID: "j-1", Tenant: "acme", Request: []byte(`{}`), RequestHash: "h"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.AcquireSlot(ctx, "acme", store.QuotaConcurrentJobs, 1, job.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetStatus(ctx, job.ID, nil, store.StatusRunning); err != nil {
		t.Fatal(err)
	}
	if h, _ := st.SlotHolders(ctx, "acme", store.QuotaConcurrentJobs); len(h) != 1 {
		t.Fatalf("a running job holds its slot: %v", h)
	}
	if _, err := st.SetStatus(ctx, job.ID, nil, store.StatusFailed); err != nil {
		t.Fatal(err)
	}
	if h, _ := st.SlotHolders(ctx, "acme", store.QuotaConcurrentJobs); len(h) != 0 {
		t.Fatalf("an ended job still holds its slot: %v", h)
	}
}

// A rate limit counts to its maximum in a window and refuses the rest,
// saying when the window ends.
func TestCountInWindow(t *testing.T) {
	st, _ := newStore(t)
	ctx := testCtx(t)
	for i := range 3 {
		if err := st.CountInWindow(ctx, "acme", store.QuotaJobsPerHour, 3, time.Hour); err != nil {
			t.Fatalf("count %d: %v", i, err)
		}
	}
	err := st.CountInWindow(ctx, "acme", store.QuotaJobsPerHour, 3, time.Hour)
	var le *store.LimitError
	if !errors.As(err, &le) || le.Limit != store.QuotaJobsPerHour || le.Max != 3 || le.RetryAfter <= 0 || le.RetryAfter > time.Hour {
		t.Fatalf("the fourth: %v (%+v)", err, le)
	}
	if err := st.CountInWindow(ctx, "globex", store.QuotaJobsPerHour, 3, time.Hour); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
}

// BenchmarkSlotAdmission is what a concurrency quota adds to one job: a
// slot taken and given back on one tenant item that already holds 99
// others (a busy tenant at concurrent_jobs = 100), next to the job record's
// own conditional create as the baseline in the same run.
func BenchmarkSlotAdmission(b *testing.B) {
	st, _ := newStore(b)
	ctx := testCtx(b)
	for i := range 99 {
		if err := st.AcquireSlot(ctx, "busy", store.QuotaConcurrentJobs, 100, fmt.Sprintf("j-held-%02d", i)); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("create-job-baseline", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			if _, _, err := st.CreateJob(ctx, store.NewJob{ID: fmt.Sprintf("j-base-%d", i), Tenant: "busy", Request: []byte(`{}`), RequestHash: "h"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("acquire-and-release-slot", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			h := fmt.Sprintf("j-bench-%d", i)
			if err := st.AcquireSlot(ctx, "busy", store.QuotaConcurrentJobs, 100, h); err != nil {
				b.Fatal(err)
			}
			if err := st.ReleaseSlot(ctx, "busy", store.QuotaConcurrentJobs, h); err != nil {
				b.Fatal(err)
			}
		}
	})
}
