package sandboxes_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/providerhost"
	"github.com/sandstep/sandstep/internal/service/sandboxes"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/testbin"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
	"github.com/sandstep/sandstep/providers"
)

var pluginDir string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sandstep-sandboxes-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if pluginDir, err = testbin.Build(dir, testbin.LocalPlugin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return testddb.RunTests(m)
}

// faulty is the real local provider with faults a test arms: hooks run
// around Create, so a test sees what the ledger holds while the provider is
// asked, and can make the create fail or lose its answer.
type faulty struct {
	providers.Provider
	mu sync.Mutex
	// before runs before the real create; an error fails the create
	// without making a sandbox.
	before func(spec providers.CreateSpec) error
	// loseAnswer makes the sandbox but answers Unavailable, as a plugin
	// that died mid-call does.
	loseAnswer bool
	// unmeasured answers Get without the network usage, as a provider
	// that does not count traffic does.
	unmeasured bool
	creates    int
}

func (f *faulty) Get(ctx context.Context, id string) (providers.Sandbox, error) {
	sb, err := f.Provider.Get(ctx, id)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unmeasured {
		sb.Network = providers.NetworkUsage{}
	}
	return sb, err
}

func (f *faulty) Create(ctx context.Context, spec providers.CreateSpec) (providers.Sandbox, error) {
	f.mu.Lock()
	before, lose := f.before, f.loseAnswer
	f.creates++
	f.mu.Unlock()
	if before != nil {
		if err := before(spec); err != nil {
			return providers.Sandbox{}, err
		}
	}
	sb, err := f.Provider.Create(ctx, spec)
	if err == nil && lose {
		return providers.Sandbox{}, providers.Errorf(providers.Unavailable, "create", "the plugin exited during the call")
	}
	return sb, err
}

type env struct {
	st   *store.Store
	prov *faulty
	m    *sandboxes.Manager
	log  *slog.Logger
}

// newEnv gives a test the real local provider plugin and its own tables on
// DynamoDB Local.
func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, "")
}

