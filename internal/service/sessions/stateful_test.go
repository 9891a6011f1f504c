package sessions_test

import (
	"net/http"
	"strings"
	"testing"
)

// runStateful posts a stateful run and returns the finished run.
func (e *env) runStateful(token, sid, language, code string, timeoutSeconds int) map[string]any {
	e.t.Helper()
	body := map[string]any{"code": code, "language": language, "stateful": true}
	if timeoutSeconds > 0 {
		body["timeout_seconds"] = timeoutSeconds
	}
	return e.finished(token, sid, e.do(http.MethodPost, "/v1/sessions/"+sid+"/run", token, body))
}

// interpreter returns a stateful run's interpreter object.
func interpreter(t testing.TB, run map[string]any) map[string]any {
	t.Helper()
	in, ok := run["interpreter"].(map[string]any)
	if !ok {
		t.Fatalf("run without an interpreter: %v", run)
	}
	return in
}

// Variables and imports set in one stateful run are there in the next;
// output, results and errors come back as from stateless runs, and a
// failing run keeps the state. Stateless runs stay on their own.
func TestStatefulKeepsState(t *testing.T) {
	e := newEnv(t, envConfig{})
	for _, c := range []struct {
		lang, set, get, raise, errorHas string
	}{
		{"python", "import json\nx = 41\nprint('set')", "print('reading', file=__import__('sys').stderr)\njson.dumps([x + 1])",
			"def f():\n    raise ValueError('bad value')\nf()", "ValueError: bad value"},
		{"javascript", "var fs = require('fs');\nvar x = 41;\nconsole.log('set')", "console.error('reading');\nJSON.stringify([x + 1])",
			"function f() { throw new Error('boom') }\nf()", "Error: boom"},
	} {
		t.Run(c.lang, func(t *testing.T) {
			sid := "stateful-" + c.lang
			run := e.runStateful(tokenAcme, sid, c.lang, c.set, 0)
			if out := wantOK(t, run); out != "set\n" {
				t.Errorf("stdout of the first run %q", out)
			}
			if in := interpreter(t, run); in["started"] != true || in["state_lost"] != nil {
				t.Errorf("first run's interpreter %v, want a started one with nothing lost", in)
			}
			run = e.runStateful(tokenAcme, sid, c.lang, c.get, 0)
			wantOK(t, run)
			if got := string(toJSON(t, run["result"])); got != `"[42]"` {
				t.Errorf("the second run read %s, want \"[42]\"", got)
			}
			if run["stderr"] != "reading\n" {
				t.Errorf("stderr %q", run["stderr"])
			}
			if in := interpreter(t, run); in["started"] != false {
				t.Errorf("second run's interpreter %v, want the first one's", in)
			}

			run = e.runStateful(tokenAcme, sid, c.lang, c.raise, 0)
			msg, _ := run["error"].(string)
			if run["success"] != false || !strings.Contains(msg, c.errorHas) || !strings.Contains(msg, "main.") {
				t.Errorf("a raising run: %v; want %q with where it was raised", run, c.errorHas)
			}
			wantOK(t, e.runStateful(tokenAcme, sid, c.lang, c.get, 0))

			// A stateless run in the same session has its own process.
			run = e.run(tokenAcme, sid, c.lang, "x")
			if run["success"] != false || run["interpreter"] != nil {
				t.Errorf("a stateless run saw the interpreter's state: %v", run)
			}
		})
	}
}

