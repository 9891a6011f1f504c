package direct_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sandstep/sandstep/client"
)

// cuttingTransport breaks the body of every output read after cut bytes,
// as a dropped connection would: the client sees an error mid-body.
type cuttingTransport struct {
	cut   int64
	cuts  atomic.Int64
	reads atomic.Int64
}

func (c *cuttingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || !strings.Contains(r.URL.Path, "/output") {
		return res, err
	}
	c.reads.Add(1)
	res.Body = &cutBody{rc: res.Body, left: c.cut, t: c}
	return res, nil
}

type cutBody struct {
	rc   io.ReadCloser
	left int64
	t    *cuttingTransport
}

var errCut = errors.New("connection cut by the test")

func (b *cutBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		b.t.cuts.Add(1)
		return 0, errCut
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if err == io.EOF {
		return n, io.EOF
	}
	return n, err
}

func (b *cutBody) Close() error { return b.rc.Close() }

// seqOutput is what `seq 1 n` prints.
func seqOutput(n int) []byte {
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	for i := 1; i <= n; i++ {
		w.WriteString(strconv.Itoa(i))
		w.WriteByte('\n')
	}
	w.Flush()
	return b.Bytes()
}

// TestExecOutputResumesAfterDisconnect: a 20 MB output read by a client
// whose every read is cut mid-body arrives whole, byte for byte, by
// resuming from the offset it got to.
func TestExecOutputResumesAfterDisconnect(t *testing.T) {
	e := newEnv(t, "")
	ctx := ctxFor(t)
	acme := e.client(tokenAcme)
	sb, err := acme.CreateSandbox(ctx, client.CreateRequest{TTLSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	const n = 2_700_000 // 20,488,896 bytes
	want := seqOutput(n)
	if len(want) < 20_000_000 {
		t.Fatalf("the expected output is %d bytes, not 20 MB", len(want))
	}
	ex, err := acme.Exec(ctx, sb.ID, client.ExecRequest{Command: fmt.Sprintf("seq 1 %d; echo done >&2", n), Background: true})
	if err != nil {
		t.Fatal(err)
	}
	if ex.Status != "running" && ex.Status != "exited" {
		t.Fatalf("background exec status %q", ex.Status)
	}
	tr := &cuttingTransport{cut: 700_001}
	flaky := client.New(e.url, tokenAcme, &http.Client{Transport: tr})
	flaky.ResumeDelay = 0
	var got bytes.Buffer
	code, err := flaky.Output(ctx, sb.ID, ex.ExecID, "stdout", 0, &got)
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Errorf("exit code %d", code)
	}
	if tr.cuts.Load() < 5 {
		t.Errorf("only %d reads were cut: the resume was not exercised", tr.cuts.Load())
	}
	if got.Len() != len(want) || sha256.Sum256(got.Bytes()) != sha256.Sum256(want) {
		t.Fatalf("resumed output is %d bytes, want %d, or differs", got.Len(), len(want))
	}
	t.Logf("%d bytes in %d reads, %d cut", got.Len(), tr.reads.Load(), tr.cuts.Load())

	// From an offset in the middle, any client gets the rest.
	var tail bytes.Buffer
	if _, err := acme.Output(ctx, sb.ID, ex.ExecID, "stdout", 12_345_678, &tail); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(tail.Bytes(), want[12_345_678:]) {
		t.Errorf("output from offset 12345678 differs (%d bytes)", tail.Len())
	}
	var stderr bytes.Buffer
	if _, err := acme.Output(ctx, sb.ID, ex.ExecID, "stderr", 0, &stderr); err != nil || stderr.String() != "done\n" {
		t.Errorf("stderr %q, %v", stderr.String(), err)
	}
	// The SSE form resumes with Last-Event-ID from the same offsets.
	req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/v1/sandboxes/"+sb.ID+"/execs/"+ex.ExecID+"/output?stream=stderr", nil)
	req.Header.Set("Authorization", "Bearer "+tokenAcme)
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(body), "event: output") || !strings.Contains(string(body), `"data_base64":"ZG9uZQo="`) || !strings.Contains(string(body), "event: exit") {
		t.Errorf("SSE form:\n%s", body)
	}
	if err := acme.TerminateSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
}