// newEnvWith is newEnv with more config (TOML lines after [provider]).
func newEnvWith(t *testing.T, extra string) *env {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("bwrap is missing (Debian package bubblewrap)")
		}
		t.Skip("bwrap is missing (Debian package bubblewrap)")
	}
	db := testddb.ForTests(t)
	cfg, err := config.Parse([]byte(fmt.Sprintf("[server]\ndata_dir = %q\n[provider]\nplugin_dir = %q\n", t.TempDir(), pluginDir)+extra), "config.toml", ".")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := providerhost.Open(context.Background(), cfg, "", log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	st := store.New(db.Client, db.Prefix)
	f := &faulty{Provider: p}
	return &env{st: st, prov: f, log: log, m: sandboxes.New(sandboxes.Options{Store: st, Provider: f, ProviderName: "local", Deployment: "test", Logger: log})}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

var ours = sandboxes.Labels("test")

func spec(name string, lifetime time.Duration) providers.CreateSpec {
	return providers.CreateSpec{Name: name, Labels: ours, Lifetime: lifetime}
}

// acquire gets a sandbox that the test's end terminates whatever happens.
func (e *env) acquire(t *testing.T, owner sandboxes.Owner, name string) providers.Sandbox {
	t.Helper()
	lease, err := e.m.Acquire(ctxFor(t), sandboxes.Request{Owner: owner, Spec: spec(name, 10*time.Minute)})
	if err != nil {
		t.Fatalf("acquire %s: %v", name, err)
	}
	t.Cleanup(func() { _ = e.prov.Provider.Terminate(context.Background(), lease.Sandbox.ID) })
	return lease.Sandbox
}

func (e *env) alive(t *testing.T, id string) bool {
	t.Helper()
	sb, err := e.prov.Get(ctxFor(t), id)
	if err != nil && !providers.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil && sb.State == providers.StateRunning
}

// liveNamed lists the provider's live sandboxes named name.
func (e *env) liveNamed(t *testing.T, name string) []providers.Sandbox {
	t.Helper()
	list, err := e.prov.List(ctxFor(t), providers.ListFilter{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	var live []providers.Sandbox
	for _, sb := range list {
		if sb.Name == name && sb.State == providers.StateRunning {
			live = append(live, sb)
		}
	}
	return live
}

func (e *env) entry(t *testing.T, name string) store.LedgerEntry {
	t.Helper()
	en, err := e.m.Find(ctxFor(t), name)
	if err != nil {
		t.Fatalf("find %s: %v", name, err)
	}
	return en
}

// The ledger entry is written before the provider is asked, with the owner,
// its parent and tenant; once the create answers it is running under the
// provider's id.
func TestAcquireWritesTheEntryFirst(t *testing.T) {
	e := newEnv(t)
	parent := sandboxes.JobOwner("j-parent", "acme")
	owner := sandboxes.Owner{Kind: "sandbox", Key: "sb-child", Tenant: "acme", Parent: &parent}
	var during store.LedgerEntry
	e.prov.before = func(spec providers.CreateSpec) error {
		var err error
		during, err = e.st.LedgerGet(context.Background(), spec.Name)
		return err
	}
	sb := e.acquire(t, owner, "child-1")
	if during.State != store.LedgerCreating || during.Owner != "sandbox:sb-child" || during.Parent != "job:j-parent" ||
		during.Tenant != "acme" || during.Provider != "local" || during.ProviderID != "" {
		t.Fatalf("entry while the provider was asked = %+v", during)
	}
	if during.Deadline.Before(time.Now().Add(10*time.Minute)) || during.Deadline.After(time.Now().Add(12*time.Minute)) {
		t.Fatalf("deadline %v, want the lifetime and a minute from now", during.Deadline)
	}
	got := e.entry(t, "child-1")
	if got.State != store.LedgerRunning || got.ProviderID != sb.ID || got.Parent != "job:j-parent" {
		t.Fatalf("entry after acquire = %+v", got)
	}
	if !e.alive(t, sb.ID) {
		t.Fatal("the acquired sandbox does not run")
	}
}

// A create the provider refuses leaves the write-ahead entry closed, and
// the error says it was the create.
func TestAcquireCreateFails(t *testing.T) {
	e := newEnv(t)
	var during store.LedgerEntry
	e.prov.before = func(spec providers.CreateSpec) error {
		during, _ = e.st.LedgerGet(context.Background(), spec.Name)
		return providers.Errorf(providers.ResourceExhausted, "create", "quota reached")
	}
	_, err := e.m.Acquire(ctxFor(t), sandboxes.Request{Owner: sandboxes.JobOwner("j-1", "acme"), Spec: spec("j-1", time.Minute)})
	var ce *sandboxes.CreateError
	if !errors.As(err, &ce) || providers.CodeOf(err) != providers.ResourceExhausted || ce.Name != "j-1" {
		t.Fatalf("acquire = %v, want a CreateError with the provider's code", err)
	}
	if during.State != store.LedgerCreating || during.Owner != "job:j-1" {
		t.Fatalf("entry while the provider was asked = %+v; it must exist before the create", during)
	}
	if got := e.entry(t, "j-1"); got.State != store.LedgerTerminated || got.Reason != "create failed" {
		t.Fatalf("entry after the failed create = %+v", got)
	}
}

// A create that made the sandbox but lost its answer: the sandbox is found
// by name and terminated, and the entry closed.
func TestAcquireLostAnswerLeavesNothing(t *testing.T) {
	e := newEnv(t)
	e.prov.loseAnswer = true
	_, err := e.m.Acquire(ctxFor(t), sandboxes.Request{Owner: sandboxes.JobOwner("j-lost", "acme"), Spec: spec("j-lost", time.Minute)})
	if providers.CodeOf(err) != providers.Unavailable {
		t.Fatalf("acquire = %v, want Unavailable", err)
	}
	if live := e.liveNamed(t, "j-lost"); len(live) != 0 {
		t.Fatalf("sandboxes left running after the lost create: %+v", live)
	}
	if got := e.entry(t, "j-lost"); got.State != store.LedgerTerminated {
		t.Fatalf("entry = %+v", got)
	}
}

// Acquire is idempotent for an owner: a retry adopts the running sandbox;
// one that is gone is replaced under the same name; another owner cannot
// take the name.
func TestAcquireAdoptsARetry(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	owner := sandboxes.JobOwner("j-retry", "acme")
	first := e.acquire(t, owner, "j-retry")
	lease, err := e.m.Acquire(ctx, sandboxes.Request{Owner: owner, Spec: spec("j-retry", 10*time.Minute)})
	if err != nil || !lease.Adopted || lease.Sandbox.ID != first.ID {
		t.Fatalf("retry = %+v, %v; want the first sandbox adopted", lease, err)
	}
	if e.prov.creates != 1 {
		t.Fatalf("%d creates, want 1", e.prov.creates)
	}
	if _, err := e.m.Acquire(ctx, sandboxes.Request{Owner: sandboxes.SessionOwner("s-other", "acme"), Spec: spec("j-retry", time.Minute)}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("another owner's acquire of the name = %v, want ErrConflict", err)
	}
	// Gone behind the ledger's back (expired at the provider).
	if err := e.prov.Provider.Terminate(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	second := e.acquire(t, owner, "j-retry")
	if second.ID == first.ID || !e.alive(t, second.ID) {
		t.Fatalf("after the sandbox went: %+v", second)
	}
	if got := e.entry(t, "j-retry"); got.State != store.LedgerRunning || got.ProviderID != second.ID {
		t.Fatalf("entry = %+v", got)
	}
}

// A failed warm-up releases the sandbox and returns the hook's error.
func TestAcquireReadyFails(t *testing.T) {
	e := newEnv(t)
	var made providers.Sandbox
	boom := errors.New("dependencies did not install")
	_, err := e.m.Acquire(ctxFor(t), sandboxes.Request{
		Owner: sandboxes.SessionOwner("s-1", "acme"),
		Spec:  spec("ss-1", time.Minute),
		Ready: func(ctx context.Context, sb providers.Sandbox) error {
			made = sb
			res, err := e.prov.Exec(ctx, sb.ID, providers.ExecRequest{Argv: []string{"true"}, Timeout: 30 * time.Second})
			if err != nil || res.ExitCode != 0 {
				return fmt.Errorf("the sandbox did not answer: %v %+v", err, res)
			}
			return boom
		},
	})
	if !errors.Is(err, boom) {
		t.Fatalf("acquire = %v, want the hook's error", err)
	}
	if made.ID == "" || e.alive(t, made.ID) {
		t.Fatalf("sandbox %q still runs after its warm-up failed", made.ID)
	}
	if got := e.entry(t, "ss-1"); got.State != store.LedgerTerminated || got.Reason != "warm-up failed" {
		t.Fatalf("entry = %+v", got)
	}
}

// An owner released while its create runs (a cancelled job's cleanup)
// does not keep the sandbox the create made.
func TestAcquireReleasedDuringCreate(t *testing.T) {
	e := newEnv(t)
	owner := sandboxes.JobOwner("j-cancel", "acme")
	e.prov.before = func(spec providers.CreateSpec) error {
		_, err := e.m.ReleaseOwner(context.Background(), owner, "cancelled")
		return err
	}
	_, err := e.m.Acquire(ctxFor(t), sandboxes.Request{Owner: owner, Spec: spec("j-cancel", time.Minute)})
	if !errors.Is(err, sandboxes.ErrReleased) {
		t.Fatalf("acquire = %v, want ErrReleased", err)
	}
	if live := e.liveNamed(t, "j-cancel"); len(live) != 0 {
		t.Fatalf("the sandbox made after the release still runs: %+v", live)
	}
}

// A create refused with FailedPrecondition (the owner's volume is still
// mounted by a stray) is retried once after Unblock, even when Unblock
// released the owner's sandboxes, the new entry included.
func TestAcquireUnblockThenRetry(t *testing.T) {
	e := newEnv(t)
	owner := sandboxes.SessionOwner("s-busy", "acme")
	refused := false
	e.prov.before = func(spec providers.CreateSpec) error {
		if !refused {
			refused = true
			return providers.Errorf(providers.FailedPrecondition, "create", "volume ws-1 is mounted by another sandbox")
		}
		return nil
	}
	unblocked := 0
	lease, err := e.m.Acquire(ctxFor(t), sandboxes.Request{
		Owner: owner,
		Spec:  spec("ss-busy", time.Minute),
		Unblock: func(ctx context.Context) error {
			unblocked++
			_, err := e.m.ReleaseOwner(ctx, owner, "stray")
			return err
		},
	})
	if err != nil {
		t.Fatalf("acquire = %v", err)
	}
	t.Cleanup(func() { _ = e.prov.Provider.Terminate(context.Background(), lease.Sandbox.ID) })
	if unblocked != 1 || e.prov.creates != 2 {
		t.Fatalf("%d unblocks, %d creates; want 1 and 2", unblocked, e.prov.creates)
	}
	if got := e.entry(t, "ss-busy"); got.State != store.LedgerRunning || got.ProviderID != lease.Sandbox.ID {
		t.Fatalf("entry after the retried create = %+v", got)
	}
	if !e.alive(t, lease.Sandbox.ID) {
		t.Fatal("the sandbox of the retried create does not run")
	}
}

// Release ends one sandbox and closes its entry; releasing it again, or a
// sandbox the ledger never knew, is a no-op; by provider id alone it finds
// the owner's entry; another owner's sandbox is refused.
func TestReleaseIsIdempotent(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	owner := sandboxes.SessionOwner("s-rel", "acme")
	a := e.acquire(t, owner, "ss-a")
	b := e.acquire(t, owner, "ss-b")
	if err := e.m.Release(ctx, sandboxes.SessionOwner("s-thief", "acme"), sandboxes.Ref{Name: "ss-a"}, "x"); !errors.Is(err, sandboxes.ErrNotOwner) || !e.alive(t, a.ID) {
		t.Fatalf("another owner's release = %v", err)
	}
	for i := range 2 {
		if err := e.m.Release(ctx, owner, sandboxes.Ref{Name: "ss-a"}, "done"); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
	}
	if e.alive(t, a.ID) {
		t.Fatal("released sandbox still runs")
	}
	if got := e.entry(t, "ss-a"); got.State != store.LedgerTerminated || got.Reason != "done" {
		t.Fatalf("entry = %+v", got)
	}
	if err := e.m.Release(ctx, owner, sandboxes.Ref{Name: "never-made"}, "done"); err != nil {
		t.Fatalf("release of an unknown sandbox: %v", err)
	}
	if err := e.m.Release(ctx, owner, sandboxes.Ref{ID: b.ID}, "idle"); err != nil {
		t.Fatal(err)
	}
	if e.alive(t, b.ID) {
		t.Fatal("sandbox released by id still runs")
	}
	if got := e.entry(t, "ss-b"); got.State != store.LedgerTerminated || got.Reason != "idle" {
		t.Fatalf("entry released by id = %+v", got)
	}
	if err := e.m.Release(ctx, owner, sandboxes.Ref{ID: b.ID}, "idle"); err != nil {
		t.Fatalf("second release by id: %v", err)
	}
}

// ReleaseOwner ends everything an owner holds, strays carrying its labels
// included, and nothing of anyone else.
func TestReleaseOwnerTerminatesAll(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	labels := map[string]string{providers.LabelOwner: "sandstep", providers.LabelSession: "mine"}
	owner := sandboxes.SessionOwner("s-all", "acme")
	owner.Labels = labels
	other := sandboxes.SessionOwner("s-other", "acme")
	var mine []string
	for _, name := range []string{"ss-1", "ss-2"} {
		lease, err := e.m.Acquire(ctx, sandboxes.Request{Owner: owner, Spec: providers.CreateSpec{Name: name, Labels: labels, Lifetime: 10 * time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.prov.Provider.Terminate(context.Background(), lease.Sandbox.ID) })
		mine = append(mine, lease.Sandbox.ID)
	}
	// A stray: the ledger lost it, the provider still has it.
	strayLabels := maps.Clone(labels)
	strayLabels[providers.LabelDeployment] = "test"
	stray, err := e.prov.Provider.Create(ctx, providers.CreateSpec{Name: "ss-stray", Labels: strayLabels, Lifetime: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.prov.Provider.Terminate(context.Background(), stray.ID) })
	mine = append(mine, stray.ID)
	// Another deployment's session with the same tenant and id is not ours.
	strayLabels[providers.LabelDeployment] = "other-stack"
	elsewhere, err := e.prov.Provider.Create(ctx, providers.CreateSpec{Name: "ss-elsewhere", Labels: strayLabels, Lifetime: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.prov.Provider.Terminate(context.Background(), elsewhere.ID) })
	theirs := e.acquire(t, other, "ss-theirs")

	ended, err := e.m.ReleaseOwner(ctx, owner, "deleted")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ended)
	slices.Sort(mine)
	if !slices.Equal(ended, mine) {
		t.Fatalf("released %v, want %v", ended, mine)
	}
	for _, id := range mine {
		if e.alive(t, id) {
			t.Fatalf("sandbox %s of the owner still runs", id)
		}
	}
	if !e.alive(t, elsewhere.ID) {
		t.Fatal("ReleaseOwner ended another deployment's sandbox with the same session labels")
	}
	for _, name := range []string{"ss-1", "ss-2"} {
		if got := e.entry(t, name); got.State != store.LedgerTerminated || got.Reason != "deleted" {
			t.Fatalf("entry %s = %+v", name, got)
		}
	}
	if !e.alive(t, theirs.ID) || e.entry(t, "ss-theirs").State != store.LedgerRunning {
		t.Fatal("another owner's sandbox was released")
	}
	if again, err := e.m.ReleaseOwner(ctx, owner, "deleted"); err != nil || len(again) != 0 {
		t.Fatalf("second release = %v, %v; want nothing to do", again, err)
	}
}

// Reconcile reaps what is past its deadline or unneeded, and creates never
// confirmed; terminates sandboxes the ledger does not know; closes entries
// whose sandbox is gone; and keeps the rest.
func TestReconcileReapsDeadlinesAndOrphans(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	now := time.Now()
	short, err := e.m.Acquire(ctx, sandboxes.Request{Owner: sandboxes.JobOwner("j-short", "acme"), Spec: spec("j-short", time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.prov.Provider.Terminate(context.Background(), short.Sandbox.ID) })
	keep := e.acquire(t, sandboxes.JobOwner("j-keep", "acme"), "j-keep")
	done := e.acquire(t, sandboxes.JobOwner("j-done", "acme"), "j-done")
	vanished := e.acquire(t, sandboxes.JobOwner("j-vanished", "acme"), "j-vanished")
	if err := e.prov.Provider.Terminate(ctx, vanished.ID); err != nil {
		t.Fatal(err)
	}
	orphan, err := e.prov.Provider.Create(ctx, providers.CreateSpec{Name: "behind-the-ledger", Labels: ours, Lifetime: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.prov.Provider.Terminate(context.Background(), orphan.ID) })
	// A create whose caller died before the provider was asked.
	if _, err := e.st.LedgerBegin(ctx, store.LedgerEntry{Name: "j-died", Provider: "local", Owner: "job:j-died", Deadline: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	// Another provider's entry is not this one's to judge.
	if _, err := e.st.LedgerBegin(ctx, store.LedgerEntry{Name: "elsewhere", Provider: "sandy", Owner: "job:j-x", Deadline: now.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	var asked []string
	c, err := e.m.Reconcile(ctx, sandboxes.ReconcileOptions{
		Now:         now.Add(5 * time.Minute),
		CreateGrace: time.Minute,
		Unneeded: func(ctx context.Context, en store.LedgerEntry) (string, error) {
			asked = append(asked, en.Name)
			if en.Owner == "job:j-done" {
				return "job ended", nil
			}
			return "", nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Reaped: j-short (deadline), j-done (unneeded), j-died (never confirmed).
	if c != (sandboxes.Counts{Reaped: 3, Gone: 1, Orphans: 1}) {
		t.Fatalf("counts = %+v", c)
	}
	if slices.Contains(asked, "j-short") || slices.Contains(asked, "elsewhere") {
		t.Fatalf("the owner was asked about %v; past-deadline and foreign entries are decided without it", asked)
	}
	for _, id := range []string{short.Sandbox.ID, done.ID, orphan.ID} {
		if e.alive(t, id) {
			t.Fatalf("sandbox %s survived the pass", id)
		}
	}
	if !e.alive(t, keep.ID) || e.entry(t, "j-keep").State != store.LedgerRunning {
		t.Fatal("a needed sandbox was reaped")
	}
	for name, reason := range map[string]string{
		"j-short": "reaped: deadline passed", "j-done": "reaped: job ended",
		"j-died": "reaped: create never confirmed", "j-vanished": "gone",
	} {
		if got := e.entry(t, name); got.State != store.LedgerTerminated || got.Reason != reason {
			t.Fatalf("entry %s = %+v, want closed with %q", name, got, reason)
		}
	}
	if got := e.entry(t, "elsewhere"); got.State != store.LedgerCreating {
		t.Fatalf("another provider's entry = %+v", got)
	}
	// A second pass finds nothing to do.
	if c, err := e.m.Reconcile(ctx, sandboxes.ReconcileOptions{Now: now.Add(5 * time.Minute)}); err != nil || c != (sandboxes.Counts{}) {
		t.Fatalf("second pass = %+v, %v", c, err)
	}
}

// ReleaseAll ends every live sandbox of this provider, whoever owns it.
func TestReleaseAll(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	a := e.acquire(t, sandboxes.JobOwner("j-a", "acme"), "j-a")
	b := e.acquire(t, sandboxes.SessionOwner("s-b", "globex"), "ss-b")
	n, err := e.m.ReleaseAll(ctx, "shutdown")
	if err != nil || n != 2 {
		t.Fatalf("release all = %d, %v", n, err)
	}
	for _, sb := range []providers.Sandbox{a, b} {
		if e.alive(t, sb.ID) {
			t.Fatalf("sandbox %s still runs", sb.ID)
		}
	}
	if got := e.entry(t, "ss-b"); got.State != store.LedgerTerminated || got.Reason != "shutdown" {
		t.Fatalf("entry = %+v", got)
	}
}

// A name held by a live sandbox of another deployment sharing the
// provider (its labels say so) is never adopted nor terminated: the
// acquire fails with AlreadyExists, and the stranger keeps running.
func TestAcquireNeverAdoptsAStranger(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	stranger, err := e.prov.Provider.Create(ctx, providers.CreateSpec{Name: "j-shared", Labels: sandboxes.Labels("another-deployment"), Lifetime: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.prov.Provider.Terminate(context.Background(), stranger.ID) })
	_, err = e.m.Acquire(ctx, sandboxes.Request{Owner: sandboxes.JobOwner("j-shared", "acme"), Spec: spec("j-shared", time.Minute)})
	if providers.CodeOf(err) != providers.AlreadyExists {
		t.Fatalf("acquire of a name another deployment holds = %v, want AlreadyExists", err)
	}
	if !e.alive(t, stranger.ID) {
		t.Fatal("the other deployment's sandbox was terminated")
	}
	if got := e.entry(t, "j-shared"); got.State != store.LedgerTerminated || got.ProviderID == stranger.ID {
		t.Fatalf("entry = %+v; want it closed without the stranger's id", got)
	}
	if _, err := e.m.ReleaseOwner(ctx, sandboxes.JobOwner("j-shared", "acme"), "job done"); err != nil {
		t.Fatal(err)
	}
	if !e.alive(t, stranger.ID) {
		t.Fatal("releasing the job terminated the other deployment's sandbox")
	}
}
