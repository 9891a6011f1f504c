package store_test

import (
	"testing"

	"github.com/sandstep/sandstep/internal/service/store"
)

// A phase invocation delivered twice writes its record twice under one
// key: the job's usage counts it once. Records of other keys add up.
func TestUsageRecordsAreIdempotentPerInvocation(t *testing.T) {
	st, _ := newStore(t)
	ctx := testCtx(t)
	if _, _, err := st.CreateJob(ctx, store.NewJob{ID: "j-u", Tenant: "acme", Request: []byte(`{}`), RequestHash: "h"}); err != nil {
		t.Fatal(err)
	}
	discover := store.Usage{SearchCalls: map[string]int64{"searxng": 4}}
	report := store.Usage{Tokens: map[string]store.TokenCount{"m": {Input: 100, Output: 10}}, Execs: 1}
	for range 2 {
		if err := st.PutUsage(ctx, "j-u", "discover", discover); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.PutUsage(ctx, "j-u", "report", report); err != nil {
		t.Fatal(err)
	}
	if err := st.PutUsage(ctx, "j-u", "crawl:0", store.Usage{PagesCrawled: 3, SandboxSeconds: map[string]float64{store.SandboxSize("local", 512): 1.5}}); err != nil {
		t.Fatal(err)
	}
	u, err := st.JobUsage(ctx, "j-u")
	if err != nil {
		t.Fatal(err)
	}
	if u.SearchCalls["searxng"] != 4 || u.Tokens["m"].Input != 100 || u.Execs != 1 || u.PagesCrawled != 3 || u.SandboxSeconds["local/512"] != 1.5 {
		t.Fatalf("job usage %+v", u)
	}
	// The job's own events and sources are not usage records.
	if _, err := st.AppendEvents(ctx, "j-u", []store.Event{{Key: "k", Type: "job", Data: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetJobUsage(ctx, "j-u", u); err != nil {
		t.Fatal(err)
	}
	job, err := st.GetJob(ctx, "j-u")
	if err != nil || job.Usage == nil || job.Usage.SearchCalls["searxng"] != 4 {
		t.Fatalf("job record usage %+v, %v", job.Usage, err)
	}
}
