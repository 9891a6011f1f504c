package sandboxes_test

import (
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/sandboxes"
)

// Closing a ledger entry records the sandbox's time for owners that are
// not jobs (a job's Cleanup counts its own): once per entry, however
// often it is released; a sandbox that never ran records nothing.
func TestClosingAnEntryRecordsUsageOfSandboxesNoJobOwns(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	owners := map[string]sandboxes.Owner{
		"u-session": sandboxes.SessionOwner("s-1", "acme"),
		"u-direct":  sandboxes.TenantOwner("acme"),
		"u-child":   sandboxes.SandboxOwner("u-direct", "acme"),
		"u-job":     sandboxes.JobOwner("j-1", "acme"),
	}
	ids := map[string]string{}
	for name, o := range owners {
		ids[name] = e.acquire(t, o, name).ID
	}
	time.Sleep(20 * time.Millisecond)
	for name, o := range owners {
		for range 3 {
			if err := e.m.Release(ctx, o, sandboxes.Ref{Name: name, ID: ids[name]}, "done"); err != nil {
				t.Fatal(err)
			}
		}
	}
	recs, _, err := e.st.TenantSandboxUsageBetween(ctx, "acme", time.Now().Add(-time.Hour), time.Now().Add(time.Minute), 0)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, r := range recs {
		if _, dup := kinds[r.Name]; dup {
			t.Fatalf("%s recorded twice", r.Name)
		}
		kinds[r.Name] = r.OwnerKind
		ledger := e.entry(t, r.Name)
		if !r.RunningAt.Equal(ledger.RunningAt) || !r.TerminatedAt.Equal(ledger.TerminatedAt) || r.Seconds() <= 0 || r.Provider != "local" {
			t.Errorf("record %+v, ledger %+v", r, ledger)
		}
	}
	want := map[string]string{"u-session": "session", "u-direct": "tenant", "u-child": "sandbox"}
	if len(kinds) != len(want) || kinds["u-session"] != want["u-session"] || kinds["u-direct"] != want["u-direct"] || kinds["u-child"] != want["u-child"] {
		t.Fatalf("records by name %v, want %v (no job's)", kinds, want)
	}
}