// TestExecInlineAndErrors: a short command answers inline with its exit
// code and both streams; bad requests name their field; another tenant's
// sandbox does not exist.
func TestExecInlineAndErrors(t *testing.T) {
	e := newEnv(t, "")
	ctx := ctxFor(t)
	acme := e.client(tokenAcme)
	sb, err := acme.CreateSandbox(ctx, client.CreateRequest{TTLSeconds: 600, Labels: map[string]string{"team": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	ex, err := acme.Exec(ctx, sb.ID, client.ExecRequest{Command: "echo out; echo err >&2; cat; exit 3", Stdin: "in\n", Env: map[string]string{"A": "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if ex.ExitCode == nil || *ex.ExitCode != 3 || ex.Stdout == nil || *ex.Stdout != "out\nin\n" || *ex.Stderr != "err\n" {
		t.Fatalf("exec: %+v", ex)
	}
	ex, err = acme.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"sh", "-c", `printf %s "$A|$1"`, "x", "it's"}, Env: map[string]string{"A": "b c"}, Cwd: "/tmp"})
	if err != nil || ex.Stdout == nil || *ex.Stdout != "b c|it's" {
		t.Fatalf("argv exec: %+v %v", ex, err)
	}
	// A timeout ends the whole tree: what stayed in the command's process
	// group, and what left it (setsid, setpgid) while holding its output
	// open or not.
	escape := `sleep 301 & setsid sleep 302 & python3 -c "import os,time; os.setpgid(0,0); time.sleep(303)" & setsid sh -c "sleep 304" > /dev/null 2>&1 & sleep 300`
	ex, err = acme.Exec(ctx, sb.ID, client.ExecRequest{Command: escape, TimeoutSeconds: 1})
	if err != nil || !ex.TimedOut || ex.ExitCode == nil || *ex.ExitCode != 124 {
		t.Fatalf("timeout: %+v %v", ex, err)
	}
	if out := shell(t, acme, sb.ID, "ps -eo args | grep '^sleep 30[1-4]\\|time.sleep(303)' | grep -v grep || true"); out != "" {
		t.Errorf("processes of a timed-out exec still run:\n%s", out)
	}
	// A command that ends but leaves a process holding its output ends at
	// its timeout too, rather than never.
	ex, err = acme.Exec(ctx, sb.ID, client.ExecRequest{Command: "sleep 305 & echo started", TimeoutSeconds: 1})
	if err != nil || !ex.TimedOut || ex.Stdout == nil || *ex.Stdout != "started\n" {
		t.Fatalf("an exec whose background process holds its output: %+v %v", ex, err)
	}
	// One that detaches properly is left alone.
	ex, err = acme.Exec(ctx, sb.ID, client.ExecRequest{Command: "nohup sleep 306 > /dev/null 2>&1 & echo ok", TimeoutSeconds: 2})
	if err != nil || ex.TimedOut || ex.ExitCode == nil || *ex.ExitCode != 0 {
		t.Fatalf("a detached background process: %+v %v", ex, err)
	}
	if out := shell(t, acme, sb.ID, "sleep 3; ps -eo args | grep '^sleep 306' | grep -v grep"); out != "sleep 306\n" {
		t.Errorf("a process detached from an exec that ended did not survive: %q", out)
	}
	for _, c := range []struct {
		body  string
		field string
	}{
		{`{}`, "command"},
		{`{"command":"x","argv":["y"]}`, "argv"},
		{`{"command":"x","timeout_seconds":0.5}`, "timeout_seconds"},
		{`{"command":"x","env":{"1A":"b"}}`, "env"},
		{`{"command":"x","cwd":"rel"}`, "cwd"},
		{`{"command":"x","bogus":1}`, "bogus"},
		{`{"command":"x","cwd":"/no/such/folder"}`, "cwd"},
		{`{"command":"x","timeout_seconds":"5"}`, "timeout_seconds"},
	} {
		r := e.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", tokenAcme, c.body)
		if r.status != 400 || !strings.Contains(string(r.body), `"field":"`+c.field+`"`) {
			t.Errorf("%s: %d %s", c.body, r.status, r.body)
		}
	}
	if r := e.do("GET", "/v1/sandboxes/"+sb.ID, tokenGlobex, nil); r.status != 404 {
		t.Errorf("another tenant's sandbox: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", tokenGlobex, `{"command":"true"}`); r.status != 404 {
		t.Errorf("another tenant's exec: %d %s", r.status, r.body)
	}
	// Files: binary-safe both ways, and listed.
	blob := make([]byte, 3<<20)
	for i := range blob {
		blob[i] = byte(i * 7)
	}
	if err := acme.WriteFile(ctx, sb.ID, "/workspace/d/blob.bin", bytes.NewReader(blob)); err != nil {
		t.Fatal(err)
	}
	var back bytes.Buffer
	if _, err := acme.ReadFile(ctx, sb.ID, "/workspace/d/blob.bin", &back); err != nil || !bytes.Equal(back.Bytes(), blob) {
		t.Fatalf("read back %d bytes, %v", back.Len(), err)
	}
	list, err := acme.ListFiles(ctx, sb.ID, "/workspace/d")
	if err != nil || len(list) != 1 || list[0].Name != "blob.bin" || list[0].Size != int64(len(blob)) {
		t.Fatalf("list: %+v %v", list, err)
	}
	if r := e.do("GET", "/v1/sandboxes/"+sb.ID+"/files?path=/workspace/none", tokenAcme, nil); r.status != 404 {
		t.Errorf("missing file: %d %s", r.status, r.body)
	}
	// Paths the sandbox cannot take are the request's fault, named.
	for _, c := range []struct {
		method, query string
		status        int
	}{
		{"GET", "path=/workspace/../etc/passwd", 400},
		{"GET", "path=workspace/x", 400},
		{"GET", "path=/workspace", 400},                   // a folder, read as a file
		{"PUT", "path=/workspace/d", 400},                 // a folder, written as a file
		{"GET", "path=/workspace/d/blob.bin&list=1", 400}, // a file, listed
		{"GET", "path=/workspace/d&list=yes", 400},
		{"PUT", "path=/usr/x", 403}, // read-only
	} {
		r := e.do(c.method, "/v1/sandboxes/"+sb.ID+"/files?"+c.query, tokenAcme, "x")
		field := `"field":"path"`
		if strings.Contains(c.query, "list=yes") {
			field = `"field":"list"`
		}
		if r.status != c.status || !strings.Contains(string(r.body), field) {
			t.Errorf("%s files?%s: %d %s", c.method, c.query, r.status, r.body)
		}
	}
	// An offset past the end of an ended exec's output is refused, in
	// both forms.
	ex, err = acme.Exec(ctx, sb.ID, client.ExecRequest{Command: "printf abcdef"})
	if err != nil {
		t.Fatal(err)
	}
	out := "/v1/sandboxes/" + sb.ID + "/execs/" + ex.ExecID + "/output?offset="
	if r := e.do("GET", out+"6", tokenAcme, nil); r.status != 200 || len(r.body) != 0 || r.header.Get("X-Sandstep-Exec-Done") != "true" {
		t.Errorf("output at its end: %d %q %v", r.status, r.body, r.header)
	}
	for _, o := range []string{"7", "-1", "x"} {
		if r := e.do("GET", out+o, tokenAcme, nil); r.status != 400 || !strings.Contains(string(r.body), `"field":"offset"`) {
			t.Errorf("output at offset %s: %d %s", o, r.status, r.body)
		}
	}
	got, err := acme.Get(ctx, sb.ID)
	if err != nil || got.Status != "running" || got.TTLRemaining < 500 || got.Labels["team"] != "x" {
		t.Fatalf("get: %+v %v", got, err)
	}
	all, err := acme.List(ctx)
	if err != nil || len(all) != 1 || all[0].ID != sb.ID {
		t.Fatalf("list: %+v %v", all, err)
	}
	if r := e.do("GET", "/v1/sandboxes", tokenGlobex, nil); r.status != 200 || strings.Contains(string(r.body), sb.ID) {
		t.Errorf("globex lists acme's sandbox: %s", r.body)
	}
	// A name makes create idempotent within the tenant; another tenant's
	// name is another sandbox.
	first := e.do("POST", "/v1/sandboxes", tokenAcme, `{"name":"builder","ttl_seconds":600}`)
	again := e.do("POST", "/v1/sandboxes", tokenAcme, `{"name":"builder","ttl_seconds":600}`)
	other := e.do("POST", "/v1/sandboxes", tokenGlobex, `{"name":"builder","ttl_seconds":600}`)
	if first.status != 201 || again.status != 200 || other.status != 201 || first.json(t)["id"] != again.json(t)["id"] || other.json(t)["id"] == first.json(t)["id"] {
		t.Errorf("named creates: %d %s / %d %s / %d %s", first.status, first.body, again.status, again.body, other.status, other.body)
	}
	for _, c := range []struct{ body, field string }{
		{`{"ttl_seconds":0.5}`, "ttl_seconds"},
		{`{"ttl_seconds":999999999}`, "ttl_seconds"},
		{`{"expose_ports":[70000]}`, "expose_ports"},
		{`{"network":"some"}`, "network"},
		{`{"network":"allowlist"}`, "allow_hosts"},
		{`{"labels":{"sandstep.owner":"x"}}`, "labels"},
		{`{"name":"../x"}`, "name"},
		{`{"memory_mb":1}`, "memory_mb"},
		{`{"network":"allowlist","allow_hosts":["not a host!"]}`, "allow_hosts"},
		{`{"expose_ports":["80"]}`, "expose_ports"},
		{`{"expose_ports":[0]}`, "expose_ports"},
		{`{"ttl_seconds":-5}`, "ttl_seconds"},
		{`{"labels":{"k":1}}`, "labels"},
	} {
		if r := e.do("POST", "/v1/sandboxes", tokenAcme, c.body); r.status != 400 || !strings.Contains(string(r.body), `"field":"`+c.field+`"`) {
			t.Errorf("create %s: %d %s", c.body, r.status, r.body)
		}
	}
	for _, id := range []any{first.json(t)["id"], other.json(t)["id"]} {
		tok := tokenAcme
		if id == other.json(t)["id"] {
			tok = tokenGlobex
		}
		if r := e.do("DELETE", "/v1/sandboxes/"+id.(string), tok, nil); r.status != 200 {
			t.Errorf("delete %v: %d %s", id, r.status, r.body)
		}
	}
	if r := e.do("DELETE", "/v1/sandboxes/"+sb.ID, tokenAcme, nil); r.status != 200 || r.json(t)["status"] != "terminated" {
		t.Errorf("delete: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/sandboxes/"+sb.ID+"/terminate", tokenAcme, nil); r.status != 200 {
		t.Errorf("terminate again: %d %s", r.status, r.body)
	}
	if n := e.liveSandboxes(); n != 0 {
		t.Errorf("%d sandboxes live after terminate", n)
	}
}

// shell runs a shell command in a sandbox and returns its stdout.
func shell(t *testing.T, c *client.Client, id, cmd string) string {
	t.Helper()
	var out bytes.Buffer
	if _, err := c.Run(ctxFor(t), id, client.ExecRequest{Command: cmd}, &out, nil); err != nil {
		t.Fatal(err)
	}
	return out.String()
}
