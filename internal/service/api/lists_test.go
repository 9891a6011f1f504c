package api_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/ids"
	"github.com/sandstep/sandstep/internal/service/store"
)

// listPage is one page of GET /v1/jobs or GET /v1/sessions.
type listPage struct {
	items  []map[string]any
	cursor *string
}

func (e *testEnv) listPage(path, token string) listPage {
	e.t.Helper()
	res := e.get(path, token)
	wantStatus(e.t, res, http.StatusOK)
	m := res.json(e.t)
	key := "jobs"
	if strings.HasPrefix(path, "/v1/sessions") {
		key = "sessions"
	}
	raw, ok := m[key].([]any)
	if !ok {
		e.t.Fatalf("%s: no %s array: %s", path, key, res.body)
	}
	nc, present := m["next_cursor"]
	if !present {
		e.t.Fatalf("%s: no next_cursor: %s", path, res.body)
	}
	p := listPage{}
	for _, it := range raw {
		p.items = append(p.items, it.(map[string]any))
	}
	if nc != nil {
		c := nc.(string)
		p.cursor = &c
	}
	return p
}

// walk lists path (whose query has no cursor) to its end and returns the
// value of idKey of every item in the order listed, asserting that no page
// is larger than limit, that only the last has no cursor and that items
// come newest first.
func (e *testEnv) walk(path, token, idKey string, limit int) []string {
	e.t.Helper()
	var got []string
	var last time.Time
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	url := fmt.Sprintf("%s%slimit=%d", path, sep, limit)
	for pages := 0; ; pages++ {
		if pages > 50 {
			e.t.Fatalf("%s does not end", path)
		}
		p := e.listPage(url, token)
		if len(p.items) > limit || len(p.items) == 0 && p.cursor != nil {
			e.t.Fatalf("%s: %d items with limit %d, cursor %v", url, len(p.items), limit, p.cursor)
		}
		for _, it := range p.items {
			created, err := time.Parse(time.RFC3339, it["created_at"].(string))
			if err != nil {
				e.t.Fatal(err)
			}
			if !last.IsZero() && created.After(last) {
				e.t.Fatalf("%s: not newest first: %s listed after %s", path, created, last)
			}
			last = created
			got = append(got, it[idKey].(string))
		}
		if p.cursor == nil {
			return got
		}
		url = fmt.Sprintf("%s%slimit=%d&cursor=%s", path, sep, limit, *p.cursor)
	}
}

func TestListJobsShowsOnlyTheCallersNewestFirst(t *testing.T) {
	e := newEnv(t)
	var acme, globex []string
	for i := range 9 {
		id := fmt.Sprintf("a-%d", i)
		e.submit(tokenAcme, id)
		acme = append(acme, id)
		if i%3 == 0 {
			id = fmt.Sprintf("g-%d", i)
			e.submit(tokenGlobex, id)
			globex = append(globex, id)
		}
		// Distinct creation times, so that the order is the submissions'.
		time.Sleep(2 * time.Millisecond)
	}
	slices.Reverse(acme)
	slices.Reverse(globex)
	for _, limit := range []int{1, 2, 4, 9, 100} {
		if got := e.walk("/v1/jobs", tokenAcme, "job_id", limit); !slices.Equal(got, acme) {
			t.Fatalf("limit %d: acme lists %v, want %v", limit, got, acme)
		}
	}
	if got := e.walk("/v1/jobs", tokenGlobex, "job_id", 2); !slices.Equal(got, globex) {
		t.Fatalf("globex lists %v, want %v", got, globex)
	}
	if p := e.listPage("/v1/jobs", tokenDev); len(p.items) != 0 || p.cursor != nil {
		t.Fatalf("dev, who has no jobs, lists %v (cursor %v)", p.items, p.cursor)
	}
	// The default page is 20; a summary names the job, its request and
	// its links.
	p := e.listPage("/v1/jobs", tokenAcme)
	if len(p.items) != 9 || p.cursor != nil {
		t.Fatalf("default page: %d jobs, cursor %v", len(p.items), p.cursor)
	}
	j := p.items[0]
	links, _ := j["links"].(map[string]any)
	if j["job_id"] != "a-8" || j["status"] != "queued" || j["query"] != "solar panels" || j["mode"] != "light" ||
		j["optimization"] != "balanced" || j["finished_at"] != nil || links["self"] != "/v1/jobs/a-8" {
		t.Fatalf("job summary = %v", j)
	}
	// HEAD answers like GET, without a body.
	if res := e.do(http.MethodHead, "/v1/jobs", tokenAcme, nil); res.status != http.StatusOK || len(res.body) != 0 {
		t.Fatalf("HEAD /v1/jobs = %d %q", res.status, res.body)
	}
}

