package direct_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/client"
)

// parentScript runs in the parent sandbox with nothing but its injected
// SANDSTEP_URL and SANDSTEP_TOKEN and the Python client: a task in one
// child, a web app in another, fetched through its public URL, whose
// artifacts folder it lists; then as many children as the limit lets live
// at once, and one more.
const parentScript = `
import json, sys, os, urllib.request
sys.path.insert(0, "/opt/sandstep/python")
import sandstep

res = {"url_env": os.environ["SANDSTEP_URL"]}
res["task"] = list(sandstep.run_isolated_task("import sys\nprint(6 * 7)\nprint('warn', file=sys.stderr)\nsys.exit(5)"))
sb, url = sandstep.deploy_webapp({"/workspace/app/index.html": "<h1>hello from a child</h1>\n"},
                                 "python3 -m http.server 8080 --bind 127.0.0.1 -d /workspace/app", port=8080, ttl_minutes=30)
res["web_id"], res["web_url"] = sb.id, url
with urllib.request.urlopen(url, timeout=30) as r:
    res["page"] = r.read().decode()
sandstep.write_file(sb.id, "/workspace/artifacts/logs/app log.txt", "served\n")
res["artifacts"] = sandstep.list_artifacts(sb.id)
res["created"] = []
try:
    for i in range(10):
        res["created"].append(sandstep.create_sandbox(ttl_seconds=7200).id)
except sandstep.LimitExceeded as e:
    res["limit"] = {"status": e.status, "limit": e.limit, "max": e.max, "retry_after": e.retry_after}
print(json.dumps(res))
`

