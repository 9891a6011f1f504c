package reaper_test

import (
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/store"
)

// A slot whose release a crash lost (the process died after the job ended,
// or after the sandbox's ledger entry closed) goes back in the next pass
// once it is past the grace; a live job's slot stays.
func TestPassGivesBackLostQuotaSlots(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	for _, id := range []string{"j-ended", "j-running"} {
		if _, _, err := e.st.CreateJob(ctx, store.NewJob{ID: id, Tenant: "acme", Request: []byte(`{}`), RequestHash: "h"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.st.SetStatus(ctx, "j-ended", nil, store.StatusFailed); err != nil {
		t.Fatal(err)
	}
	// Taken again after the job ended: the release that ending did is the
	// one a kill -9 would have lost.
	for _, id := range []string{"j-ended", "j-running"} {
		if err := e.st.AcquireSlot(ctx, "acme", store.QuotaConcurrentJobs, 5, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.st.LedgerBegin(ctx, store.LedgerEntry{Name: "sb-closed", Provider: "local", Owner: "job:j-ended", Tenant: "acme", Deadline: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.LedgerClose(ctx, "sb-closed", "test", nil); err != nil {
		t.Fatal(err)
	}
	if err := e.st.AcquireSlot(ctx, "acme", store.QuotaConcurrentSandboxes, 5, "sb-closed"); err != nil {
		t.Fatal(err)
	}

	c, err := e.r.Pass(ctx)
	if err != nil || c.QuotaSlotsReleased != 0 {
		t.Fatalf("within the grace: %+v, %v", c, err)
	}
	e.r.Now = func() time.Time { return time.Now().Add(5 * time.Minute) }
	c, err = e.r.Pass(ctx)
	if err != nil || c.QuotaSlotsReleased != 2 {
		t.Fatalf("past the grace: %+v, %v", c, err)
	}
	jobs, _ := e.st.SlotHolders(ctx, "acme", store.QuotaConcurrentJobs)
	sbs, _ := e.st.SlotHolders(ctx, "acme", store.QuotaConcurrentSandboxes)
	if len(jobs) != 1 || jobs["j-running"].IsZero() || len(sbs) != 0 {
		t.Fatalf("left: %v %v", jobs, sbs)
	}
}