func TestListJobsByStatus(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	for _, id := range []string{"q-1", "r-1", "q-2", "r-2", "s-1"} {
		e.submit(tokenAcme, id)
		time.Sleep(2 * time.Millisecond)
	}
	for _, id := range []string{"r-1", "r-2", "s-1"} {
		if _, err := e.store.SetStatus(ctx, acmeKey(id), nil, store.StatusRunning); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.store.SetStatus(ctx, acmeKey("s-1"), nil, store.StatusSucceeded); err != nil {
		t.Fatal(err)
	}
	// A job whose execution could not start is stored queued and shown
	// failed: the filter is on what the API shows.
	e.exec.setFail(errors.New("states: throttled"))
	wantStatus(t, e.post("/v1/jobs", tokenAcme, `{"query":"q","job_id":"f-1"}`), http.StatusServiceUnavailable)
	e.exec.setFail(nil)
	// Another tenant's running job is not the caller's.
	e.submit(tokenGlobex, "r-9")
	if _, err := e.store.SetStatus(ctx, ids.JobKey("globex", "r-9"), nil, store.StatusRunning); err != nil {
		t.Fatal(err)
	}
	for query, want := range map[string][]string{
		"status=running":           {"r-2", "r-1"},
		"status=queued":            {"q-2", "q-1"},
		"status=failed":            {"f-1"},
		"status=succeeded":         {"s-1"},
		"status=cancelled":         nil,
		"status=queued,running":    {"r-2", "q-2", "r-1", "q-1"},
		"status=running,%20failed": {"f-1", "r-2", "r-1"},
	} {
		if got := e.walk("/v1/jobs?"+query, tokenAcme, "job_id", 1); !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", query, got, want)
		}
	}
	p := e.listPage("/v1/jobs?status=failed", tokenAcme)
	if j := p.items[0]; j["phase"] != "start_failed" || j["error"] == nil {
		t.Fatalf("failed job summary = %v", j)
	}
}

func TestListRejectsBadParameters(t *testing.T) {
	e := newSessionsEnv(t, "[sessions]\nenabled = true\n")
	for i := range 3 {
		e.submit(tokenAcme, fmt.Sprintf("j-%d", i))
		e.submit(tokenGlobex, fmt.Sprintf("j-%d", i))
		wantStatus(t, e.post(fmt.Sprintf("/v1/sessions/s-%d", i), tokenAcme, ""), http.StatusCreated)
	}
	acmeCursor := *e.listPage("/v1/jobs?limit=1", tokenAcme).cursor
	globexCursor := *e.listPage("/v1/jobs?limit=1", tokenGlobex).cursor
	sessionCursor := *e.listPage("/v1/sessions?limit=1", tokenAcme).cursor
	// The cursor works, once, where it was given.
	if p := e.listPage("/v1/jobs?limit=1&cursor="+acmeCursor, tokenAcme); p.items[0]["job_id"] != "j-1" {
		t.Fatalf("second page = %v", p.items)
	}
	raw, err := base64.RawURLEncoding.DecodeString(acmeCursor)
	if err != nil {
		t.Fatalf("the cursor %q is not base64url: %v", acmeCursor, err)
	}
	flipped := slices.Clone(raw)
	flipped[12] ^= 1 // a bit of the position
	tampered := base64.RawURLEncoding.EncodeToString(flipped)
	for _, tc := range []struct{ path, field string }{
		{"/v1/jobs?limit=0", "limit"},
		{"/v1/jobs?limit=101", "limit"},
		{"/v1/jobs?limit=-1", "limit"},
		{"/v1/jobs?limit=ten", "limit"},
		{"/v1/jobs?limit=", "limit"},
		{"/v1/jobs?limit=1.5", "limit"},
		{"/v1/jobs?status=done", "status"},
		{"/v1/jobs?status=", "status"},
		{"/v1/jobs?status=queued,nope", "status"},
		{"/v1/jobs?status=QUEUED", "status"},
		{"/v1/jobs?cursor=", "cursor"},
		{"/v1/jobs?cursor=not-a-cursor", "cursor"},
		{"/v1/jobs?cursor=" + url.QueryEscape("!!!"), "cursor"},
		{"/v1/jobs?cursor=" + acmeCursor[:len(acmeCursor)-3], "cursor"},
		{"/v1/jobs?cursor=" + acmeCursor + "AA", "cursor"},
		{"/v1/jobs?cursor=" + tampered, "cursor"},
		{"/v1/jobs?cursor=" + globexCursor, "cursor"},
		{"/v1/jobs?cursor=" + sessionCursor, "cursor"},
		{"/v1/sessions?cursor=" + acmeCursor, "cursor"},
		{"/v1/sessions?limit=1000", "limit"},
		{"/v1/sessions?state=asleep", "state"},
	} {
		res := e.get(tc.path, tokenAcme)
		er := wantError(t, res, http.StatusBadRequest, "invalid_argument", tc.field)
		if strings.Contains(fmt.Sprint(er["message"]), "globex") {
			t.Fatalf("%s: the answer names another tenant: %s", tc.path, res.body)
		}
	}
	// Another tenant's cursor is refused for that reason, and says so.
	er := wantError(t, e.get("/v1/jobs?cursor="+globexCursor, tokenAcme), http.StatusBadRequest, "invalid_argument", "cursor")
	if !strings.Contains(fmt.Sprint(er["message"]), "another tenant") {
		t.Fatalf("message = %v", er["message"])
	}
}

