package api_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/api"
	"github.com/sandstep/sandstep/internal/service/ids"
	"github.com/sandstep/sandstep/internal/service/report"
	"github.com/sandstep/sandstep/internal/service/sandboxes"
	"github.com/sandstep/sandstep/internal/service/store"
)

func TestSubmitRejectsEachInvalidField(t *testing.T) {
	e := newEnv(t)
	manyURLs := strings.TrimSuffix(strings.Repeat(`"https://example.com/a",`, 21), ",")
	for _, tc := range []struct {
		name, body string
		status     int
		code       string
		field      string
	}{
		{"query missing", `{"mode":"light"}`, 400, "invalid_argument", "query"},
		{"query null", `{"query":null}`, 400, "invalid_argument", "query"},
		{"query blank", `{"query":" \t\n "}`, 400, "invalid_argument", "query"},
		{"query too long in runes", `{"query":"` + strings.Repeat("é", 2001) + `"}`, 400, "invalid_argument", "query"},
		{"query wrong type", `{"query":42}`, 400, "invalid_argument", "query"},
		{"mode unknown", `{"query":"q","mode":"turbo"}`, 400, "invalid_argument", "mode"},
		{"mode wrong type", `{"query":"q","mode":1}`, 400, "invalid_argument", "mode"},
		{"optimization unknown", `{"query":"q","optimization":"fast"}`, 400, "invalid_argument", "optimization"},
		{"optimization wrong type", `{"query":"q","optimization":["speed"]}`, 400, "invalid_argument", "optimization"},
		{"seed_urls too many", `{"query":"q","seed_urls":[` + manyURLs + `]}`, 400, "invalid_argument", "seed_urls"},
		{"seed_urls not http", `{"query":"q","seed_urls":["ftp://example.com/x"]}`, 400, "invalid_argument", "seed_urls"},
		{"seed_urls relative", `{"query":"q","seed_urls":["/docs/page"]}`, 400, "invalid_argument", "seed_urls"},
		{"seed_urls no host", `{"query":"q","seed_urls":["https:///path"]}`, 400, "invalid_argument", "seed_urls"},
		{"seed_urls credentials", `{"query":"q","seed_urls":["https://user:pw@example.com/"]}`, 400, "invalid_argument", "seed_urls"},
		{"seed_urls too long", `{"query":"q","seed_urls":["https://example.com/` + strings.Repeat("a", 2029) + `"]}`, 400, "invalid_argument", "seed_urls"},
		{"seed_urls wrong type", `{"query":"q","seed_urls":"https://example.com/"}`, 400, "invalid_argument", "seed_urls"},
		{"seed_urls element wrong type", `{"query":"q","seed_urls":["https://example.com/",7]}`, 400, "invalid_argument", "seed_urls"},
		{"job_id empty", `{"query":"q","job_id":""}`, 400, "invalid_argument", "job_id"},
		{"job_id too long", `{"query":"q","job_id":"` + strings.Repeat("j", 65) + `"}`, 400, "invalid_argument", "job_id"},
		{"job_id bad character", `{"query":"q","job_id":"a/b"}`, 400, "invalid_argument", "job_id"},
		{"job_id dots", `{"query":"q","job_id":".."}`, 400, "invalid_argument", "job_id"},
		{"job_id wrong type", `{"query":"q","job_id":12}`, 400, "invalid_argument", "job_id"},
		{"unknown field", `{"query":"q","colour":"blue"}`, 400, "invalid_argument", "colour"},
		{"malformed JSON", `{"query":"q"`, 400, "invalid_argument", ""},
		{"not JSON", `query=q`, 400, "invalid_argument", ""},
		{"empty body", ``, 400, "invalid_argument", ""},
		{"not an object", `["q"]`, 400, "invalid_argument", ""},
		{"two values", `{"query":"q"} {"query":"r"}`, 400, "invalid_argument", ""},
		{"several fields at fault", `{"query":"","mode":"turbo"}`, 400, "invalid_argument", ""},
		{"too large", `{"query":"q","pad":"` + strings.Repeat("x", 64<<10) + `"}`, 413, "payload_too_large", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := e.post("/v1/jobs", tokenAcme, tc.body)
			wantError(t, res, tc.status, tc.code, tc.field)
		})
	}
	if calls := e.exec.startCalls(); len(calls) != 0 {
		t.Fatalf("invalid requests started executions: %v", calls)
	}
}

