package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/store"
)

// ids of the listing's lines, header aside.
func listedIDs(t *testing.T, out string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if !strings.HasPrefix(lines[0], "JOB") {
		t.Fatalf("no header: %q", out)
	}
	var ids []string
	for _, l := range lines[1:] {
		ids = append(ids, strings.Fields(l)[0])
	}
	return ids
}

func TestJobsLists(t *testing.T) {
	e := newEnv(t, false, false)
	for _, id := range []string{"l-1", "l-2", "l-3"} {
		wantCode(t, e.run("submit", "--job-id", id, "tidal power "+id), 0)
		time.Sleep(2 * time.Millisecond)
	}
	wantCode(t, runCLI(testCtx(t), "submit", "--job-id", "theirs", "q", "--server", e.url, "--token", otherToken), 0)

	r := e.run("jobs")
	wantCode(t, r, 0)
	if got := strings.Join(listedIDs(t, r.stdout), " "); got != "l-3 l-2 l-1" || !strings.Contains(r.stdout, "tidal power l-3") || r.stderr != "" {
		t.Fatalf("jobs:\n%s\n%s", r.stdout, r.stderr)
	}

	// A page at a time: the next page's command is on stderr.
	r = e.run("jobs", "--limit", "2")
	wantCode(t, r, 0)
	m := regexp.MustCompile(`--cursor (\S+)`).FindStringSubmatch(r.stderr)
	if got := strings.Join(listedIDs(t, r.stdout), " "); got != "l-3 l-2" || m == nil {
		t.Fatalf("first page:\n%s\n%s", r.stdout, r.stderr)
	}
	r = e.run("jobs", "--limit", "2", "--cursor", m[1])
	wantCode(t, r, 0)
	if got := strings.Join(listedIDs(t, r.stdout), " "); got != "l-1" || r.stderr != "" {
		t.Fatalf("second page:\n%s\n%s", r.stdout, r.stderr)
	}
	r = e.run("jobs", "--limit", "1", "--all")
	wantCode(t, r, 0)
	if got := strings.Join(listedIDs(t, r.stdout), " "); got != "l-3 l-2 l-1" {
		t.Fatalf("--all:\n%s", r.stdout)
	}

	if _, err := e.store.SetStatus(testCtx(t), acmeKey("l-2"), nil, store.StatusRunning); err != nil {
		t.Fatal(err)
	}
	r = e.run("jobs", "--status", "running,succeeded")
	wantCode(t, r, 0)
	if got := strings.Join(listedIDs(t, r.stdout), " "); got != "l-2" {
		t.Fatalf("--status running:\n%s", r.stdout)
	}

	r = e.run("jobs", "--json", "--limit", "2", "--all")
	wantCode(t, r, 0)
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	var first struct {
		Jobs       []map[string]any `json:"jobs"`
		NextCursor *string          `json:"next_cursor"`
	}
	if len(lines) != 2 || json.Unmarshal([]byte(lines[0]), &first) != nil || len(first.Jobs) != 2 || first.NextCursor == nil {
		t.Fatalf("--json:\n%s", r.stdout)
	}

	// The server's refusals, named.
	for _, args := range [][]string{{"--status", "done"}, {"--limit", "0"}, {"--cursor", "garbled"}} {
		r = e.run(append([]string{"jobs"}, args...)...)
		wantCode(t, r, 1)
		if field := strings.TrimPrefix(args[0], "--"); !strings.Contains(r.stderr, "("+field+")") {
			t.Fatalf("jobs %v: %s", args, r.stderr)
		}
	}
}
