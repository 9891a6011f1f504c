package sandboxes_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/quota"
	"github.com/sandstep/sandstep/internal/service/sandboxes"
	"github.com/sandstep/sandstep/internal/service/store"
)

// Every Acquire is admitted by its tenant's quotas: a refusal is a
// *store.LimitError naming the quota, nothing is created, and the ledger
// entry written ahead is closed; a release gives the slot back.
func TestAcquireIsAdmittedByTenantQuotas(t *testing.T) {
	e := newEnv(t)
	cfg, err := config.Parse([]byte("[quotas]\nconcurrent_sandboxes = 1\nsandbox_creations_per_hour = 2\nmax_sandbox_ttl = \"30m\"\n"), "config.toml", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e.m = sandboxes.New(sandboxes.Options{Store: e.st, Provider: e.prov, ProviderName: "local", Deployment: "test", Logger: e.log, Quotas: quota.New(e.st, &cfg.Quotas)})
	ctx := ctxFor(t)
	refused := func(name, limit string, lifetime time.Duration) {
		t.Helper()
		before := e.prov.creates
		_, err := e.m.Acquire(ctx, sandboxes.Request{Owner: sandboxes.SessionOwner("s-"+name, "acme"), Spec: spec(name, lifetime)})
		var le *store.LimitError
		if !errors.As(err, &le) || le.Limit != limit || le.Scope != "tenant" {
			t.Fatalf("acquire %s: %v, want the %s quota", name, err, limit)
		}
		if e.prov.creates != before {
			t.Fatalf("acquire %s was refused but the provider was asked", name)
		}
		if got := e.entry(t, name); got.State != store.LedgerTerminated {
			t.Fatalf("the refused %s's entry is %s", name, got.State)
		}
	}

	first := e.acquire(t, sandboxes.SessionOwner("s-a", "acme"), "qa")
	refused("qb", store.QuotaConcurrentSandboxes, 10*time.Minute)
	refused("qt", store.QuotaMaxSandboxTTL, time.Hour)
	// Another tenant has its own slots; a retried Acquire keeps its one.
	e.acquire(t, sandboxes.SessionOwner("s-g", "globex"), "qg")
	if lease, err := e.m.Acquire(ctx, sandboxes.Request{Owner: sandboxes.SessionOwner("s-a", "acme"), Spec: spec("qa", 10*time.Minute)}); err != nil || !lease.Adopted {
		t.Fatalf("a retried acquire: %+v, %v", lease, err)
	}

	if err := e.m.Release(ctx, sandboxes.SessionOwner("s-a", "acme"), sandboxes.Ref{Name: "qa", ID: first.ID}, "done"); err != nil {
		t.Fatal(err)
	}
	second := e.acquire(t, sandboxes.SessionOwner("s-b", "acme"), "qb")
	if err := e.m.Release(ctx, sandboxes.SessionOwner("s-b", "acme"), sandboxes.Ref{Name: "qb", ID: second.ID}, "done"); err != nil {
		t.Fatal(err)
	}
	// Two creations this hour: the third is refused, and its slot is not
	// kept.
	refused("qc", store.QuotaSandboxCreationsPerHour, 10*time.Minute)
	holders, err := e.st.SlotHolders(ctx, "acme", store.QuotaConcurrentSandboxes)
	if err != nil || len(holders) != 0 {
		t.Fatalf("acme's slots after every release: %v, %v", holders, err)
	}
}
