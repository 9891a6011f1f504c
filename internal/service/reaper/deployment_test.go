package reaper_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/reaper"
	"github.com/sandstep/sandstep/internal/service/sandboxes"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
	"github.com/sandstep/sandstep/providers"
)

// Two stacks (their own tables, their own deployment ids) share one
// provider, as staging and production share a provider account: each
// reaper terminates only its own orphans, never the other stack's
// sandboxes, live or orphaned, nor those made before sandboxes carried a
// deployment id.
func TestTwoDeploymentsReapOnlyTheirOwn(t *testing.T) {
	e := newEnv(t) // stack "test": its tables, the one provider
	ctx := ctxFor(t)
	other := testddb.ForTests(t)
	stB := store.New(other.Client, other.Prefix)
	rA := e.r
	rB := &reaper.Reaper{Store: stB, Logger: e.log, Sandboxes: sandboxes.New(sandboxes.Options{
		Store: stB, Provider: e.prov, ProviderName: "local", Deployment: "staging", Logger: e.log,
	})}

	// A live sandbox of each stack, acquired as sandstep acquires them:
	// the other stack's ledger does not know it.
	acquire := func(m *sandboxes.Manager, name string) providers.Sandbox {
		t.Helper()
		lease, err := m.Acquire(ctx, sandboxes.Request{
			Owner: sandboxes.SessionOwner("s-"+name, "acme"),
			Spec:  providers.CreateSpec{Name: name, Labels: map[string]string{providers.LabelSession: "s1"}, Lifetime: 10 * time.Minute},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.prov.Terminate(ctx, lease.Sandbox.ID) })
		if got := lease.Sandbox.Labels[providers.LabelDeployment]; got != m.Deployment() {
			t.Fatalf("sandbox %s is labelled deployment %q, want %q", name, got, m.Deployment())
		}
		return lease.Sandbox
	}
	liveA := acquire(rA.Sandboxes, "live-a")
	liveB := acquire(rB.Sandboxes, "live-b")
	// An orphan of each (its ledger lost it), and one from before
	// deployment ids, which neither stack can tell is its own.
	orphanA := e.create(t, "orphan-a", "", sandboxes.Labels("test"), time.Time{})
	orphanB := e.create(t, "orphan-b", "", sandboxes.Labels("staging"), time.Time{})
	legacy := e.create(t, "legacy", "", map[string]string{providers.LabelOwner: "sandstep"}, time.Time{})

	check := func(pass string, dead, alive []providers.Sandbox) {
		t.Helper()
		for _, sb := range dead {
			if e.alive(t, sb.ID) {
				t.Errorf("after %s: %s still runs", pass, sb.Name)
			}
		}
		for _, sb := range alive {
			if !e.alive(t, sb.ID) {
				t.Errorf("after %s: %s was terminated", pass, sb.Name)
			}
		}
	}
	c, err := rA.Pass(ctx)
	if err != nil || c.Orphans != 1 || c.LedgerReaped != 0 || c.LedgerGone != 0 {
		t.Fatalf("stack test's pass: %+v, %v; want its one orphan", c, err)
	}
	check("stack test's pass", []providers.Sandbox{orphanA}, []providers.Sandbox{liveA, liveB, orphanB, legacy})

	c, err = rB.Pass(ctx)
	if err != nil || c.Orphans != 1 || c.LedgerReaped != 0 || c.LedgerGone != 0 {
		t.Fatalf("stack staging's pass: %+v, %v; want its one orphan", c, err)
	}
	check("stack staging's pass", []providers.Sandbox{orphanB}, []providers.Sandbox{liveA, liveB, legacy})

	// Passes again change nothing.
	for _, r := range []*reaper.Reaper{rA, rB} {
		if c, err := r.Pass(ctx); err != nil || c.Total() != 0 {
			t.Fatalf("another pass: %+v, %v; want nothing done", c, err)
		}
	}
	check("more passes", nil, []providers.Sandbox{liveA, liveB, legacy})
}

// Names are the tenant's job or session keys, so two stacks with the same
// tenants can ask one provider for the same name. The stack that comes
// second is refused (it never adopts the other's sandbox), and neither its
// cleanup of that name nor its reaper's, for an entry whose create never
// answered, terminates the other stack's sandbox.
func TestASandboxOfTheSameNameIsNeverTheOtherStacks(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	other := testddb.ForTests(t)
	stB := store.New(other.Client, other.Prefix)
	mA := e.r.Sandboxes
	mB := sandboxes.New(sandboxes.Options{Store: stB, Provider: e.prov, ProviderName: "local", Deployment: "staging", Logger: e.log})

	owner := sandboxes.JobOwner("job-same", "acme")
	spec := providers.CreateSpec{Name: "job-same", Lifetime: 10 * time.Minute}
	lease, err := mB.Acquire(ctx, sandboxes.Request{Owner: owner, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	theirs := lease.Sandbox
	t.Cleanup(func() { _ = e.prov.Terminate(context.Background(), theirs.ID) })

	got, err := mA.Acquire(ctx, sandboxes.Request{Owner: owner, Spec: spec})
	if err == nil || got.Sandbox.ID == theirs.ID || !strings.Contains(err.Error(), "another deployment") {
		t.Fatalf("stack test's acquire of the name = %+v, %v; want a refusal naming the other deployment", got, err)
	}
	if _, err := mA.ReleaseOwner(ctx, owner, "job ended"); err != nil {
		t.Fatal(err)
	}
	if !e.alive(t, theirs.ID) {
		t.Fatal("stack test's release of its job terminated stack staging's sandbox")
	}

	// An entry whose create never answered (the process died): the pass
	// looks for its sandbox by name, among its own deployment's only.
	if _, err := e.st.LedgerBegin(ctx, store.LedgerEntry{Name: "job-lost", Provider: "local", Owner: sandboxes.JobOwner("job-lost", "acme").String(),
		Tenant: "acme", Deadline: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	lease, err = mB.Acquire(ctx, sandboxes.Request{Owner: sandboxes.JobOwner("job-lost", "acme"), Spec: providers.CreateSpec{Name: "job-lost", Lifetime: 10 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	theirLost := lease.Sandbox
	t.Cleanup(func() { _ = e.prov.Terminate(context.Background(), theirLost.ID) })
	e.r.Now = func() time.Time { return time.Now().Add(time.Hour) }
	c, err := e.r.Pass(ctx)
	if err != nil || c.LedgerReaped != 1 {
		t.Fatalf("stack test's pass: %+v, %v; want its never-confirmed entry closed", c, err)
	}
	if st := e.ledgerState(t, "job-lost"); st != store.LedgerTerminated {
		t.Fatalf("stack test's entry is %s", st)
	}
	if !e.alive(t, theirLost.ID) || !e.alive(t, theirs.ID) {
		t.Fatal("stack test's pass terminated a sandbox of stack staging")
	}
}