// TestParentManagesChildrenWithPythonClient is the agent of seed 004: a
// sandbox that creates sandboxes of its own through sandstep's API, held to
// the per-parent limits, all of which end with it.
func TestParentManagesChildrenWithPythonClient(t *testing.T) {
	e := newEnv(t, "")
	ctx := ctxFor(t)
	acme := e.client(tokenAcme)
	parent, err := acme.CreateSandbox(ctx, client.CreateRequest{TTLSeconds: 3 * 3600})
	if err != nil {
		t.Fatal(err)
	}
	if err := acme.WriteFile(ctx, parent.ID, "/workspace/agent.py", strings.NewReader(parentScript)); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code, err := acme.Run(ctx, parent.ID, client.ExecRequest{Argv: []string{"python3", "/workspace/agent.py"}, TimeoutSeconds: 600, Background: true}, &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Fatalf("the parent's agent failed (%d):\n%s\n%s", code, out.String(), errOut.String())
	}
	var res struct {
		URLEnv    string            `json:"url_env"`
		Task      []any             `json:"task"`
		WebID     string            `json:"web_id"`
		WebURL    string            `json:"web_url"`
		Page      string            `json:"page"`
		Artifacts []client.Artifact `json:"artifacts"`
		Created   []string
		Limit     struct {
			Status     int    `json:"status"`
			Limit      string `json:"limit"`
			Max        int    `json:"max"`
			RetryAfter int    `json:"retry_after"`
		} `json:"limit"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("%v:\n%s\n%s", err, out.String(), errOut.String())
	}
	if res.URLEnv != e.inner {
		t.Errorf("SANDSTEP_URL = %q, want %q", res.URLEnv, e.inner)
	}
	if len(res.Task) != 3 || res.Task[0] != "42\n" || res.Task[1] != "warn\n" || res.Task[2] != float64(5) {
		t.Errorf("the task's result: %v", res.Task)
	}
	if res.Page != "<h1>hello from a child</h1>\n" {
		t.Errorf("the web app through its public URL: %q", res.Page)
	}
	if a := res.Artifacts; len(a) != 1 || a[0].Path != "logs/app log.txt" || a[0].Size != 7 ||
		a[0].URL != "/v1/sandboxes/"+res.WebID+"/artifacts/logs/app%20log.txt" {
		t.Errorf("the child's artifacts, as the parent listed them: %+v", a)
	}
	// The public URL works from outside too (the test reaches the server
	// as 127.0.0.1), and without the token it does not.
	public := strings.Replace(res.WebURL, e.inner, e.url, 1)
	r, err := http.Get(public)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != 200 || string(page) != "<h1>hello from a child</h1>\n" {
		t.Errorf("public URL from outside: %d %q", r.StatusCode, page)
	}
	bare, _, _ := strings.Cut(public, "?")
	if r, err := http.Get(bare); err != nil || r.StatusCode != 404 {
		t.Errorf("the port without its token: %v %v", r.StatusCode, err)
	}
	// 1 task child (ended) + 1 web app + 4 more make 5 live: the 6th
	// concurrent child is refused.
	if len(res.Created) != 4 || res.Limit.Status != 429 || res.Limit.Limit != "max_children" || res.Limit.Max != 5 {
		t.Fatalf("children and the concurrent limit: %+v", res)
	}
	got, err := acme.Get(ctx, parent.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Children) != 5 {
		t.Errorf("the parent lists %d live children, want 5: %v", len(got.Children), got.Children)
	}
	child, err := acme.Get(ctx, res.Created[0])
	if err != nil || child.ParentID == nil || *child.ParentID != parent.ID || child.TTLRemaining > 3600 {
		t.Errorf("a child: %+v %v (its TTL is capped at an hour)", child, err)
	}

	// The parent's own token, as the agent holds it.
	var tok bytes.Buffer
	if _, err := acme.Run(ctx, parent.ID, client.ExecRequest{Command: "printf %s \"$SANDSTEP_TOKEN\""}, &tok, nil); err != nil {
		t.Fatal(err)
	}
	agent := e.client(tok.String())
	if r := e.do("GET", "/v1/jobs", tok.String(), nil); r.status != 403 {
		t.Errorf("a sandbox token on another route: %d %s", r.status, r.body)
	}
	if _, err := agent.Get(ctx, parent.ID); err == nil {
		t.Errorf("a sandbox token reads its own sandbox: it manages only its children")
	}
	// 6 creations so far this hour: end 4 children and create 4 more (10
	// creations); the 11th is refused until the hour is over.
	for _, id := range res.Created {
		if err := agent.TerminateSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 4; i++ {
		if _, err := agent.CreateSandbox(ctx, client.CreateRequest{TTLSeconds: 60}); err != nil {
			t.Fatalf("creation %d: %v", 7+i, err)
		}
	}
	if err := agent.TerminateSandbox(ctx, res.WebID); err != nil {
		t.Fatal(err)
	}
	_, err = agent.CreateSandbox(ctx, client.CreateRequest{TTLSeconds: 60})
	var le *client.Error
	if !asClientError(err, &le) || le.Status != 429 || le.Limit != "children_per_hour" || le.Max != 10 || le.RetryAfter < 50*time.Minute || le.RetryAfter > time.Hour {
		t.Fatalf("the 11th creation in an hour: %v", err)
	}
	retry := le.RetryAfter
	e.clock.Advance(time.Hour)
	if _, err := agent.CreateSandbox(ctx, client.CreateRequest{TTLSeconds: 60}); err != nil {
		t.Fatalf("a creation in the next hour: %v", err)
	}
	if n := e.liveSandboxes(); n != 6 {
		t.Errorf("%d live sandboxes before the parent ends, want 6 (the parent and 5 children)", n)
	}

	// The parent's end ends every child, and its token with it.
	if err := acme.TerminateSandbox(ctx, parent.ID); err != nil {
		t.Fatal(err)
	}
	if n := e.liveSandboxes(); n != 0 {
		t.Errorf("%d sandboxes live after the parent was terminated", n)
	}
	all, err := acme.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range all {
		if sb.Status != "terminated" {
			t.Errorf("sandbox %s is %s after its parent ended", sb.ID, sb.Status)
		}
	}
	if len(all) != 12 {
		t.Errorf("%d sandboxes listed, want 12 (the parent and 11 children)", len(all))
	}
	if _, err := agent.CreateSandbox(ctx, client.CreateRequest{}); !asClientError(err, &le) || le.Status != 401 {
		t.Errorf("the token of an ended parent: %v", err)
	}
	t.Logf("parent %s; the hourly limit answered 429 with Retry-After %ss", parent.ID, strconv.Itoa(int(retry.Seconds())))
}

func asClientError(err error, target **client.Error) bool {
	e, ok := err.(*client.Error)
	if ok {
		*target = e
	}
	return ok
}
