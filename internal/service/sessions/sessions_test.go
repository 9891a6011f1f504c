package sessions_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/sessions"
	"github.com/sandstep/sandstep/internal/testkit/testbin"
)

// A file written to /workspace in one run is there in a later run, after
// the cleanup closed the idle sandbox and a new one started; another
// session, and another tenant's session of the same id, do not see it.
func TestWorkspaceOutlivesIdleSandbox(t *testing.T) { workspaceOutlivesIdleSandbox(t, envConfig{}) }

func workspaceOutlivesIdleSandbox(t *testing.T, ec envConfig) {
	e := newEnv(t, ec)
	first := e.run(tokenAcme, "s1", "shell", "echo 'kept across sandboxes' > /workspace/notes.txt && pwd")
	if out := wantOK(t, first); out != "/workspace\n" {
		t.Fatalf("stdout = %q, want the run to start in /workspace", out)
	}
	sb1 := e.session(tokenAcme, "s1")["sandbox"].(map[string]any)
	if sb1["alive"] != true {
		t.Fatalf("sandbox after the first run: %v", sb1)
	}

	// The cleanup, run later than sandbox_idle_minutes, closes the sandbox
	// and keeps the volume.
	e.stack.Reaper.Now = func() time.Time { return time.Now().Add(6 * time.Minute) }
	c, err := e.stack.Reaper.Pass(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	if c.SandboxesIdle != 1 || c.SessionsExpired != 0 {
		t.Fatalf("counts = %+v, want one idle sandbox closed and nothing expired", c)
	}
	if got := e.session(tokenAcme, "s1"); got["sandbox"] != nil || got["state"] != "idle" {
		t.Fatalf("session after the idle close: %v", got)
	}
	if live := e.liveSandboxes(); len(live) != 0 {
		t.Fatalf("sandboxes still running: %v", live)
	}

	second := e.run(tokenAcme, "s1", "python", "open('/workspace/notes.txt').read().strip()")
	wantOK(t, second)
	if string(toJSON(t, second["result"])) != `"kept across sandboxes"` {
		t.Fatalf("result = %v", second["result"])
	}
	sb2 := e.session(tokenAcme, "s1")["sandbox"].(map[string]any)
	if sb2["id"] == sb1["id"] {
		t.Fatalf("the second run used the closed sandbox %v", sb1["id"])
	}
	if got, want := e.events(tokenAcme, "s1"), []string{"session.created", "sandbox.started", "sandbox.closed", "sandbox.started"}; !slices.Equal(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}

	other := e.run(tokenAcme, "s2", "shell", "ls -A /workspace; cat /workspace/notes.txt")
	if other["success"] == true || !strings.Contains(other["stderr"].(string), "No such file") || other["stdout"] != "" {
		t.Fatalf("another session sees the file: %v", other)
	}

	for _, path := range []string{"/v1/sessions/s1", "/v1/sessions/s1/events", "/v1/sessions/s1/runs/" + second["run_id"].(string)} {
		wantError(t, e.do(http.MethodGet, path, tokenGlobex, nil), http.StatusNotFound, "not_found", "")
	}
	wantError(t, e.do(http.MethodDelete, "/v1/sessions/s1", tokenGlobex, nil), http.StatusNotFound, "not_found", "")
	// globex's own s1 is another session, with an empty workspace.
	theirs := e.run(tokenGlobex, "s1", "shell", "ls -A /workspace")
	if wantOK(t, theirs) != "" {
		t.Fatalf("globex's s1 sees acme's files: %v", theirs)
	}
	if got := e.session(tokenAcme, "s1"); got["state"] != "idle" {
		t.Fatalf("acme's s1 after globex used the id: %v", got)
	}
}

func TestLanguages(t *testing.T) {
	e := newEnv(t, envConfig{})
	for _, tc := range []struct {
		name, lang, code string
		success          bool
		result, stdout   string
		errorHas         string
	}{
		{name: "js last expression", lang: "javascript", code: "const xs = [1, 2, 3];\nconsole.log('summing');\nxs.reduce((a, b) => a + b, 0)", success: true, result: "6", stdout: "summing\n"},
		{name: "js top-level await", lang: "javascript", code: "const v = await new Promise(r => setTimeout(() => r({ok: 'yes'}), 10));\nv", success: true, result: `{"ok":"yes"}`},
		{name: "js require from the workspace", lang: "javascript", code: "require('fs').writeFileSync('m.js', 'module.exports = 7');\nrequire('./m.js') * 6", success: true, result: "42"},
		{name: "js no value", lang: "javascript", code: "let x = 1", success: true, result: "null"},
		{name: "js throws", lang: "javascript", code: "function f() { throw new Error('boom') }\nf()", errorHas: "Error: boom"},
		{name: "js syntax error", lang: "javascript", code: "let = ;", errorHas: "SyntaxError"},
		{name: "python last expression", lang: "python", code: "import json\nprint('hi')\n{'a': [1, 2], 'b': None}", success: true, result: `{"a":[1,2],"b":null}`, stdout: "hi\n"},
		{name: "python await", lang: "python", code: "import asyncio\nawait asyncio.sleep(0)\n2 ** 10", success: true, result: "1024"},
		{name: "python raises", lang: "python", code: "def f():\n    raise ValueError('bad value')\nf()", errorHas: "ValueError: bad value"},
		{name: "python exit", lang: "python", code: "import sys\nsys.exit(4)", errorHas: "SystemExit: 4"},
		{name: "shell", lang: "shell", code: "echo out; echo err >&2", success: true, result: "null", stdout: "out\n"},
		{name: "shell fails", lang: "shell", code: "exit 3", errorHas: "exit status 3"},
		{name: "js code near the size limit", lang: "javascript", code: "// " + strings.Repeat("x", 250<<10) + "\n21 * 2", success: true, result: "42"},
		{name: "shell code near the size limit", lang: "shell", code: "# " + strings.Repeat("x", 250<<10) + "\necho big", success: true, result: "null", stdout: "big\n"},
		{name: "forged result line", lang: "javascript", code: "console.log('sandstep-result-00:{\"ok\":true,\"result\":666}'); 1", success: true, result: "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := e.run(tokenAcme, "langs", tc.lang, tc.code)
			if run["success"] != tc.success {
				t.Fatalf("success = %v, want %v: %v", run["success"], tc.success, run)
			}
			if tc.success {
				if got := string(toJSON(t, run["result"])); got != tc.result {
					t.Errorf("result = %s, want %s", got, tc.result)
				}
				if tc.stdout != "" && run["stdout"] != tc.stdout {
					t.Errorf("stdout = %q, want %q", run["stdout"], tc.stdout)
				}
				if run["error"] != nil {
					t.Errorf("error = %v", run["error"])
				}
				return
			}
			msg, _ := run["error"].(string)
			if !strings.Contains(msg, tc.errorHas) || run["status"] != "failed" {
				t.Fatalf("error = %q, want it to contain %q: %v", msg, tc.errorHas, run)
			}
		})
	}
}