var jobIDRule = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

func TestSubmitStartsAndStatusShape(t *testing.T) {
	clock := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	e := newEnv(t, func(o *api.Options) { o.Now = func() time.Time { return clock } })
	ctx := ctxFor(t)

	// A query of exactly 2000 two-byte characters is within the limit.
	res := e.post("/v1/jobs", tokenAcme, `{"query":"  `+strings.Repeat("é", 2000)+`  ","seed_urls":["https://example.com/a?x=1&y=2","https://example.com/a?x=1&y=2","http://example.org"]}`)
	wantStatus(t, res, http.StatusAccepted)
	body := res.json(t)
	id, _ := body["job_id"].(string)
	if !jobIDRule.MatchString(id) || len(id) != 26 || body["status"] != "queued" {
		t.Fatalf("submit answered %s", res.body)
	}
	links, _ := body["links"].(map[string]any)
	base := "/v1/jobs/" + id
	if links["self"] != base || links["events"] != base+"/events" || links["report"] != base+"/report" || links["cancel"] != base+"/cancel" ||
		links["artifacts"] != base+"/artifacts" {
		t.Fatalf("links = %v", links)
	}
	calls := e.exec.startCalls()
	// The execution is named after the job's key, which the phases get.
	if key := acmeKey(id); len(calls) != 1 || calls[0].jobID != key || calls[0].input != `{"job_id":"`+key+`"}` {
		t.Fatalf("executor starts = %+v", calls)
	}

	job, err := e.store.GetJob(ctx, acmeKey(id))
	if err != nil {
		t.Fatal(err)
	}
	if job.Tenant != "acme" || job.ClientID != id || job.ExecutionID != "exec:"+acmeKey(id) {
		t.Fatalf("stored job = %+v", job)
	}
	// Stored normalized: trimmed query, defaults, duplicate URL dropped, no
	// HTML escaping of "&".
	wantReq := `{"query":"` + strings.Repeat("é", 2000) + `","mode":"light","optimization":"balanced","seed_urls":["https://example.com/a?x=1&y=2","http://example.org"]}`
	if string(job.Request) != wantReq {
		t.Fatalf("stored request = %s", job.Request)
	}

	// Generated ids sort by creation time.
	clock = clock.Add(time.Millisecond)
	res = e.post("/v1/jobs", tokenAcme, `{"query":"later"}`)
	wantStatus(t, res, http.StatusAccepted)
	if later := res.json(t)["job_id"].(string); later <= id {
		t.Fatalf("id %s generated later does not sort after %s", later, id)
	}

	if _, err := e.store.SetStep(ctx, acmeKey(id), store.Step{ID: store.StepCrawl, State: store.StepRunning, Current: 3, Total: 22}); err != nil {
		t.Fatal(err)
	}
	phase := "crawl"
	if _, err := e.store.UpdateJob(ctx, acmeKey(id), store.JobUpdate{Status: store.StatusRunning, Phase: &phase, AddFallbacks: []string{"snippets"}}); err != nil {
		t.Fatal(err)
	}
	res = e.get(base, tokenAcme)
	wantStatus(t, res, http.StatusOK)
	st := res.json(t)
	if st["job_id"] != id || st["status"] != "running" || st["phase"] != "crawl" || st["error"] != nil {
		t.Fatalf("status = %s", res.body)
	}
	if fb, _ := st["fallbacks"].([]any); len(fb) != 1 || fb[0] != "snippets" {
		t.Fatalf("fallbacks = %v", st["fallbacks"])
	}
	for _, k := range []string{"created_at", "updated_at"} {
		s, _ := st[k].(string)
		if _, err := time.Parse(time.RFC3339, s); err != nil {
			t.Fatalf("%s = %q is not RFC 3339: %v", k, s, err)
		}
	}
	steps, _ := st["steps"].([]any)
	wantSteps := [][2]string{
		{"search", "Searching the web"}, {"sandbox", "Creating the sandbox"}, {"setup", "Setting up the sandbox"},
		{"browser", "Checking the browser"}, {"crawl", "Crawling sources"}, {"analysis", "Analyzing sources"},
		{"finalize", "Writing the report"}, {"cleanup", "Cleaning up"},
	}
	if len(steps) != len(wantSteps) {
		t.Fatalf("steps = %v", steps)
	}
	for i, s := range steps {
		m := s.(map[string]any)
		wantState, cur, total := "pending", 0.0, 0.0
		if m["id"] == "crawl" {
			wantState, cur, total = "running", 3, 22
		}
		if m["id"] != wantSteps[i][0] || m["label"] != wantSteps[i][1] || m["status"] != wantState || m["current"] != cur || m["total"] != total {
			t.Fatalf("step %d = %v", i, m)
		}
	}

	wantError(t, e.get("/v1/jobs/no-such-job", tokenAcme), 404, "not_found", "")
	wantError(t, e.get("/v1/jobs/"+strings.Repeat("x", 65), tokenAcme), 404, "not_found", "")
}