// A stateful run that times out ends its interpreter; the next run gets a
// fresh one and says the state was lost, and why.
func TestStatefulTimeoutRestartsInterpreter(t *testing.T) {
	e := newEnv(t, envConfig{})
	for _, c := range []struct{ lang, set, spin, get string }{
		{"python", "x = 1", "print('spinning', flush=True)\nwhile True: pass", "x"},
		{"javascript", "var x = 1", "console.log('spinning'); while (true) {}", "x"},
	} {
		t.Run(c.lang, func(t *testing.T) {
			sid := "restart-" + c.lang
			wantOK(t, e.runStateful(tokenAcme, sid, c.lang, c.set, 0))
			run := e.runStateful(tokenAcme, sid, c.lang, c.spin, 1)
			if run["timed_out"] != true || run["success"] != false || run["stdout"] != "spinning\n" {
				t.Fatalf("spinning run: %v", run)
			}
			run = e.runStateful(tokenAcme, sid, c.lang, c.get, 0)
			if run["success"] != false {
				t.Errorf("x survived the restart: %v", run)
			}
			in := interpreter(t, run)
			lost, _ := in["state_lost"].(string)
			if in["started"] != true || !strings.Contains(lost, "timed out") {
				t.Errorf("the run after the timeout: interpreter %v, want a started one saying the state was lost to the timeout", in)
			}
			// And the new interpreter keeps state again.
			wantOK(t, e.runStateful(tokenAcme, sid, c.lang, c.set, 0))
			if in := interpreter(t, wantRun(t, e.runStateful(tokenAcme, sid, c.lang, c.get, 0))); in["started"] != false || in["state_lost"] != nil {
				t.Errorf("the interpreter after the restart: %v", in)
			}
		})
	}
}

func wantRun(t testing.TB, run map[string]any) map[string]any {
	t.Helper()
	wantOK(t, run)
	return run
}

// Two sessions, of one tenant or of two, never share an interpreter.
func TestStatefulSessionsDoNotShare(t *testing.T) {
	e := newEnv(t, envConfig{})
	wantOK(t, e.runStateful(tokenAcme, "a", "python", "v = 'a'", 0))
	wantOK(t, e.runStateful(tokenAcme, "b", "python", "v = 'b'", 0))
	wantOK(t, e.runStateful(tokenGlobex, "a", "python", "v = 'globex'", 0))
	for _, c := range []struct{ token, sid, want string }{
		{tokenAcme, "a", `"a"`}, {tokenAcme, "b", `"b"`}, {tokenGlobex, "a", `"globex"`},
	} {
		if got := string(toJSON(t, wantRun(t, e.runStateful(c.token, c.sid, "python", "v", 0))["result"])); got != c.want {
			t.Errorf("session %s read v = %s, want %s", c.sid, got, c.want)
		}
	}
	run := e.runStateful(tokenAcme, "c", "python", "v", 0)
	if in := interpreter(t, run); run["success"] != false || in["started"] != true || in["state_lost"] != nil {
		t.Errorf("a new session's first run: %v", run)
	}
}

func TestStatefulShellIsRefused(t *testing.T) {
	e := newEnv(t, envConfig{})
	r := e.do(http.MethodPost, "/v1/sessions/sh/run", tokenAcme, map[string]any{"code": "true", "language": "shell", "stateful": true})
	wantError(t, r, http.StatusBadRequest, "invalid_argument", "stateful")
}

// A stateful run that runs out of memory says so, like a stateless one;
// the interpreter it killed is gone and the next run says why.
func TestStatefulOutOfMemory(t *testing.T) {
	e := newEnv(t, envConfig{sessions: "memory_mb = 256"})
	wantOK(t, e.runStateful(tokenAcme, "mem", "python", "x = 1", 0))
	run := e.runStateful(tokenAcme, "mem", "python", "chunks = [b'x' * (64 << 20) for i in range(16)]\nprint('survived')", 0)
	msg, _ := run["error"].(string)
	if run["success"] != false || run["oom"] != true || !strings.Contains(msg, "out of memory") {
		t.Fatalf("run = %v; want an out-of-memory error", run)
	}
	run = e.runStateful(tokenAcme, "mem", "python", "x", 0)
	in := interpreter(t, run)
	if lost, _ := in["state_lost"].(string); run["success"] != false || in["started"] != true || !strings.Contains(lost, "out of memory") {
		t.Errorf("the run after the OOM kill: %v", run)
	}
	wantOK(t, e.runStateful(tokenAcme, "mem", "python", "6 * 7", 0))
}
