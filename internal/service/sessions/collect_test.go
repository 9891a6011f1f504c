package sessions_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/sessions"
	"github.com/sandstep/sandstep/providers"
)

// withDeps is the env's configuration with another dependency list: a
// process still on an older (or already on a newer) config.toml.
func (e *env) serviceWith(t *testing.T, packages ...string) *sessions.Service {
	t.Helper()
	cfg := *e.cfg
	cfg.Sessions.Dependencies = nil
	for _, p := range packages {
		cfg.Sessions.Dependencies = append(cfg.Sessions.Dependencies, config.SessionDependency{Package: p})
	}
	svc, err := sessions.New(sessions.Options{Config: &cfg, Store: e.st, Provider: e.stack.Provider, Logger: slog.New(slog.NewJSONHandler(e.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = svc.Shutdown(ctx)
	})
	return svc
}

// snapshotsOf lists the deployment's dependency snapshots by slug.
func (e *env) snapshotsOf(t *testing.T, deployment string) []string {
	t.Helper()
	snaps, err := e.stack.Provider.ListSnapshots(ctxFor(t), map[string]string{
		sessions.LabelSnapshot: sessions.SnapshotKindDependencies, providers.LabelDeployment: deployment,
	})
	if err != nil {
		t.Fatal(err)
	}
	var slugs []string
	for _, s := range snaps {
		slugs = append(slugs, s.Slug)
	}
	slices.Sort(slugs)
	return slugs
}

// The dependency list changes twice: the two snapshots it replaced stay
// for snapshot_grace after the current one was built, then go, and exactly
// the current one is left. Another deployment's snapshot on the same
// provider is never touched. On the local provider the collector finds
// the deployment's snapshots by listing them; on Deno, which cannot list
// snapshots by label, by the store's record of what it built (TestOnDeno).
func TestChangedDependenciesLeaveOneSnapshot(t *testing.T) {
	changedDependenciesLeaveOneSnapshot(t, envConfig{})
}

func changedDependenciesLeaveOneSnapshot(t *testing.T, ec envConfig) {
	pkgA := fixturePackage(t, "sandstep-fixture-a")
	pkgB := fixturePackage(t, "sandstep-fixture-b")
	ec.deps, ec.sessions = depsTable(pkgA, pkgB), `snapshot_grace = "1h"`
	e := newEnv(t, ec)
	ctx := ctxFor(t)
	first, second := e.serviceWith(t, pkgA), e.serviceWith(t, pkgB)
	for _, svc := range []*sessions.Service{first, second, e.stack.Sessions} {
		if err := svc.EnsureSnapshot(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cfg := *e.cfg
	cfg.Provider.Deployment = "production"
	cfg.Sessions.Dependencies = []config.SessionDependency{{Package: pkgA}}
	theirs, err := sessions.New(sessions.Options{Config: &cfg, Store: e.st, Provider: e.stack.Provider, Logger: slog.New(slog.NewJSONHandler(e.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := theirs.EnsureSnapshot(ctx); err != nil {
		t.Fatal(err)
	}
	current := e.stack.Sessions.SnapshotSlug()
	ours := []string{first.SnapshotSlug(), second.SnapshotSlug(), current}
	slices.Sort(ours)
	all := append(slices.Clone(ours), theirs.SnapshotSlug())
	if len(slices.Compact(slices.Sorted(slices.Values(all)))) != 4 {
		t.Fatalf("four dependency lists, slugs %v", all)
	}
	// exist says which of all the provider has, as it answers for each.
	exist := func() []string {
		t.Helper()
		var have []string
		for _, slug := range all {
			_, err := e.stack.Provider.GetSnapshot(ctx, slug)
			if err == nil {
				have = append(have, slug)
			} else if !providers.IsNotFound(err) {
				t.Fatal(err)
			}
		}
		slices.Sort(have)
		return have
	}
	want := func(slugs ...string) []string { slices.Sort(slugs); return slugs }
	if got := exist(); !slices.Equal(got, want(all...)) {
		t.Fatalf("snapshots = %v, want %v", got, all)
	}
	listed := ec.deno == nil
	if listed {
		if got := e.snapshotsOf(t, "local"); !slices.Equal(got, ours) {
			t.Fatalf("listed snapshots = %v, want %v", got, ours)
		}
	}

	pass := func(after time.Duration) int {
		t.Helper()
		e.stack.Reaper.Now = func() time.Time { return time.Now().Add(after) }
		c, err := e.stack.Reaper.Pass(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return c.SnapshotsDeleted
	}
	if n := pass(59 * time.Minute); n != 0 {
		t.Fatalf("a pass within the grace period deleted %d snapshots", n)
	}
	if got := exist(); !slices.Equal(got, want(all...)) {
		t.Fatalf("within the grace period: snapshots = %v, want %v", got, all)
	}
	if n := pass(61 * time.Minute); n != 2 {
		t.Fatalf("a pass after the grace period deleted %d snapshots, want 2", n)
	}
	if got := exist(); !slices.Equal(got, want(current, theirs.SnapshotSlug())) {
		t.Fatalf("after the grace period: snapshots = %v, want only the current %s and the other deployment's %s", got, current, theirs.SnapshotSlug())
	}
	if listed {
		if got := e.snapshotsOf(t, "production"); !slices.Equal(got, []string{theirs.SnapshotSlug()}) {
			t.Fatalf("another deployment's snapshots = %v, want its own kept", got)
		}
	}
	// The current dependencies still work, and more passes change nothing.
	wantOK(t, e.run(tokenAcme, "after", "javascript", "require('sandstep-fixture-a').answer + require('sandstep-fixture-b').answer"))
	if n := pass(3 * time.Hour); n != 0 {
		t.Fatalf("a later pass deleted %d snapshots", n)
	}
	if got := exist(); !slices.Equal(got, want(current, theirs.SnapshotSlug())) {
		t.Fatalf("after more passes: snapshots = %v", got)
	}
}

// Runs of a process still on the old dependency list race the reaper's
// passes, well past the grace period: the old snapshot is never deleted
// while a sandbox booted from it lives, every run finds its dependencies,
// and once the old sessions are gone the snapshot goes too. A run whose
// sandbox create finds its snapshot deleted builds it again.
func TestSnapshotInUseIsNeverCollected(t *testing.T) {
	t.Run("listing sandboxes", func(t *testing.T) { snapshotInUse(t, false) })
	// A provider that cannot list sandboxes: the ledger alone says which
	// snapshot a sandbox uses.
	t.Run("ledger only", func(t *testing.T) { snapshotInUse(t, true) })
}

// noList is the local provider as one that cannot list sandboxes.
type noList struct{ providers.Provider }

func (p noList) Info(ctx context.Context) (providers.Info, error) {
	info, err := p.Provider.Info(ctx)
	info.Capabilities.ListByLabels = false
	return info, err
}

func (p noList) List(context.Context, providers.ListFilter) ([]providers.Sandbox, error) {
	return nil, providers.Errorf(providers.Unsupported, "list", "this provider cannot list")
}

func snapshotInUse(t *testing.T, ledgerOnly bool) {
	pkgA := fixturePackage(t, "sandstep-fixture-a")
	pkgB := fixturePackage(t, "sandstep-fixture-b")
	e := newEnv(t, envConfig{deps: depsTable(pkgB), sessions: `snapshot_grace = "1m"`})
	ctx := ctxFor(t)
	old := e.serviceWith(t, pkgA)
	if err := old.EnsureSnapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.stack.Sessions.EnsureSnapshot(ctx); err != nil {
		t.Fatal(err)
	}
	slug := old.SnapshotSlug()
	// Past the grace period, within the volume TTL and the sandbox idle
	// timeout: only the snapshot is due.
	later := func() time.Time { return time.Now().Add(2 * time.Minute) }
	e.stack.Reaper.Now = later
	pass := func() error {
		_, err := e.stack.Reaper.Pass(ctx)
		return err
	}
	if ledgerOnly {
		collector, err := sessions.New(sessions.Options{Config: e.cfg, Store: e.st, Provider: noList{e.stack.Provider}, Logger: slog.New(slog.NewJSONHandler(e.logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		pass = func() error {
			_, err := collector.CollectSnapshots(ctx, later())
			return err
		}
	}
	const rounds = 6
	for i := range rounds {
		id := "old" + string(rune('a'+i))
		var wg sync.WaitGroup
		var run sessions.Run
		var runErr error
		wg.Go(func() {
			run, runErr = old.Run(ctx, "acme", id, sessions.RunRequest{Language: "javascript",
				Code: "await new Promise(r => setTimeout(r, 150)); require('sandstep-fixture-a').answer"})
		})
		// Passes while the run starts its sandbox and runs in it.
		for range 4 {
			if err := pass(); err != nil {
				t.Fatalf("round %d: pass: %v", i, err)
			}
		}
		wg.Wait()
		if runErr != nil || run.Result == nil || !run.Result.Success || strings.TrimSpace(string(run.Result.Result)) != "42" {
			t.Fatalf("round %d: run = %+v, %v", i, run.Result, runErr)
		}
		// The session's sandbox still lives: its snapshot stays, whatever
		// the passes did while it was created.
		if err := pass(); err != nil {
			t.Fatal(err)
		}
		for _, sb := range e.liveSandboxes() {
			if _, err := e.stack.Provider.GetSnapshot(ctx, sb.Snapshot); sb.Snapshot != "" && err != nil {
				t.Fatalf("round %d: sandbox %s runs from snapshot %s, which is gone: %v", i, sb.ID, sb.Snapshot, err)
			}
		}
		if _, err := e.stack.Provider.GetSnapshot(ctx, slug); err != nil {
			t.Fatalf("round %d: the snapshot of a live session's sandbox was deleted: %v", i, err)
		}
		if _, err := old.Delete(ctx, "acme", id); err != nil {
			t.Fatal(err)
		}
		if i == rounds/2 {
			// Gone before the next run's create: that run builds it again.
			if err := e.stack.Provider.DeleteSnapshot(ctx, slug); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !strings.Contains(e.logs.String(), "the dependency snapshot is gone; building it again") {
		t.Fatal("no run found its snapshot deleted and built it again")
	}
	// No sandbox uses the old snapshot any more: the next pass deletes it.
	if err := pass(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.stack.Provider.GetSnapshot(ctx, slug); !providers.IsNotFound(err) {
		t.Fatalf("the unused old snapshot is still there (%v)", err)
	}
	if got := e.snapshotsOf(t, "local"); !slices.Equal(got, []string{e.stack.Sessions.SnapshotSlug()}) {
		t.Fatalf("snapshots = %v, want only the current one", got)
	}
}