func TestSubmitIsIdempotent(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	res := e.post("/v1/jobs", tokenAcme, `{"query":"q","job_id":"idem-1"}`)
	wantStatus(t, res, http.StatusAccepted)

	// The same request, spelled differently (defaults written out, keys in
	// another order), finds the job.
	res = e.post("/v1/jobs", tokenAcme, `{"job_id":"idem-1","optimization":"balanced","seed_urls":[],"mode":"light","query":" q "}`)
	wantStatus(t, res, http.StatusOK)
	if b := res.json(t); b["job_id"] != "idem-1" || b["status"] != "queued" {
		t.Fatalf("resubmit answered %s", res.body)
	}
	if n := len(e.exec.startCalls()); n != 1 {
		t.Fatalf("a started job was started again: %d starts", n)
	}

	// A different request under the same id is a conflict naming job_id.
	res = e.post("/v1/jobs", tokenAcme, `{"query":"another","job_id":"idem-1"}`)
	if er := wantError(t, res, http.StatusConflict, "conflict", "job_id"); er["job_id"] != "idem-1" {
		t.Fatalf("conflict = %v", er)
	}
	// Another tenant's id is its own: the same id from globex, with either
	// request, is a new job, and acme's is untouched.
	res = e.post("/v1/jobs", tokenGlobex, `{"query":"another","job_id":"idem-1"}`)
	wantStatus(t, res, http.StatusAccepted)
	if b := res.json(t); b["job_id"] != "idem-1" {
		t.Fatalf("globex's submit answered %s", res.body)
	}
	wantStatus(t, e.post("/v1/jobs", tokenGlobex, `{"query":"another","job_id":"idem-1"}`), http.StatusOK)
	wantError(t, e.post("/v1/jobs", tokenGlobex, `{"query":"q","job_id":"idem-1"}`), http.StatusConflict, "conflict", "job_id")

	job, err := e.store.GetJob(ctx, acmeKey("idem-1"))
	if err != nil || job.Tenant != "acme" || job.ClientID != "idem-1" || job.Version != 2 {
		t.Fatalf("job = %+v, %v", job, err)
	}
	other, err := e.store.GetJob(ctx, ids.JobKey("globex", "idem-1"))
	if err != nil || other.Tenant != "globex" || other.ClientID != "idem-1" || string(other.Request) == string(job.Request) {
		t.Fatalf("globex's job = %+v, %v", other, err)
	}
	if n := len(e.exec.startCalls()); n != 2 {
		t.Fatalf("%d starts, want one per tenant", n)
	}
}

func TestSubmitRetriedAfterInterruptedStart(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	res := e.post("/v1/jobs", tokenAcme, `{"query":"q","job_id":"cut-1"}`)
	wantStatus(t, res, http.StatusAccepted)
	// Simulate a submission cut short after CreateJob: the execution id
	// was never recorded.
	empty := ""
	if _, err := e.store.UpdateJob(ctx, acmeKey("cut-1"), store.JobUpdate{ExecutionID: &empty}); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, e.post("/v1/jobs", tokenAcme, `{"query":"q","job_id":"cut-1"}`), http.StatusOK)
	if n := len(e.exec.startCalls()); n != 2 {
		t.Fatalf("%d starts, want the retry to start the job again", n)
	}
	if job, _ := e.store.GetJob(ctx, acmeKey("cut-1")); job.ExecutionID != "exec:"+acmeKey("cut-1") {
		t.Fatalf("execution id = %q", job.ExecutionID)
	}
}

