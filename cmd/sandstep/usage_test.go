package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/internal/service/store"
	usageview "github.com/sandstep/sandstep/internal/service/usage"
)

// sandstep usage shows GET /v1/usage: a row per group and the total, or
// the API's JSON.
func TestUsageCommand(t *testing.T) {
	e := newEnv(t, true, false)
	for i, id := range []string{"use-1", "use-2"} {
		wantCode(t, e.run("submit", "query of "+id, "--job-id", id), 0)
		u := store.Usage{Execs: int64(i + 1), Tokens: map[string]store.TokenCount{"m": {Input: 100, Output: 10}},
			SearchCalls: map[string]int64{"searxng": 4}, SandboxSeconds: map[string]float64{"local/0": 30}, PagesCrawled: 2}
		if i == 1 {
			// Measured by one provider only: the column adds what was measured.
			u.BytesOut = map[string]int64{"local": 1234}
		}
		if err := e.store.PutUsage(testCtx(t), acmeKey(id), "discover", u); err != nil {
			t.Fatal(err)
		}
	}
	r := e.run("usage", "--group-by", "job_type")
	wantCode(t, r, 0)
	rows := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(rows) != 4 || !regexp.MustCompile(`^GROUP +JOBS +SANDBOXES +SANDBOX S +EXECS +TOKENS +SEARCHES +PAGES +AGENT RUNS +BYTES OUT +COST$`).MatchString(rows[1]) ||
		!regexp.MustCompile(`^research:light +2 +0 +60 +3 +220 +8 +4 +0 +1234 +-$`).MatchString(rows[2]) ||
		!regexp.MustCompile(`^total +2 +0 +60 +3 +220 +8 +4 +0 +1234 +-$`).MatchString(rows[3]) {
		t.Fatalf("usage:\n%s", r.stdout)
	}
	r = e.run("usage", "--json", "--group-by", "provider")
	wantCode(t, r, 0)
	var a usageview.Report
	if err := json.Unmarshal([]byte(r.stdout), &a); err != nil || a.GroupBy != "provider" || len(a.Groups) != 1 || a.Groups[0].Key != "local" || a.Total.Jobs != 2 {
		t.Fatalf("usage --json: %q %v", r.stdout, err)
	}
	r = e.run("usage", "--group-by", "week")
	if r.code == 0 || !strings.Contains(r.stderr, "group_by") {
		t.Fatalf("a bad group: %d %q", r.code, r.stderr)
	}
}