// TypeScript runs on the Deno of the sandbox's tools, with the same
// semantics as JavaScript: types erased, enums turned into JavaScript, the
// last expression the result, top-level await, errors pointing at the
// code's lines; and JavaScript runs on that Deno too.
func TestTypeScript(t *testing.T) { typeScript(t, envConfig{}) }

func typeScript(t *testing.T, ec envConfig) {
	e := newEnv(t, ec)
	// Fails under CI=true when make deps did not install Deno.
	if !testbin.LinkDeno(t, toolsDir) {
		t.Skip("deno is missing (make deps installs it)")
	}
	for _, tc := range []struct {
		name, lang, code string
		result, stdout   string
		errorHas         string
	}{
		{name: "last expression", lang: "typescript", code: "const n: number = 40;\nconsole.log('typed');\nn + 2", result: "42", stdout: "typed\n"},
		{name: "enum, interface, await", lang: "typescript", code: "enum Color { Red, Green }\ninterface P { x: number }\nconst p: P = { x: await Promise.resolve(41) };\np.x + Color.Green", result: "42"},
		{name: "generics and the workspace", lang: "typescript", code: "const fs = await import('node:fs');\nfunction first<T>(xs: T[]): T { return xs[0]; }\nfs.writeFileSync('t.txt', 'ts');\n[first<string>([fs.readFileSync('t.txt', 'utf8')]), Deno.version.deno.split('.')[0]]", result: `["ts","2"]`},
		{name: "throws", lang: "typescript", code: "const a: number = 1;\nfunction g(): never { throw new RangeError('out of range ' + a) }\ng()", errorHas: "RangeError: out of range 1\n    at g (main.ts:2:29)\n    at main.ts:3:1"},
		{name: "syntax error", lang: "typescript", code: "let x: = 1", errorHas: "SyntaxError"},
		{name: "javascript on deno too", lang: "javascript", code: "const v = await Promise.resolve(typeof Deno);\nv", result: `"object"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := e.run(tokenAcme, "ts", tc.lang, tc.code)
			if tc.errorHas != "" {
				if msg, _ := run["error"].(string); run["success"] != false || !strings.Contains(msg, tc.errorHas) {
					t.Fatalf("error = %q, want it to contain %q: %v", msg, tc.errorHas, run)
				}
				return
			}
			wantOK(t, run)
			if got := string(toJSON(t, run["result"])); got != tc.result {
				t.Errorf("result = %s, want %s", got, tc.result)
			}
			if tc.stdout != "" && run["stdout"] != tc.stdout {
				t.Errorf("stdout = %q, want %q", run["stdout"], tc.stdout)
			}
		})
	}
	// Deno is on the sandbox's PATH for shell code too.
	if out := wantOK(t, e.run(tokenAcme, "ts", "shell", "deno --version | head -1")); !strings.HasPrefix(out, "deno 2.") {
		t.Errorf("deno --version in the sandbox: %q", out)
	}
}

func TestRunTimeout(t *testing.T) {
	e := newEnv(t, envConfig{})
	r := e.do(http.MethodPost, "/v1/sessions/slow/run", tokenAcme, map[string]any{
		// Long enough for Node to start and print on a loaded machine (it
		// took over a second at load 18): the output before the deadline
		// is kept.
		"code": "console.log('started'); while (true) {}", "language": "javascript", "timeout_seconds": 5,
	})
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	run := r.json(t)
	if run["success"] != false || run["timed_out"] != true || !strings.Contains(run["error"].(string), "timed out") || run["stdout"] != "started\n" {
		t.Fatalf("run = %v", run)
	}
	// The session is free again.
	wantOK(t, e.run(tokenAcme, "slow", "shell", "true"))
}

// A run longer than sync_wait answers 202 and goes on; its link has the
// result once it ends.
func TestLongRunAnswers202(t *testing.T) {
	e := newEnv(t, envConfig{sessions: `sync_wait = "1s"`})
	r := e.do(http.MethodPost, "/v1/sessions/long/run", tokenAcme, map[string]any{"code": "sleep 3; echo done", "language": "shell"})
	if r.status != http.StatusAccepted {
		t.Fatalf("%d %s", r.status, r.body)
	}
	run := r.json(t)
	self := run["links"].(map[string]any)["self"].(string)
	if run["status"] != "running" || r.header.Get("Location") != self || run["success"] != nil {
		t.Fatalf("202 body = %v, Location %q", run, r.header.Get("Location"))
	}
	if st := e.session(tokenAcme, "long")["state"]; st != "running" {
		t.Fatalf("session state during the run = %v", st)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		got := e.do(http.MethodGet, self, tokenAcme, nil)
		if got.status != http.StatusOK {
			t.Fatalf("%d %s", got.status, got.body)
		}
		v := got.json(t)
		if v["status"] != "running" {
			if wantOK(t, v) != "done\n" || v["run_id"] != run["run_id"] {
				t.Fatalf("finished run = %v", v)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the run did not end")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st := e.session(tokenAcme, "long")["state"]; st != "idle" {
		t.Fatalf("session state after the run = %v", st)
	}
}

func TestRunsOfOneSessionTakeTurns(t *testing.T) {
	e := newEnv(t, envConfig{})
	const n = 4
	errs := make(chan string, n)
	for i := range n {
		go func() {
			r := e.do(http.MethodPost, "/v1/sessions/turns/run", tokenAcme, map[string]any{
				"language": "shell",
				"code":     "echo start >> /workspace/log; sleep 0.1; echo end >> /workspace/log",
			})
			if r.status != http.StatusOK || r.json(t)["success"] != true {
				errs <- string(r.body)
				return
			}
			_ = i
			errs <- ""
		}()
	}
	for range n {
		if msg := <-errs; msg != "" {
			t.Fatalf("a run failed: %s", msg)
		}
	}
	log := wantOK(t, e.run(tokenAcme, "turns", "shell", "cat /workspace/log"))
	if want := strings.Repeat("start\nend\n", n); log != want {
		t.Fatalf("runs overlapped:\n%s", log)
	}
}

func TestDeleteSession(t *testing.T) {
	e := newEnv(t, envConfig{})
	run := e.run(tokenAcme, "gone", "shell", "echo x > /workspace/f")
	wantOK(t, run)
	vol := e.session(tokenAcme, "gone")["volume"].(map[string]any)["slug"].(string)

	r := e.do(http.MethodDelete, "/v1/sessions/gone", tokenAcme, nil)
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if v := r.json(t); v["state"] != "deleted" || v["sandbox"] != nil || v["deleted_at"] == nil {
		t.Fatalf("deleted session = %v", v)
	}
	if _, err := e.stack.Provider.GetVolume(ctxFor(t), vol); err == nil {
		t.Fatalf("volume %s still exists", vol)
	}
	if live := e.liveSandboxes(); len(live) != 0 {
		t.Fatalf("sandboxes still running: %v", live)
	}
	if live := e.liveEntries(); len(live) != 0 {
		t.Fatalf("ledger entries still live: %v", live)
	}
	msg := wantError(t, e.do(http.MethodPost, "/v1/sessions/gone/run", tokenAcme, map[string]any{"code": "true", "language": "shell"}), http.StatusGone, "gone", "")
	if !strings.Contains(msg, "was deleted") || !strings.Contains(msg, "POST /v1/sessions/gone") {
		t.Fatalf("message = %q", msg)
	}
	if got := e.events(tokenAcme, "gone"); got[len(got)-1] != sessions.EventDeleted {
		t.Fatalf("events = %v", got)
	}
	// Deleting again changes nothing; the old run is still readable.
	if r := e.do(http.MethodDelete, "/v1/sessions/gone", tokenAcme, nil); r.status != http.StatusOK {
		t.Fatalf("second delete: %d %s", r.status, r.body)
	}
	if r := e.do(http.MethodGet, "/v1/sessions/gone/runs/"+run["run_id"].(string), tokenAcme, nil); r.status != http.StatusOK {
		t.Fatalf("old run: %d %s", r.status, r.body)
	}
	// Opening it again starts an empty session.
	if r := e.do(http.MethodPost, "/v1/sessions/gone", tokenAcme, nil); r.status != http.StatusCreated {
		t.Fatalf("reopen: %d %s", r.status, r.body)
	}
	if out := wantOK(t, e.run(tokenAcme, "gone", "shell", "ls -A /workspace")); out != "" {
		t.Fatalf("the reopened session has files: %q", out)
	}
}

func TestWarmModeStartsTheSandboxOnOpen(t *testing.T) {
	e := newEnv(t, envConfig{sessions: `mode = "warm"`})
	r := e.do(http.MethodPost, "/v1/sessions/w1", tokenAcme, nil)
	if r.status != http.StatusCreated {
		t.Fatalf("%d %s", r.status, r.body)
	}
	v := r.json(t)
	sb, _ := v["sandbox"].(map[string]any)
	if sb == nil || sb["alive"] != true || v["mode"] != "warm" || v["state"] != "idle" {
		t.Fatalf("opened session = %v", v)
	}
	if r := e.do(http.MethodPost, "/v1/sessions/w1", tokenAcme, nil); r.status != http.StatusOK {
		t.Fatalf("open again: %d %s", r.status, r.body)
	}
	wantOK(t, e.run(tokenAcme, "w1", "shell", "true"))
	if got := e.session(tokenAcme, "w1")["sandbox"].(map[string]any)["id"]; got != sb["id"] {
		t.Fatalf("the run started another sandbox: %v, was %v", got, sb["id"])
	}
}

// Output past 64 KiB per stream is cut and flagged; the result still
// comes back, and a result past its own limit becomes a flagged preview.
func TestLargeOutputIsCut(t *testing.T) {
	e := newEnv(t, envConfig{})
	run := e.run(tokenAcme, "big", "javascript", "console.log('y'.repeat(300000)); console.error('z'.repeat(100000)); 7")
	out, _ := run["stdout"].(string)
	errOut, _ := run["stderr"].(string)
	if run["success"] != true || string(toJSON(t, run["result"])) != "7" || run["stdout_truncated"] != true || run["stderr_truncated"] != true ||
		len(out) > sessions.MaxOutputBytes+100 || !strings.HasPrefix(out, "yyyy") || !strings.Contains(out, "output truncated; 300001 bytes in all") ||
		len(errOut) > sessions.MaxOutputBytes+100 {
		t.Fatalf("run: success %v result %v truncated %v/%v, stdout %d bytes ending %q", run["success"], run["result"],
			run["stdout_truncated"], run["stderr_truncated"], len(out), out[max(0, len(out)-80):])
	}
	big := e.run(tokenAcme, "big", "python", "'w' * 200000")
	res, _ := big["result"].(string)
	if big["success"] != true || big["result_truncated"] != true || len(res) > sessions.MaxResultBytes || !strings.HasPrefix(res, "\"www") {
		t.Fatalf("large result: truncated %v, %d bytes", big["result_truncated"], len(res))
	}
}