func TestSubmitStartFailure(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	e.exec.setFail(errors.New("states: service unavailable"))
	res := e.post("/v1/jobs", tokenAcme, `{"query":"q"}`)
	er := wantError(t, res, http.StatusServiceUnavailable, "unavailable", "")
	id, _ := er["job_id"].(string)
	if id == "" || er["status"] != "failed" || res.header.Get("Retry-After") == "" {
		t.Fatalf("503 answer = %s (Retry-After %q)", res.body, res.header.Get("Retry-After"))
	}
	if strings.Contains(string(res.body), "service unavailable") {
		t.Fatalf("the executor's error reached the client: %s", res.body)
	}
	st := e.get("/v1/jobs/"+id, tokenAcme).json(t)
	if st["status"] != "failed" || st["error"] == nil {
		t.Fatalf("status after a failed start = %v", st)
	}
	// Nothing runs, so there is nothing to cancel, and no report.
	wantError(t, e.post("/v1/jobs/"+id+"/cancel", tokenAcme, ""), http.StatusConflict, "conflict", "")
	wantError(t, e.get("/v1/jobs/"+id+"/report", tokenAcme), http.StatusNotFound, "not_found", "")

	// Resubmitting the same request (with the id it was given) starts it.
	e.exec.setFail(nil)
	res = e.post("/v1/jobs", tokenAcme, `{"query":"q","job_id":"`+id+`"}`)
	wantStatus(t, res, http.StatusOK)
	if b := res.json(t); b["status"] != "queued" {
		t.Fatalf("resubmit answered %s", res.body)
	}
	st = e.get("/v1/jobs/"+id, tokenAcme).json(t)
	if st["status"] != "queued" || st["error"] != nil || st["phase"] != nil {
		t.Fatalf("status after the restart = %v", st)
	}
	job, err := e.store.GetJob(ctx, acmeKey(id))
	if err != nil || job.ExecutionID != "exec:"+acmeKey(id) {
		t.Fatalf("job = %+v, %v", job, err)
	}
	if n := len(e.exec.startCalls()); n != 2 {
		t.Fatalf("%d starts, want 2", n)
	}
	// Once started, a resubmission does not start it again.
	wantStatus(t, e.post("/v1/jobs", tokenAcme, `{"query":"q","job_id":"`+id+`"}`), http.StatusOK)
	if n := len(e.exec.startCalls()); n != 2 {
		t.Fatalf("%d starts, want 2", n)
	}
}

func TestAuthentication(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name, header string
		invalid      bool
	}{
		{"missing", "", false},
		{"wrong token", "Bearer not-a-token", true},
		{"other scheme", "Basic " + tokenAcme, true},
		{"empty bearer", "Bearer ", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/v1/jobs/x", "/v1/providers"} {
				var res response
				if tc.header == "" {
					res = e.get(path, "")
				} else {
					res = e.get(path, "", "Authorization", tc.header)
				}
				wantError(t, res, http.StatusUnauthorized, "unauthenticated", "")
				wa := res.header.Get("WWW-Authenticate")
				if !strings.HasPrefix(wa, "Bearer") || tc.invalid != strings.Contains(wa, "invalid_token") {
					t.Fatalf("WWW-Authenticate = %q", wa)
				}
			}
		})
	}
	wantError(t, e.post("/v1/jobs", "", `{"query":"q"}`), http.StatusUnauthorized, "unauthenticated", "")
	if n := len(e.exec.startCalls()); n != 0 {
		t.Fatalf("an unauthenticated submit started %d executions", n)
	}
	// The scheme is case-insensitive; the dev token is the tenant "dev".
	res := e.do(http.MethodPost, "/v1/jobs", "", strings.NewReader(`{"query":"q","job_id":"dev-1"}`), "Authorization", "bearer "+tokenDev)
	wantStatus(t, res, http.StatusAccepted)
	if job, err := e.store.GetJob(ctxFor(t), devKey("dev-1")); err != nil || job.Tenant != "dev" {
		t.Fatalf("dev job = %+v, %v", job, err)
	}
	// /healthz needs no token.
	res = e.get("/healthz", "")
	wantStatus(t, res, http.StatusOK)
	if b := res.json(t); b["status"] != "ok" {
		t.Fatalf("healthz = %s", res.body)
	}
}

