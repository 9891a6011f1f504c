package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/internal/service/store"
)

// sandstep jobs lists the tenant's jobs through GET /v1/jobs, newest
// first, page after page with next_cursor.
func TestJobsList(t *testing.T) {
	e := newEnv(t, true, false)
	for _, id := range []string{"list-1", "list-2", "list-3"} {
		wantCode(t, e.run("submit", "query of "+id, "--job-id", id), 0)
	}
	e.setStatus("list-2", store.StatusRunning, "")
	e.setStatus("list-2", store.StatusSucceeded, "")

	r := e.run("jobs")
	wantCode(t, r, 0)
	rows := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(rows) != 4 || !regexp.MustCompile(`^JOB +STATUS +PHASE +CREATED +QUERY$`).MatchString(rows[0]) {
		t.Fatalf("jobs:\n%s", r.stdout)
	}
	for i, id := range []string{"list-3", "list-2", "list-1"} {
		if !strings.HasPrefix(rows[i+1], id+" ") || !strings.HasSuffix(rows[i+1], "query of "+id) {
			t.Fatalf("row %d is not %s, newest first:\n%s", i+1, id, r.stdout)
		}
	}
	if !regexp.MustCompile(`^list-2 +succeeded `).MatchString(rows[2]) {
		t.Fatalf("list-2 is not shown succeeded:\n%s", r.stdout)
	}

	// --limit stops early and says how to go on; --cursor goes on.
	r = e.run("jobs", "--limit", "2")
	wantCode(t, r, 0)
	m := regexp.MustCompile(`more: sandstep jobs --cursor (\S+) \(or --all\)`).FindStringSubmatch(r.stderr)
	if strings.Count(r.stdout, "\n") != 3 || m == nil {
		t.Fatalf("jobs --limit 2:\n%s\n%s", r.stdout, r.stderr)
	}
	r = e.run("jobs", "--cursor", m[1], "--json")
	wantCode(t, r, 0)
	var page struct {
		Jobs []struct {
			JobID string `json:"job_id"`
		} `json:"jobs"`
		NextCursor *string `json:"next_cursor"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &page); err != nil || len(page.Jobs) != 1 || page.Jobs[0].JobID != "list-1" || page.NextCursor != nil {
		t.Fatalf("jobs --cursor --json: %q %v", r.stdout, err)
	}
	r = e.run("jobs", "--status", "succeeded", "--json")
	wantCode(t, r, 0)
	if err := json.Unmarshal([]byte(r.stdout), &page); err != nil || len(page.Jobs) != 1 || page.Jobs[0].JobID != "list-2" {
		t.Fatalf("jobs --status succeeded: %q %v", r.stdout, err)
	}
	r = e.run("jobs", "--all", "--json")
	wantCode(t, r, 0)
	if err := json.Unmarshal([]byte(r.stdout), &page); err != nil || len(page.Jobs) != 3 {
		t.Fatalf("jobs --all: %q %v", r.stdout, err)
	}
	// Another tenant has none of them.
	r = runCLI(testCtx(t), "jobs", "--server", e.url, "--token", otherToken)
	wantCode(t, r, 0)
	if r.stdout != "" || r.stderr != "no jobs\n" {
		t.Fatalf("globex's jobs: %+v", r)
	}
}

// sandstep sessions (list) lists the tenant's sessions through
// GET /v1/sessions.
func TestSessionsList(t *testing.T) {
	url := startSessionServer(t)
	ctx := testCtx(t)
	t.Setenv(envToken, devToken)
	cli := func(args ...string) result { return runCLI(ctx, append(args, "--server", url)...) }
	r := cli("sessions")
	wantCode(t, r, 0)
	if r.stdout != "" || r.stderr != "no sessions\n" {
		t.Fatalf("no sessions yet: %+v", r)
	}
	wantCode(t, cli("sessions", "open", "ls-1"), 0)
	wantCode(t, cli("sessions", "open", "ls-2"), 0)
	r = cli("sessions")
	wantCode(t, r, 0)
	rows := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(rows) != 3 || !regexp.MustCompile(`^SESSION +STATE +LAST USED +EXPIRES +SANDBOX$`).MatchString(rows[0]) ||
		!strings.Contains(r.stdout, "\nls-1 ") || !strings.Contains(r.stdout, "\nls-2 ") {
		t.Fatalf("sessions:\n%s", r.stdout)
	}
	r = cli("sessions", "list", "--json", "--limit", "1")
	wantCode(t, r, 0)
	var page struct {
		Sessions []struct {
			SessionID string `json:"session_id"`
		} `json:"sessions"`
		NextCursor *string `json:"next_cursor"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &page); err != nil || len(page.Sessions) != 1 || page.NextCursor == nil {
		t.Fatalf("sessions list --json --limit 1: %q %v", r.stdout, err)
	}
	wantCode(t, cli("sessions", "delete", "ls-1"), 0)
	r = cli("sessions", "--state", "deleted", "--json")
	wantCode(t, r, 0)
	if err := json.Unmarshal([]byte(r.stdout), &page); err != nil || len(page.Sessions) != 1 || page.Sessions[0].SessionID != "ls-1" {
		t.Fatalf("sessions --state deleted: %q %v", r.stdout, err)
	}
}
