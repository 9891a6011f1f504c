package store_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/store"
)

// A sandbox's usage record is keyed by its ledger entry: written twice it
// counts once, a new entry of the same name counts again. A tenant's
// records are found by start time in [from, to), across the shards, and
// no other tenant's are.
func TestSandboxUsageRecords(t *testing.T) {
	st, _ := newStore(t)
	ctx := testCtx(t)
	t0 := time.UnixMilli(time.Now().UnixMilli()).Add(-time.Hour)
	rec := func(name, tenant string, start time.Time, secs float64) store.SandboxUsage {
		return store.SandboxUsage{Name: name, OwnerKind: "session", Tenant: tenant, Provider: "local", MemoryMB: 512,
			RunningAt: start, TerminatedAt: start.Add(time.Duration(secs * float64(time.Second)))}
	}
	put := func(u store.SandboxUsage) {
		t.Helper()
		if err := st.PutSandboxUsage(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	// Twenty sandboxes over the shards, one written three times (a retried
	// release), one name used for two entries.
	for i := range 20 {
		put(rec(fmt.Sprintf("sb-%d", i), "acme", t0.Add(time.Duration(i)*time.Second), 1.5))
	}
	put(rec("sb-3", "acme", t0.Add(3*time.Second), 1.5))
	put(rec("sb-3", "acme", t0.Add(3*time.Second), 1.5))
	put(rec("sb-3", "acme", t0.Add(30*time.Second), 2))
	put(rec("other", "globex", t0, 9))

	recs, truncated, err := st.TenantSandboxUsageBetween(ctx, "acme", t0, t0.Add(time.Minute), 0)
	if err != nil || truncated || len(recs) != 21 {
		t.Fatalf("records: %d, truncated %v, %v", len(recs), truncated, err)
	}
	var total store.Usage
	for i, r := range recs {
		if i > 0 && r.RunningAt.Before(recs[i-1].RunningAt) {
			t.Fatalf("not oldest first: %v after %v", r.RunningAt, recs[i-1].RunningAt)
		}
		if r.Tenant != "acme" || r.OwnerKind != "session" || r.MemoryMB != 512 {
			t.Fatalf("record %+v", r)
		}
		total.Add(r.Usage())
	}
	if got := total.SandboxSeconds["local/512"]; got != 20*1.5+2 {
		t.Fatalf("seconds %v, want %v", got, 20*1.5+2)
	}
	// [from, to): a start at to is out, one at from is in.
	recs, _, _ = st.TenantSandboxUsageBetween(ctx, "acme", t0.Add(time.Second), t0.Add(3*time.Second), 0)
	if len(recs) != 2 || recs[0].Name != "sb-1" || recs[1].Name != "sb-2" {
		t.Fatalf("range: %+v", recs)
	}
	if recs, truncated, _ = st.TenantSandboxUsageBetween(ctx, "acme", t0, t0.Add(time.Minute), 5); len(recs) != 5 || !truncated || recs[4].Name != "sb-4" {
		t.Fatalf("at most 5: %d %v", len(recs), truncated)
	}
	if recs, _, _ = st.TenantSandboxUsageBetween(ctx, "globex", t0, t0.Add(time.Minute), 0); len(recs) != 1 || recs[0].Seconds() != 9 {
		t.Fatalf("globex: %+v", recs)
	}
	// The ledger does not see usage records.
	if live, err := st.LedgerListLive(ctx, time.Now().AddDate(1, 0, 0), 0); err != nil || len(live) != 0 {
		t.Fatalf("live ledger entries %v, %v", live, err)
	}
	if err := st.PutSandboxUsage(ctx, store.SandboxUsage{Name: "x", Provider: "local", RunningAt: t0, TerminatedAt: t0}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("no tenant: %v", err)
	}
}

// A usage record keeps the entry's bytes out and execs; one without
// measured bytes reads back without them.
func TestSandboxUsageKeepsBytesOutAndExecs(t *testing.T) {
	st, _ := newStore(t)
	ctx := testCtx(t)
	t0 := time.UnixMilli(time.Now().UnixMilli()).Add(-time.Hour)
	sent := int64(4096)
	for _, u := range []store.SandboxUsage{
		{Name: "sbx-a", OwnerKind: "tenant", Tenant: "acme", Provider: "local", RunningAt: t0, TerminatedAt: t0.Add(time.Second), BytesOut: &sent, Execs: 2},
		{Name: "sbx-b", OwnerKind: "tenant", Tenant: "acme", Provider: "sandy", RunningAt: t0.Add(time.Second), TerminatedAt: t0.Add(2 * time.Second)},
	} {
		if err := st.PutSandboxUsage(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	recs, _, err := st.TenantSandboxUsageBetween(ctx, "acme", t0, t0.Add(time.Minute), 0)
	if err != nil || len(recs) != 2 {
		t.Fatalf("records %+v, %v", recs, err)
	}
	if recs[0].BytesOut == nil || *recs[0].BytesOut != sent || recs[0].Execs != 2 || recs[1].BytesOut != nil || recs[1].Execs != 0 {
		t.Fatalf("records %+v %+v", recs[0], recs[1])
	}
	var total store.Usage
	for _, r := range recs {
		total.Add(r.Usage())
	}
	if n, ok := total.TotalBytesOut(); !ok || n != sent || len(total.BytesOut) != 1 || total.Execs != 2 {
		t.Fatalf("total %+v", total)
	}
}