func TestAnotherTenantsJobIsNotFound(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	e.submit(tokenAcme, "mine")
	if err := e.store.PutReport(ctx, acmeKey("mine"), "# Report", true); err != nil {
		t.Fatal(err)
	}
	theirs := []response{
		e.get("/v1/jobs/mine", tokenGlobex),
		e.get("/v1/jobs/mine/events", tokenGlobex),
		e.get("/v1/jobs/mine/report", tokenGlobex),
		e.post("/v1/jobs/mine/cancel", tokenGlobex, ""),
	}
	missing := e.get("/v1/jobs/absent", tokenGlobex)
	for i, res := range theirs {
		wantError(t, res, http.StatusNotFound, "not_found", "")
		// Indistinguishable from a job that does not exist.
		if strings.Replace(string(res.body), "mine", "absent", 1) != string(missing.body) {
			t.Fatalf("route %d: %s differs from a missing job's %s", i, res.body, missing.body)
		}
	}
	job, err := e.store.GetJob(ctx, acmeKey("mine"))
	if err != nil || job.CancelRequested {
		t.Fatalf("job = %+v, %v", job, err)
	}
	if n := len(e.exec.cancelCalls()); n != 0 {
		t.Fatalf("another tenant's cancel reached the executor")
	}
	wantStatus(t, e.get("/v1/jobs/mine", tokenAcme), http.StatusOK)
}

func TestCancel(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	e.submit(tokenAcme, "c-1")
	for range 2 {
		res := e.post("/v1/jobs/c-1/cancel", tokenAcme, "")
		wantStatus(t, res, http.StatusAccepted)
		if b := res.json(t); b["job_id"] != "c-1" || b["status"] != "queued" {
			t.Fatalf("cancel answered %s", res.body)
		}
	}
	job, err := e.store.GetJob(ctx, acmeKey("c-1"))
	if err != nil || !job.CancelRequested {
		t.Fatalf("job = %+v, %v", job, err)
	}
	if calls := e.exec.cancelCalls(); len(calls) != 2 || calls[0] != [2]string{acmeKey("c-1"), "exec:" + acmeKey("c-1")} {
		t.Fatalf("executor cancels = %v", calls)
	}
	if st := e.get("/v1/jobs/c-1", tokenAcme).json(t); st["cancel_requested"] != true {
		t.Fatalf("status = %v", st)
	}

	e.submit(tokenAcme, "c-2")
	if _, err := e.store.SetStatus(ctx, acmeKey("c-2"), nil, store.StatusRunning); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.SetStatus(ctx, acmeKey("c-2"), nil, store.StatusSucceeded); err != nil {
		t.Fatal(err)
	}
	res := e.post("/v1/jobs/c-2/cancel", tokenAcme, "")
	if er := wantError(t, res, http.StatusConflict, "conflict", ""); er["status"] != "succeeded" {
		t.Fatalf("409 = %s", res.body)
	}
	if n := len(e.exec.cancelCalls()); n != 2 {
		t.Fatalf("a finished job's cancel reached the executor")
	}
}

