package store_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/store"
)

func directRec(id, parent string, now time.Time) store.DirectSandbox {
	return store.DirectSandbox{ID: id, Tenant: "acme", Ledger: "sbx-" + id, ParentID: parent, CreatedAt: now, EndsAt: now.Add(time.Hour), LastActive: now}
}

// TestChildLimitsHoldUnderConcurrency: twenty children created at once
// for one parent get exactly max_children slots; closing one frees a slot
// exactly once; the hourly window refuses the 11th creation until it ends.
func TestChildLimitsHoldUnderConcurrency(t *testing.T) {
	st, _ := newStore(t)
	ctx := testCtx(t)
	now := time.Now()
	limits := store.ChildLimits{MaxAlive: 5, PerHour: 10}
	if err := st.DirectCreate(ctx, directRec("parent", "", now), store.ChildLimits{}, now); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = st.DirectCreate(ctx, directRec(fmt.Sprintf("c%02d", i), "parent", now), limits, now)
		}()
	}
	wg.Wait()
	var ok []string
	for i, err := range errs {
		var le *store.LimitError
		switch {
		case err == nil:
			ok = append(ok, fmt.Sprintf("c%02d", i))
		case errors.As(err, &le) && le.Limit == "max_children" && le.Max == 5 && le.Scope == "parent":
		default:
			t.Errorf("child %d: %v", i, err)
		}
	}
	if len(ok) != 5 {
		t.Fatalf("%d children created at once, want 5", len(ok))
	}
	if n, _ := st.DirectChildrenAlive(ctx, "parent"); n != 5 {
		t.Errorf("alive count %d, want 5", n)
	}
	// Closing twice frees one slot.
	for range 2 {
		if _, err := st.DirectClose(ctx, ok[0], "test", store.DirectEvent{Type: "sandbox.terminated", At: now}); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := st.DirectChildrenAlive(ctx, "parent"); n != 4 {
		t.Errorf("alive count %d after one close, want 4", n)
	}
	// 5 creations so far; 5 more (closing as we go) make 10; the 11th waits
	// for the window.
	for i := range 5 {
		if _, err := st.DirectClose(ctx, ok[1+i%4], "test", store.DirectEvent{Type: "sandbox.terminated", At: now}); err != nil {
			t.Fatal(err)
		}
		id := fmt.Sprintf("d%02d", i)
		if err := st.DirectCreate(ctx, directRec(id, "parent", now), limits, now.Add(time.Minute)); err != nil {
			t.Fatalf("creation %d: %v", 6+i, err)
		}
		ok[1+i%4] = id
	}
	err := st.DirectCreate(ctx, directRec("e00", "parent", now), limits, now.Add(30*time.Minute))
	var le *store.LimitError
	if !errors.As(err, &le) || le.Limit != "children_per_hour" || le.RetryAfter <= 29*time.Minute || le.RetryAfter > 30*time.Minute {
		t.Fatalf("the 11th creation in the hour: %v", err)
	}
	if err := st.DirectCreate(ctx, directRec("e01", "parent", now), limits, now.Add(time.Hour+time.Second)); err != nil {
		t.Fatalf("a creation in the next window: %v", err)
	}
}
