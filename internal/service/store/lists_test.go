package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sandstep/sandstep/internal/service/store"
)

// walkJobs lists every job of tenant page by page and returns their ids in
// the order listed.
func walkJobs(t *testing.T, s *store.Store, tenant string, limit int, keep func(store.Job) bool) []string {
	t.Helper()
	return walkJobsQ(t, s, tenant, store.ListQuery{Limit: limit}, keep)
}

func walkJobsQ(t *testing.T, s *store.Store, tenant string, q store.ListQuery, keep func(store.Job) bool) []string {
	t.Helper()
	var ids []string
	limit := q.Limit
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatal("the listing does not end")
		}
		page, err := s.ListTenantJobs(testCtx(t), tenant, q, keep)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Jobs) > limit || page.Next != nil && len(page.Jobs) == 0 && q.MaxExamined == 0 {
			t.Fatalf("page of %d jobs with limit %d, next %v", len(page.Jobs), limit, page.Next)
		}
		for i, j := range page.Jobs {
			if j.Tenant != tenant {
				t.Fatalf("job %s of %s listed for %s", j.ID, j.Tenant, tenant)
			}
			if i > 0 && j.CreatedAt.After(page.Jobs[i-1].CreatedAt) {
				t.Fatalf("not newest first: %v after %v", j.CreatedAt, page.Jobs[i-1].CreatedAt)
			}
			ids = append(ids, j.ID)
		}
		if page.Next == nil {
			return ids
		}
		q.After = page.Next
	}
}

func TestListTenantJobs(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	var acme []string
	for i := range 7 {
		id := fmt.Sprintf("acme-%d", i)
		if _, _, err := s.CreateJob(ctx, store.NewJob{ID: id, Tenant: "acme", ClientID: id, Request: json.RawMessage(`{}`), RequestHash: "h"}); err != nil {
			t.Fatal(err)
		}
		// Events and a report share the job's partition; they are not jobs.
		if _, err := s.AppendEvents(ctx, id, []store.Event{{Type: "search", Data: json.RawMessage(`{}`)}}); err != nil {
			t.Fatal(err)
		}
		acme = append(acme, id)
		time.Sleep(2 * time.Millisecond) // distinct creation times, for the order
	}
	if err := s.PutReport(ctx, "acme-0", "# r", true); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateJob(ctx, store.NewJob{ID: "globex-0", Tenant: "globex", Request: json.RawMessage(`{}`), RequestHash: "h"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetStatus(ctx, "acme-3", nil, store.StatusRunning); err != nil {
		t.Fatal(err)
	}
	slices.Reverse(acme)
	for _, limit := range []int{1, 3, 7, 100} {
		if got := walkJobs(t, s, "acme", limit, nil); !slices.Equal(got, acme) {
			t.Fatalf("limit %d: listed %v, want %v", limit, got, acme)
		}
	}
	if got := walkJobs(t, s, "globex", 2, nil); !slices.Equal(got, []string{"globex-0"}) {
		t.Fatalf("globex lists %v", got)
	}
	if got := walkJobs(t, s, "initech", 2, nil); len(got) != 0 {
		t.Fatalf("a tenant without jobs lists %v", got)
	}
	running := func(j store.Job) bool { return j.Status == store.StatusRunning }
	if got := walkJobs(t, s, "acme", 2, running); !slices.Equal(got, []string{"acme-3"}) {
		t.Fatalf("running jobs: %v", got)
	}
	// A filtered page reads a bounded number of items, and the listing
	// goes on after them.
	for _, budget := range []int{1, 2, 3} {
		if got := walkJobsQ(t, s, "acme", store.ListQuery{Limit: 5, MaxExamined: budget}, running); !slices.Equal(got, []string{"acme-3"}) {
			t.Fatalf("running jobs, %d read per page: %v", budget, got)
		}
	}
	queued := func(j store.Job) bool { return j.Status == store.StatusQueued }
	want := slices.DeleteFunc(slices.Clone(acme), func(id string) bool { return id == "acme-3" })
	if got := walkJobsQ(t, s, "acme", store.ListQuery{Limit: 2, MaxExamined: 3}, queued); !slices.Equal(got, want) {
		t.Fatalf("queued jobs, 3 read per page: %v, want %v", got, want)
	}
	// The index holds what a listing shows.
	page, err := s.ListTenantJobs(ctx, "acme", store.ListQuery{Limit: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if j := page.Jobs[0]; j.ClientID != "acme-6" || j.Status != store.StatusQueued || string(j.Request) != "{}" || j.CreatedAt.IsZero() {
		t.Fatalf("listed job %+v", j)
	}
	// A position need not be an item that still exists.
	page, err = s.ListTenantJobs(ctx, "acme", store.ListQuery{Limit: 100, After: &store.ListPosition{CreatedAt: page.Jobs[0].CreatedAt, Key: "gone"}}, nil)
	if err != nil || len(page.Jobs) < 6 {
		t.Fatalf("after a missing item: %d jobs, %v", len(page.Jobs), err)
	}
	for _, q := range []store.ListQuery{{Limit: 0}, {Limit: store.MaxListPage + 1}, {Limit: 1, After: &store.ListPosition{}}} {
		if _, err := s.ListTenantJobs(ctx, "acme", q, nil); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("%+v: %v, want ErrInvalid", q, err)
		}
	}
}

func TestListTenantSessions(t *testing.T) {
	s, env := newStore(t)
	ctx := testCtx(t)
	for _, id := range []string{"s1", "s2", "s3"} {
		if _, _, err := s.CreateSession(ctx, store.NewSession{ID: "acme-" + id, Tenant: "acme", ClientID: id, VolumeSlug: "v-" + id, IdleTTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if _, _, err := s.CreateSession(ctx, store.NewSession{ID: "globex-s1", Tenant: "globex", ClientID: "s1", VolumeSlug: "v", IdleTTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	// A run record shares the table and has a tenant, but is no session.
	if _, err := env.Client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(env.Prefix + store.SessionsTableSuffix),
		Item: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "RUN#acme-s1#r1"}, "tenant": &types.AttributeValueMemberS{Value: "acme"},
			"created_at": &types.AttributeValueMemberN{Value: fmt.Sprint(time.Now().UnixMilli())},
		},
	}); err != nil {
		t.Fatal(err)
	}
	var got []string
	q := store.ListQuery{Limit: 2}
	for range 3 {
		page, err := s.ListTenantSessions(ctx, "acme", q, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, ss := range page.Sessions {
			got = append(got, ss.ClientID)
		}
		if page.Next == nil {
			break
		}
		q.After = page.Next
	}
	if !slices.Equal(got, []string{"s3", "s2", "s1"}) {
		t.Fatalf("acme's sessions: %v", got)
	}
}