func TestReport(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	e.submit(tokenAcme, "r-1")
	wantError(t, e.get("/v1/jobs/r-1/report", tokenAcme), http.StatusConflict, "conflict", "")
	if _, err := e.store.SetStatus(ctx, acmeKey("r-1"), nil, store.StatusRunning); err != nil {
		t.Fatal(err)
	}
	if err := e.store.AppendReport(ctx, acmeKey("r-1"), "# Solar\n\nPartial", false); err != nil {
		t.Fatal(err)
	}
	if er := wantError(t, e.get("/v1/jobs/r-1/report", tokenAcme), http.StatusConflict, "conflict", ""); er["status"] != "running" {
		t.Fatalf("409 = %v", er)
	}

	md := "# Solar panels\n\nThey work [1], and better in Spain [2] & Chile.\n"
	acc := 0.5
	details, _ := json.Marshal(report.Details{
		Sources: []report.UsedSource{
			{N: 1, URL: "https://example.com/a", FinalURL: "https://example.com/a", Title: "A", Mode: "pdf", Chars: 12, Pages: 4},
			{N: 2, URL: "https://example.org/b", FinalURL: "https://example.org/b", Title: "B", Mode: "snippet", Chars: 4},
		},
		NotUsed:   []report.NotUsed{{URL: "https://example.net/c", N: 3, Reason: "challenge", Message: "an anti-bot challenge page"}},
		Citations: report.Citations{Total: 2, Supported: 1, Unsupported: 1, Accuracy: &acc, Flagged: []report.Flag{{Sentence: "x [2].", Cited: []int{2}, Why: []string{"low_support"}, Action: "annotated"}}},
	})
	if err := e.store.WriteReport(ctx, acmeKey("r-1"), store.Report{Markdown: md, Complete: true, Details: details}); err != nil {
		t.Fatal(err)
	}
	res := e.get("/v1/jobs/r-1/report", tokenAcme)
	wantStatus(t, res, http.StatusOK)
	b := res.json(t)
	if b["job_id"] != "r-1" || b["status"] != "running" || b["complete"] != true || b["partial"] != false || b["markdown"] != md {
		t.Fatalf("report = %s", res.body)
	}
	srcs, _ := b["sources"].([]any)
	if len(srcs) != 2 {
		t.Fatalf("sources = %v", b["sources"])
	}
	if s := srcs[0].(map[string]any); s["n"] != 1.0 || s["url"] != "https://example.com/a" || s["final_url"] != "https://example.com/a" ||
		s["title"] != "A" || s["mode"] != "pdf" || s["chars"] != 12.0 || s["truncated"] != false || s["pages"] != 4.0 || len(s) != 8 {
		t.Fatalf("source = %v", s)
	}
	if s := srcs[1].(map[string]any); s["mode"] != "snippet" || s["pages"] != nil {
		t.Fatalf("source = %v", s)
	}
	if nu := b["not_used"].([]any); len(nu) != 1 || nu[0].(map[string]any)["reason"] != "challenge" {
		t.Fatalf("not_used = %v", b["not_used"])
	}
	if c := b["citations"].(map[string]any); c["total"] != 2.0 || c["supported"] != 1.0 || c["unsupported"] != 1.0 || c["accuracy"] != 0.5 || len(c["flagged"].([]any)) != 1 {
		t.Fatalf("citations = %v", b["citations"])
	}

	res = e.get("/v1/jobs/r-1/report", tokenAcme, "Accept", "text/markdown")
	wantStatus(t, res, http.StatusOK)
	if ct := res.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/markdown") || string(res.body) != md {
		t.Fatalf("markdown answer: %q %q", ct, res.body)
	}
	// JSON stays the default when both are acceptable.
	res = e.get("/v1/jobs/r-1/report", tokenAcme, "Accept", "application/json, text/markdown")
	if ct := res.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("Content-Type %q", ct)
	}

	// A job that ended without a report: 404. One that ended with a
	// partial report: that report.
	e.submit(tokenAcme, "r-2")
	if _, err := e.store.SetStatus(ctx, acmeKey("r-2"), nil, store.StatusFailed); err != nil {
		t.Fatal(err)
	}
	wantError(t, e.get("/v1/jobs/r-2/report", tokenAcme), http.StatusNotFound, "not_found", "")
	e.submit(tokenAcme, "r-3")
	if err := e.store.AppendReport(ctx, acmeKey("r-3"), "# Partial", false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.SetStatus(ctx, acmeKey("r-3"), nil, store.StatusCancelled); err != nil {
		t.Fatal(err)
	}
	res = e.get("/v1/jobs/r-3/report", tokenAcme)
	wantStatus(t, res, http.StatusOK)
	if b := res.json(t); b["complete"] != false || b["partial"] != true || b["markdown"] != "# Partial" || b["status"] != "cancelled" {
		t.Fatalf("partial report = %s", res.body)
	}
	if b := res.json(t); len(b["sources"].([]any)) != 0 || len(b["not_used"].([]any)) != 0 || b["citations"] != nil {
		t.Fatalf("partial report = %v", b)
	}
}