func TestListSessions(t *testing.T) {
	e := newSessionsEnv(t, "[sessions]\nenabled = true\n")
	for _, sid := range []string{"s1", "s2", "s3", "s4"} {
		wantStatus(t, e.post("/v1/sessions/"+sid, tokenAcme, ""), http.StatusCreated)
		time.Sleep(2 * time.Millisecond)
	}
	wantStatus(t, e.post("/v1/sessions/s1", tokenGlobex, ""), http.StatusCreated)
	// Deleted as the cleanup deletes it (this service has no provider to
	// delete a volume with).
	ctx := ctxFor(t)
	if _, err := e.store.BeginDelete(ctx, ids.SessionKey("acme", "s2"), time.Now().Add(48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.FinishDelete(ctx, ids.SessionKey("acme", "s2")); err != nil {
		t.Fatal(err)
	}

	for _, limit := range []int{1, 3, 100} {
		if got := e.walk("/v1/sessions", tokenAcme, "session_id", limit); !slices.Equal(got, []string{"s4", "s3", "s2", "s1"}) {
			t.Fatalf("limit %d: acme lists %v", limit, got)
		}
	}
	if got := e.walk("/v1/sessions", tokenGlobex, "session_id", 2); !slices.Equal(got, []string{"s1"}) {
		t.Fatalf("globex lists %v", got)
	}
	if got := e.walk("/v1/sessions?state=deleted", tokenAcme, "session_id", 2); !slices.Equal(got, []string{"s2"}) {
		t.Fatalf("deleted sessions: %v", got)
	}
	if got := e.walk("/v1/sessions?state=idle", tokenAcme, "session_id", 2); !slices.Equal(got, []string{"s4", "s3", "s1"}) {
		t.Fatalf("idle sessions: %v", got)
	}
	p := e.listPage("/v1/sessions?limit=1", tokenAcme)
	s := p.items[0]
	vol, _ := s["volume"].(map[string]any)
	links, _ := s["links"].(map[string]any)
	if s["session_id"] != "s4" || s["state"] != "idle" || vol["slug"] == "" || vol["mount_path"] != "/workspace" ||
		s["expires_at"] == nil || s["sandbox_id"] != nil || links["self"] != "/v1/sessions/s4" {
		t.Fatalf("session summary = %v", s)
	}
	p = e.listPage("/v1/sessions?state=deleted", tokenAcme)
	if s := p.items[0]; s["deleted_at"] == nil || s["expires_at"] != nil {
		t.Fatalf("deleted session summary = %v", s)
	}
}
