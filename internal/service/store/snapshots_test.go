package store_test

import (
	"maps"
	"testing"
	"time"
)

// The record of a deployment's dependency snapshots: a snapshot found
// again keeps its first time, one built again takes the new time, and a
// deletion forgets a snapshot only while its time is the one it read, so a
// rebuild racing the deletion stays recorded. Deployments keep apart.
func TestSnapshotRecord(t *testing.T) {
	st, _ := newStore(t)
	ctx := testCtx(t)
	t0 := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	want := func(dep string, w map[string]time.Time) {
		t.Helper()
		got, err := st.Snapshots(ctx, dep)
		must(err)
		if !maps.EqualFunc(got, w, time.Time.Equal) {
			t.Fatalf("%s: snapshots %v, want %v", dep, got, w)
		}
	}
	want("prod", map[string]time.Time{})
	must(st.RecordSnapshot(ctx, "prod", "deps-a", t0, true))
	must(st.RecordSnapshot(ctx, "prod", "deps-a", t0.Add(time.Hour), false)) // found by another process
	must(st.RecordSnapshot(ctx, "prod", "deps-b", t0.Add(2*time.Hour), true))
	must(st.RecordSnapshot(ctx, "staging", "deps-c", t0, true))
	want("prod", map[string]time.Time{"deps-a": t0, "deps-b": t0.Add(2 * time.Hour)})
	want("staging", map[string]time.Time{"deps-c": t0})

	// A process builds deps-a again after the collector read it and
	// before it forgot it: the rebuilt snapshot stays recorded.
	must(st.RecordSnapshot(ctx, "prod", "deps-a", t0.Add(3*time.Hour), true))
	must(st.ForgetSnapshot(ctx, "prod", "deps-a", t0))
	want("prod", map[string]time.Time{"deps-a": t0.Add(3 * time.Hour), "deps-b": t0.Add(2 * time.Hour)})

	must(st.ForgetSnapshot(ctx, "prod", "deps-a", t0.Add(3*time.Hour)))
	must(st.ForgetSnapshot(ctx, "prod", "deps-x", t0)) // never recorded
	want("prod", map[string]time.Time{"deps-b": t0.Add(2 * time.Hour)})
	want("staging", map[string]time.Time{"deps-c": t0})
}
