package fakesandy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/testkit/fakesandy"
)

const testKey = "fake-sandy-test-key"

// noBwrap skips (fails under CI) where bubblewrap cannot run.
func noBwrap(t *testing.T, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(err)
	}
	t.Skip(err)
}

func start(t *testing.T, opts fakesandy.Options) *fakesandy.Running {
	t.Helper()
	if opts.APIKey == "" {
		opts.APIKey = testKey
	}
	r, err := fakesandy.Start(opts, "")
	if errors.Is(err, fakesandy.ErrNoBubblewrap) {
		noBwrap(t, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r
}

// call is one HTTP request to the fake.
type call struct {
	method, path string
	body         any // JSON-encoded unless a string (sent as is)
	key          string
	requestID    string
}

type answer struct {
	status int
	body   []byte
	ctype  string
}

func (a answer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatalf("answer %d is not a JSON object: %v: %s", a.status, err, a.body)
	}
	return m
}

func do(t *testing.T, r *fakesandy.Running, c call) answer {
	t.Helper()
	var body io.Reader
	switch b := c.body.(type) {
	case nil:
	case string:
		body = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		body = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(t.Context(), c.method, r.URL+c.path, body)
	if err != nil {
		t.Fatal(err)
	}
	key := c.key
	if key == "" {
		key = testKey
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	if c.requestID != "" {
		req.Header.Set("X-Request-Id", c.requestID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, body: b, ctype: resp.Header.Get("Content-Type")}
}

func create(t *testing.T, r *fakesandy.Running, body any) string {
	t.Helper()
	a := do(t, r, call{method: "POST", path: "/api/sandboxes", body: body})
	if a.status != 200 {
		t.Fatalf("create: %d %s", a.status, a.body)
	}
	id, _ := a.json(t)["sandboxId"].(string)
	return id
}

type execAnswer struct {
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exitCode"`
}

func execIn(t *testing.T, r *fakesandy.Running, id string, body map[string]any) execAnswer {
	t.Helper()
	if _, ok := body["timeoutMs"]; !ok {
		body["timeoutMs"] = 30000
	}
	a := do(t, r, call{method: "POST", path: "/api/sandboxes/" + id + "/exec", body: body})
	if a.status != 200 {
		t.Fatalf("exec %v: %d %s", body["command"], a.status, a.body)
	}
	var e execAnswer
	if err := json.Unmarshal(a.body, &e); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestCreateGetExecTerminate(t *testing.T) {
	r := start(t, fakesandy.Options{})
	a := do(t, r, call{method: "POST", path: "/api/sandboxes", body: map[string]any{"priority": 1, "preemptable": false, "flavor": "agent-ready", "ttl_seconds": 600, "expose_ports": []int{5173}}})
	if a.status != 200 {
		t.Fatalf("create: %d %s", a.status, a.body)
	}
	m := a.json(t)
	id, _ := m["sandboxId"].(string)
	if !regexp.MustCompile(`^[0-9a-f]{12}$`).MatchString(id) {
		t.Fatalf("sandboxId %q is not 12 lowercase hex characters", id)
	}
	if m["url"] != "https://"+id+".sandy.fake.invalid" {
		t.Errorf("url %v", m["url"])
	}
	created, err1 := time.Parse(time.RFC3339, fmt.Sprint(m["createdAt"]))
	timeout, err2 := time.Parse(time.RFC3339, fmt.Sprint(m["timeoutAt"]))
	if err1 != nil || err2 != nil || timeout.Sub(created) != 10*time.Minute {
		t.Errorf("createdAt %v, timeoutAt %v: want ISO-8601 times 600 s apart (ttl_seconds)", m["createdAt"], m["timeoutAt"])
	}
	for _, k := range []string{"sandbox_id", "id", "exit_code"} {
		if _, ok := m[k]; ok {
			t.Errorf("create answers the non-Sandy field %q", k)
		}
	}
	g := do(t, r, call{method: "GET", path: "/api/sandboxes/" + id})
	if g.status != 200 || g.json(t)["sandboxId"] != id || g.json(t)["status"] != "running" {
		t.Errorf("get: %d %s", g.status, g.body)
	}

	e := execIn(t, r, id, map[string]any{"command": `pwd; echo "$FOO"; echo err >&2; exit 3`, "env": map[string]string{"FOO": "bar"}})
	if e.Stdout != "/workspace\nbar\n" || e.Stderr != "err\n" || e.ExitCode != 3 {
		t.Errorf("exec: %+v", e)
	}
	if e := execIn(t, r, id, map[string]any{"command": "pwd", "cwd": "/tmp"}); e.Stdout != "/tmp\n" {
		t.Errorf("cwd /tmp: %+v", e)
	}
	// Output is text: bytes that are not UTF-8 do not survive.
	if e := execIn(t, r, id, map[string]any{"command": `printf 'a\377b'`}); e.Stdout != "a\uFFFDb" {
		t.Errorf("binary output %q, want the invalid byte replaced", e.Stdout)
	}
	// A process started in the background outlives its exec, even in a
	// new session, until terminate kills it.
	execIn(t, r, id, map[string]any{"command": `nohup sh -c 'while :; do date +%s%N > /workspace/beat; sleep 0.05; done' >/dev/null 2>&1 & setsid sh -c 'sleep 600' >/dev/null 2>&1 & echo started`})
	beat := func() string {
		return execIn(t, r, id, map[string]any{"command": "cat /workspace/beat"}).Stdout
	}
	first := beat()
	waitFor(t, "the background process to beat again", func() bool { return beat() != first })
	marker := markedCount(t, id)
	if marker < 2 {
		t.Fatalf("found %d processes of the sandbox, want the background loop and the setsid sleep", marker)
	}

	if a := do(t, r, call{method: "POST", path: "/api/sandboxes/" + id + "/terminate"}); a.status != 200 || a.json(t)["status"] != "terminated" {
		t.Fatalf("terminate: %d %s", a.status, a.body)
	}
	if n := markedCount(t, id); n != 0 {
		t.Errorf("%d processes of the sandbox survived terminate", n)
	}
	for _, c := range []call{
		{method: "GET", path: "/api/sandboxes/" + id},
		{method: "POST", path: "/api/sandboxes/" + id + "/exec", body: map[string]any{"command": "true", "timeoutMs": 1000}},
		{method: "POST", path: "/api/sandboxes/" + id + "/terminate"},
		{method: "GET", path: "/api/sandboxes/" + id + "/files/read?path=beat"},
	} {
		if a := do(t, r, c); a.status != 404 {
			t.Errorf("%s %s after terminate: %d %s, want 404", c.method, c.path, a.status, a.body)
		}
	}
	if ids := r.Sandboxes(); len(ids) != 0 {
		t.Errorf("Sandboxes() = %v after terminate", ids)
	}
}

// markedCount counts the processes that carry the sandbox's marker.
func markedCount(t *testing.T, id string) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		for kv := range bytes.SplitSeq(env, []byte{0}) {
			if bytes.HasPrefix(kv, []byte("SANDY_FAKE_SANDBOX=")) && bytes.HasSuffix(kv, []byte("-"+id)) {
				n++
				break
			}
		}
	}
	return n
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestValidation(t *testing.T) {
	r := start(t, fakesandy.Options{})
	for _, body := range []any{`{"priority":"NORMAL"}`, `{"priority":7}`, `{"priority":1.5}`, `{"preemptable":"yes"}`, `[1]`} {
		if a := do(t, r, call{method: "POST", path: "/api/sandboxes", body: body}); a.status != 422 {
			t.Errorf("create %s: %d %s, want 422", body, a.status, a.body)
		}
	}
	// No body, and unknown fields, are fine.
	create(t, r, nil)
	id := create(t, r, map[string]any{"priority": 3, "preemptable": true, "enableDockerSocket": true, "upstream": "primary", "whatever": map[string]int{"x": 1}})
	if a := do(t, r, call{method: "POST", path: "/api/sandboxes/" + id + "/exec", body: map[string]any{"cwd": "/tmp"}}); a.status != 422 {
		t.Errorf("exec without command: %d %s, want 422", a.status, a.body)
	}
	// "timeout" is ignored; without timeoutMs a short default applies.
	e := execIn(t, r, id, map[string]any{"command": "sleep 20; echo done", "timeout": 60, "timeoutMs": nil})
	if e.ExitCode == 0 || !strings.Contains(e.Stderr, "Command timed out") || strings.Contains(e.Stdout, "done") {
		t.Errorf("exec without timeoutMs: %+v, want Command timed out", e)
	}
	if a := do(t, r, call{method: "GET", path: "/api/resources", key: "wrong"}); a.status != 401 {
		t.Errorf("wrong key: %d", a.status)
	}
	res := do(t, r, call{method: "GET", path: "/api/resources"})
	if res.status != 200 || res.json(t)["canCreateSandbox"] != true {
		t.Errorf("resources: %d %s", res.status, res.body)
	}
	stats := do(t, r, call{method: "GET", path: "/api/sandboxes/stats?ids=" + id})
	var st []map[string]any
	if err := json.Unmarshal(stats.body, &st); err != nil || len(st) != 1 || st[0]["sandbox_id"] != id {
		t.Errorf("stats: %d %s", stats.status, stats.body)
	}
}

func TestFiles(t *testing.T) {
	r := start(t, fakesandy.Options{})
	id := create(t, r, nil)
	files := "/api/sandboxes/" + id + "/files/"
	write := func(p, content string) answer {
		return do(t, r, call{method: "POST", path: files + "write", body: map[string]string{"path": p, "content": content}})
	}
	read := func(p string) answer {
		return do(t, r, call{method: "GET", path: files + "read?path=" + url.QueryEscape(p)})
	}
	if a := write("app/main.py", "print('hi')\n"); a.status != 200 {
		t.Fatalf("write: %d %s", a.status, a.body)
	}
	// Written literally, even when it looks like base64.
	if a := do(t, r, call{method: "POST", path: files + "write", body: map[string]string{"path": "/workspace/b64.txt", "content": "aGk=", "encoding": "base64"}}); a.status != 200 {
		t.Fatalf("write: %d %s", a.status, a.body)
	}
	if e := execIn(t, r, id, map[string]any{"command": "cat app/main.py b64.txt; stat -c %a app/main.py"}); e.Stdout != "print('hi')\naGk=644\n" {
		t.Errorf("written files as seen by a command: %q", e.Stdout)
	}
	if a := read("/workspace/app/main.py"); a.status != 200 || a.json(t)["content"] != "print('hi')\n" {
		t.Errorf("read: %d %s", a.status, a.body)
	}
	execIn(t, r, id, map[string]any{"command": "printf 'x\\377y' > bin; mkdir -p empty/dir; echo t > /tmp/t"})
	if a := read("bin"); a.json(t)["content"] != "x\uFFFDy" {
		t.Errorf("binary read %s, want the invalid byte replaced", a.body)
	}
	if a := read("/tmp/t"); a.json(t)["content"] != "t\n" {
		t.Errorf("read of /tmp: %s", a.body)
	}
	if a := read("/etc/hostname"); a.status != 200 {
		t.Errorf("read of a host file: %d %s", a.status, a.body)
	}
	for p, want := range map[string]int{"missing": 404, "/workspace/app": 400, "/workspace/../etc/../workspace/missing": 404} {
		if a := read(p); a.status != want {
			t.Errorf("read %s: %d %s, want %d", p, a.status, a.body, want)
		}
	}
	for p, want := range map[string]int{"/workspace/app": 400, "/usr/x": 403, "bin/sub": 400} {
		if a := write(p, "x"); a.status != want {
			t.Errorf("write %s: %d %s, want %d", p, a.status, a.body, want)
		}
	}
	l := do(t, r, call{method: "GET", path: files + "list?path=%2Fworkspace"})
	var list struct{ Files []string }
	if err := json.Unmarshal(l.body, &list); err != nil || strings.Join(list.Files, " ") != "app/main.py b64.txt bin" {
		t.Errorf("list: %d %s", l.status, l.body)
	}
	if a := do(t, r, call{method: "GET", path: files + "list?path=bin"}); a.status != 400 {
		t.Errorf("list of a file: %d", a.status)
	}
}

func TestFaults(t *testing.T) {
	r := start(t, fakesandy.Options{Admin: true, Faults: fakesandy.Faults{CreateUpstreamErrors: 2}})

	// Each create fails twice, retries recognised by their request id.
	for i := range 2 {
		rid := fmt.Sprintf("create-%d", i)
		for attempt := 1; attempt <= 3; attempt++ {
			a := do(t, r, call{method: "POST", path: "/api/sandboxes", requestID: rid})
			want := 502
			if attempt == 3 {
				want = 200
			}
			if a.status != want || (want == 502 && !strings.Contains(string(a.body), "Upstream error")) {
				t.Errorf("create %d attempt %d: %d %s, want %d", i, attempt, a.status, a.body, want)
			}
		}
	}

	r.SetFaults(fakesandy.Faults{WarmupExecFailures: 2, TruncateReadsAbove: 4, RateLimitEvery: 3, RateLimitBurst: 2})
	var id string
	for attempt := 1; id == ""; attempt++ {
		a := do(t, r, call{method: "POST", path: "/api/sandboxes", requestID: "warm"})
		if a.status == 200 {
			id = a.json(t)["sandboxId"].(string)
		} else if a.status != 429 || attempt > 3 {
			t.Fatalf("create attempt %d: %d %s", attempt, a.status, a.body)
		}
	}
	r.SetFaults(fakesandy.Faults{TruncateReadsAbove: 4})
	for i, want := range []string{"vsock handshake failed", "agent not ready", ""} {
		e := execIn(t, r, id, map[string]any{"command": "echo 0123456789 > f"})
		if e.Stderr != want || (want != "") != (e.ExitCode == 1) {
			t.Errorf("exec %d of a fresh sandbox: %+v, want stderr %q", i+1, e, want)
		}
	}
	if a := do(t, r, call{method: "GET", path: "/api/sandboxes/" + id + "/files/read?path=f"}); a.json(t)["content"] != "0123" {
		t.Errorf("truncated read: %s", a.body)
	}
	r.SetFaults(fakesandy.Faults{ReadFormat: "base64"})
	if a := do(t, r, call{method: "GET", path: "/api/sandboxes/" + id + "/files/read?path=f"}); a.json(t)["encoding"] != "base64" || a.json(t)["content"] != base64.StdEncoding.EncodeToString([]byte("0123456789\n")) {
		t.Errorf("base64 read: %s", a.body)
	}
	r.SetFaults(fakesandy.Faults{ReadFormat: "raw"})
	if a := do(t, r, call{method: "GET", path: "/api/sandboxes/" + id + "/files/read?path=f"}); string(a.body) != "0123456789\n" || a.ctype != "application/octet-stream" {
		t.Errorf("raw read: %q %s", a.body, a.ctype)
	}

	// The admin endpoint sets faults as JSON.
	a := do(t, r, call{method: "PUT", path: "/_fake/faults", body: map[string]any{"teardownDelay": "1h", "echoAuthorization": true}})
	if a.status != 200 || r.Faults().TeardownDelay != config.Duration(time.Hour) {
		t.Fatalf("PUT /_fake/faults: %d %s", a.status, a.body)
	}
	if a := do(t, r, call{method: "GET", path: "/api/resources", key: "wrong-key-123"}); a.status != 401 || !strings.Contains(string(a.body), "wrong-key-123") {
		t.Errorf("echoAuthorization: %d %s", a.status, a.body)
	}
	// Terminated: GET still answers while teardown lags, nothing else.
	do(t, r, call{method: "POST", path: "/api/sandboxes/" + id + "/terminate"})
	if a := do(t, r, call{method: "GET", path: "/api/sandboxes/" + id}); a.status != 200 {
		t.Errorf("GET during teardown: %d", a.status)
	}
	if a := do(t, r, call{method: "POST", path: "/api/sandboxes/" + id + "/exec", body: map[string]any{"command": "true", "timeoutMs": 1000}}); a.status != 404 {
		t.Errorf("exec during teardown: %d", a.status)
	}
	if a := do(t, r, call{method: "POST", path: "/api/sandboxes/" + id + "/terminate"}); a.status != 200 {
		t.Errorf("terminate during teardown: %d", a.status)
	}

	// Preemption: gone at once, everywhere.
	other := create(t, r, nil)
	if a := do(t, r, call{method: "POST", path: "/_fake/sandboxes/" + other + "/preempt"}); a.status != 200 {
		t.Fatalf("preempt: %d %s", a.status, a.body)
	}
	if a := do(t, r, call{method: "GET", path: "/api/sandboxes/" + other}); a.status != 404 {
		t.Errorf("GET after preemption: %d", a.status)
	}
}

func TestExpiry(t *testing.T) {
	r := start(t, fakesandy.Options{})
	id := create(t, r, map[string]any{"ttl_seconds": 1})
	waitFor(t, "the sandbox to expire", func() bool {
		return do(t, r, call{method: "GET", path: "/api/sandboxes/" + id}).status == 404
	})
}

func TestAdminOffByDefault(t *testing.T) {
	r := start(t, fakesandy.Options{})
	if a := do(t, r, call{method: "GET", path: "/_fake/faults"}); a.status != 404 {
		t.Errorf("admin endpoint without Options.Admin: %d", a.status)
	}
}

func TestMainServes(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		noBwrap(t, err)
	}
	t.Setenv("FAKE_SANDY_TEST_KEY", testKey)
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- fakesandy.Main(ctx, []string{"-addr", "127.0.0.1:0", "-api-key-env", "FAKE_SANDY_TEST_KEY"}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("no first line: %v", err)
	}
	m := regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+);`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("first line %q", line)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", m[1]+"/api/resources", nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("resources: %v %v", resp, err)
	}
	resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Main: %v", err)
	}
	if err := fakesandy.Main(t.Context(), []string{"-addr", "0.0.0.0:0"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("Main on a public address: %v", err)
	}
}
