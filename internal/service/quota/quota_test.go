package quota_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/quota"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
)

func TestMain(m *testing.M) { os.Exit(testddb.RunTests(m)) }

func quotas(t *testing.T, toml string) *config.QuotasConfig {
	t.Helper()
	cfg, err := config.Parse([]byte(toml), "config.toml", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &cfg.Quotas
}

// Slots a crash did not give back (the job ended, the ledger entry closed,
// or neither was ever written) go back in a reconcile, once past the
// grace; live holders keep theirs.
func TestReconcileGivesBackWhatACrashLost(t *testing.T) {
	db := testddb.ForTests(t)
	st := store.NewLocal(db.Endpoint, db.Prefix)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q := quota.New(st, quotas(t, "[quotas]\nconcurrent_jobs = 3\nconcurrent_sandboxes = 2\n"))

	// A running job, a job that ended while its release was lost (the
	// slot taken again by hand stands for it), a slot whose job was never
	// written (the API died between the two).
	for _, id := range []string{"j-live", "j-ended"} {
		if _, _, err := st.CreateJob(ctx, store.NewJob{ID: id, Tenant: "acme", Request: []byte(`{}`), RequestHash: id}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.SetStatus(ctx, "j-ended", nil, store.StatusCancelled); err != nil {
		t.Fatal(err)
	}
	exec := "exec:j-live"
	if _, err := st.UpdateJob(ctx, "j-live", store.JobUpdate{ExecutionID: &exec}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"j-live", "j-ended", "j-never"} {
		if err := q.AdmitJob(ctx, "acme", id, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.AdmitJob(ctx, "acme", "j-fourth", true); !errors.As(err, new(*store.LimitError)) {
		t.Fatalf("a fourth job: %v", err)
	}
	// A sandbox whose entry closed, one that is live.
	for _, name := range []string{"sb-closed", "sb-live"} {
		if _, err := st.LedgerBegin(ctx, store.LedgerEntry{Name: name, Provider: "local", Owner: "job:j-live", Tenant: "acme", Deadline: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if err := q.AdmitSandbox(ctx, "acme", name, time.Minute, true); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.LedgerClose(ctx, "sb-closed", "test", nil); err != nil {
		t.Fatal(err)
	}

	closed := func(ctx context.Context, name string) (bool, error) {
		e, err := st.LedgerGet(ctx, name)
		return err == nil && e.State == store.LedgerTerminated, err
	}
	// Within the grace nothing is touched.
	got, err := quota.Reconcile(ctx, st, time.Hour, time.Now(), closed)
	if err != nil || got != (quota.Reconciled{}) {
		t.Fatalf("within the grace: %+v, %v", got, err)
	}
	got, err = quota.Reconcile(ctx, st, time.Minute, time.Now().Add(2*time.Minute), closed)
	if err != nil || got != (quota.Reconciled{Jobs: 2, Sandboxes: 1}) {
		t.Fatalf("past the grace: %+v, %v", got, err)
	}
	jobs, _ := st.SlotHolders(ctx, "acme", store.QuotaConcurrentJobs)
	sbs, _ := st.SlotHolders(ctx, "acme", store.QuotaConcurrentSandboxes)
	if len(jobs) != 1 || jobs["j-live"].IsZero() || len(sbs) != 1 || sbs["sb-live"].IsZero() {
		t.Fatalf("left: jobs %v, sandboxes %v", jobs, sbs)
	}
	if err := q.AdmitJob(ctx, "acme", "j-fourth", true); err != nil {
		t.Fatalf("after the reconcile: %v", err)
	}
	// A job created whose execution never started keeps its slot for
	// NeverStartedAfter, then loses it.
	if _, _, err := st.CreateJob(ctx, store.NewJob{ID: "j-fourth", Tenant: "acme", Request: []byte(`{}`), RequestHash: "h"}); err != nil {
		t.Fatal(err)
	}
	if got, err := quota.Reconcile(ctx, st, time.Minute, time.Now().Add(2*time.Minute), closed); err != nil || got.Jobs != 0 {
		t.Fatalf("a job just created: %+v, %v", got, err)
	}
	if got, err := quota.Reconcile(ctx, st, time.Minute, time.Now().Add(quota.NeverStartedAfter+time.Minute), closed); err != nil || got.Jobs != 1 {
		t.Fatalf("a job that never started: %+v, %v", got, err)
	}
}

// Per-tenant overrides replace the keys they set and keep the defaults'
// others; max_sandbox_ttl refuses a longer lifetime, naming itself.
func TestOverridesAndTTL(t *testing.T) {
	cfg := quotas(t, "[quotas]\nconcurrent_jobs = 2\nmax_sandbox_ttl = \"1h\"\n[quotas.tenants.acme]\nconcurrent_jobs = 0\n")
	if l := cfg.For("acme"); l.ConcurrentJobs != 0 || l.MaxSandboxTTL.D() != time.Hour {
		t.Fatalf("acme: %+v", l)
	}
	if l := cfg.For("globex"); l.ConcurrentJobs != 2 || l.MaxSandboxTTL.D() != time.Hour {
		t.Fatalf("globex: %+v", l)
	}
	q := quota.New(store.NewLocal("http://127.0.0.1:1", "unused-"), cfg)
	err := q.AdmitSandbox(context.Background(), "acme", "sb", 2*time.Hour, true)
	var le *store.LimitError
	if !errors.As(err, &le) || le.Limit != store.QuotaMaxSandboxTTL || le.Max != 3600 {
		t.Fatalf("a two-hour sandbox: %v", err)
	}
}

// A tenant's ended jobs count against its daily budget once each; past the
// budget a new job is refused until the day ends.
func TestDailyBudgetRefusesNewJobs(t *testing.T) {
	db := testddb.ForTests(t)
	st := store.NewLocal(db.Endpoint, db.Prefix)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q := quota.New(st, quotas(t, "[quotas]\nmax_cost_per_day = 1.5\n"))
	if _, _, err := st.CreateJob(ctx, store.NewJob{ID: "j-spent", Tenant: "acme", Request: []byte(`{}`), RequestHash: "h"}); err != nil {
		t.Fatal(err)
	}
	// Cleanup running twice counts the job once.
	for range 2 {
		if err := st.AddTenantSpend(ctx, "j-spent", "acme", 1_000_000, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if day, month, err := st.TenantSpend(ctx, "acme", time.Now()); err != nil || day != 1_000_000 || month != 1_000_000 {
		t.Fatalf("spend %d %d %v", day, month, err)
	}
	if err := q.AdmitJob(ctx, "acme", "j-next", true); err != nil {
		t.Fatalf("within the budget: %v", err)
	}
	if _, _, err := st.CreateJob(ctx, store.NewJob{ID: "j-more", Tenant: "acme", Request: []byte(`{}`), RequestHash: "h"}); err != nil {
		t.Fatal(err)
	}
	if err := st.AddTenantSpend(ctx, "j-more", "acme", 600_000, time.Now()); err != nil {
		t.Fatal(err)
	}
	err := q.AdmitJob(ctx, "acme", "j-last", true)
	var le *store.LimitError
	if !errors.As(err, &le) || le.Limit != store.QuotaMaxCostPerDay || le.Max != 2 || le.RetryAfter <= 0 || le.RetryAfter > 24*time.Hour {
		t.Fatalf("past the budget: %v (%+v)", err, le)
	}
	if err := q.AdmitJob(ctx, "globex", "j-other", true); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
}

// A submission refused for want of a concurrent_jobs slot does not use up
// one of the hour's jobs: with one slot and three jobs an hour, any number
// of refusals while a job runs leave the hour's other two for later.
func TestARefusedSlotCostsNoHourlyJob(t *testing.T) {
	db := testddb.ForTests(t)
	st := store.NewLocal(db.Endpoint, db.Prefix)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q := quota.New(st, quotas(t, "[quotas]\nconcurrent_jobs = 1\njobs_per_hour = 3\n"))
	limitOf := func(err error) string {
		var le *store.LimitError
		if errors.As(err, &le) {
			return le.Limit
		}
		return fmt.Sprint(err)
	}
	for i := range 3 {
		id := fmt.Sprintf("j-%d", i)
		if err := q.AdmitJob(ctx, "acme", id, true); err != nil {
			t.Fatalf("job %s: %v", id, err)
		}
		for k := range 4 {
			if got := limitOf(q.AdmitJob(ctx, "acme", fmt.Sprintf("j-%d-refused-%d", i, k), true)); got != store.QuotaConcurrentJobs {
				t.Fatalf("a second job while %s runs: %s, want concurrent_jobs", id, got)
			}
		}
		if err := q.ReleaseJob(ctx, "acme", id); err != nil {
			t.Fatal(err)
		}
	}
	// The hour's three are used: the fourth is refused by the hourly
	// quota, and its refusal leaves no slot taken.
	if got := limitOf(q.AdmitJob(ctx, "acme", "j-fourth", true)); got != store.QuotaJobsPerHour {
		t.Fatalf("a fourth job in the hour: %s, want jobs_per_hour", got)
	}
	if h, err := st.SlotHolders(ctx, "acme", store.QuotaConcurrentJobs); err != nil || len(h) != 0 {
		t.Fatalf("slots held after the refusal: %v, %v", h, err)
	}
}