func TestProviders(t *testing.T) {
	counters := sandboxes.NewCounters()
	e := newEnv(t, func(o *api.Options) { o.SandboxCounters = counters })
	since, _ := json.Marshal(counters.Since())
	res := e.get("/v1/providers", tokenAcme)
	wantStatus(t, res, http.StatusOK)
	want := `{"deployment":"stack-a","active":{"name":"local","version":"1.2.3","api_version":1,"capabilities":{"snapshots":true,"volumes":true,` +
		`"named_sandboxes":false,"list_by_labels":false,"exec_streaming":true,"file_api":true,"public_url":false,` +
		`"host_scoped_secrets":true,"list_snapshots":false,"network_modes":["none","all"],"max_lifetime_seconds":7200,"regions":[],` +
		`"limits":{"cgroups":"v1","volumes":"ext4-image","enforced":["memory","volume_capacity"]}}},` +
		`"sandboxes":{"scope":"process","since":` + string(since) + `,"created":0,"reused":0,"failed":0,"refused":0,"cleaned_up":0,"cleanup_failed":0,"gone":0}}` + "\n"
	if string(res.body) != want {
		t.Fatalf("providers =\n%s\nwant\n%s", res.body, want)
	}
}

func TestRoutes(t *testing.T) {
	e := newEnv(t)
	// "/" is the console (console_test.go).
	for _, path := range []string{"/v1", "/v1/jobs/x/y", "/v2/jobs", "/v1/jobs/x/events/", "/v1/jobs//events"} {
		wantError(t, e.get(path, tokenAcme), http.StatusNotFound, "not_found", "")
	}
	for _, tc := range []struct{ method, path, allow string }{
		{http.MethodDelete, "/v1/jobs", "GET, HEAD, POST"},
		{http.MethodPost, "/v1/sessions", "GET, HEAD"},
		{http.MethodDelete, "/v1/jobs/x", "GET, HEAD"},
		{http.MethodGet, "/v1/jobs/x/cancel", "POST"},
		{http.MethodPost, "/v1/jobs/x/report", "GET, HEAD"},
		{http.MethodPut, "/healthz", "GET, HEAD"},
	} {
		res := e.do(tc.method, tc.path, tokenAcme, nil)
		wantError(t, res, http.StatusMethodNotAllowed, "method_not_allowed", "")
		if got := res.header.Get("Allow"); got != tc.allow {
			t.Fatalf("%s %s: Allow %q, want %q", tc.method, tc.path, got, tc.allow)
		}
	}
	res := e.do(http.MethodHead, "/healthz", "", nil)
	if res.status != http.StatusOK || len(res.body) != 0 {
		t.Fatalf("HEAD /healthz = %d %q", res.status, res.body)
	}
}

func TestHealthzWhenTheStoreIsDown(t *testing.T) {
	// Nothing listens there: the port was just freed.
	srv := newEnvOn(t, store.NewLocal(closedURL(t), "none-"))
	res := srv.get("/healthz", "")
	wantError(t, res, http.StatusServiceUnavailable, "unavailable", "")
}

func TestTokenNeverLogged(t *testing.T) {
	e := newEnv(t)
	const guess = "sk-guess-5a8c1f3e9b7d2a4c6e8f0b1d3a5c7e9f"
	e.submit(tokenAcme, "log-1")
	e.get("/v1/jobs/log-1", tokenAcme)
	e.get("/v1/jobs/log-1", guess)
	e.get("/v1/jobs/log-1?access_token="+guess, "")
	e.do(http.MethodGet, "/v1/jobs/log-1", "", nil, "Authorization", guess)
	res := e.post("/v1/jobs", guess, `{"query":"q"}`)
	if strings.Contains(string(res.body), guess) {
		t.Fatalf("the token is in a response: %s", res.body)
	}
	logs := e.logs.String()
	for _, secret := range []string{tokenAcme, guess, hashOf(tokenAcme)} {
		if strings.Contains(logs, secret) {
			t.Fatalf("a token is in the logs:\n%s", logs)
		}
	}
	var line map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs), "\n") {
		if strings.Contains(l, `"status":200`) {
			if err := jsonUnmarshal(l, &line); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if line["method"] != "GET" || line["path"] != "/v1/jobs/log-1" || line["tenant"] != "acme" || line["job_id"] != "log-1" || line["duration_ms"] == nil {
		t.Fatalf("log line = %v", line)
	}
	if !slices.ContainsFunc(strings.Split(logs, "\n"), func(l string) bool { return strings.Contains(l, `"status":401`) }) {
		t.Fatalf("no 401 logged:\n%s", logs)
	}
}
