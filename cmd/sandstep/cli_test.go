package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/service/version"
)

func TestVersionAndHelp(t *testing.T) {
	ctx := testCtx(t)
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		r := runCLI(ctx, args...)
		wantCode(t, r, 0)
		if !strings.HasPrefix(r.stdout, "sandstep "+version.Version+" (plugin API v") {
			t.Fatalf("%v: %+v", args, r)
		}
	}
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		r := runCLI(ctx, args...)
		wantCode(t, r, 0)
		if !strings.HasPrefix(r.stdout, "usage: sandstep COMMAND [flags]\n") || !strings.Contains(r.stdout, "  sessions ") {
			t.Fatalf("%v: %+v", args, r)
		}
	}
	wantCode(t, runCLI(ctx), 2)
	r := runCLI(ctx, "help", "nope")
	wantCode(t, r, 2)
	if !strings.HasPrefix(r.stderr, `sandstep help: unknown command "nope"`) {
		t.Fatalf("help nope: %+v", r)
	}

	// Every command: help CMD, CMD -h and CMD --help print the same usage
	// to stdout and exit 0.
	for name, c := range commands() {
		if name == "fake-sandy" || name == "fake-deno" || name == "fake-modal" {
			continue // their flags are the fakes' Main's, with the same synopsis line
		}
		help := runCLI(ctx, "help", name)
		wantCode(t, help, 0)
		want := fmt.Sprintf("%s\n\n%s.\n", strings.TrimSpace("usage: sandstep "+name+" "+c.args), upperFirst(c.summary))
		if !strings.HasPrefix(help.stdout, want) || help.stderr != "" {
			t.Fatalf("help %s:\n%s\nwant it to start:\n%s", name, help.stdout, want)
		}
		if strings.Contains(help.stdout, "  -h\n") || strings.Contains(help.stdout, "  -help\n") {
			t.Fatalf("help %s lists -h:\n%s", name, help.stdout)
		}
		for _, flag := range []string{"-h", "--help"} {
			r := runCLI(ctx, name, flag)
			wantCode(t, r, 0)
			if r.stdout != help.stdout || r.stderr != "" {
				t.Fatalf("%s %s:\n%s\nwant:\n%s", name, flag, r.stdout, help.stdout)
			}
		}
	}
}

func TestUsageErrorsNameTheProblem(t *testing.T) {
	ctx := testCtx(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"status"}, "sandstep status: missing ID\nusage: sandstep status ID [flags]\nRun 'sandstep help status' for the flags.\n"},
		{[]string{"submit"}, "sandstep submit: missing QUERY\n"},
		{[]string{"submit", "  "}, "sandstep submit: QUERY is empty\n"},
		{[]string{"report", "a", "b"}, "sandstep report: unexpected argument \"b\"\n"},
		{[]string{"events", "--after"}, "sandstep events: flag needs an argument: -after\n"},
		{[]string{"cancel", "x", "--nope"}, "sandstep cancel: flag provided but not defined: -nope\n"},
		{[]string{"serve", "extra"}, "sandstep serve: unexpected argument \"extra\"\n"},
		{[]string{"run-code", "-e", "1", "--language", "ruby"}, "sandstep run-code: --language \"ruby\" is not one of typescript, javascript, python, shell\n"},
		{[]string{"run-code", "a.py", "-e", "1"}, "sandstep run-code: both FILE \"a.py\" and -e given: pass one of them\n"},
		{[]string{"sessions", "list", "x"}, "sandstep sessions: list: unexpected argument \"x\"\n"},
		{[]string{"sessions", "delete"}, "sandstep sessions: delete: missing SID\n"},
		{[]string{"sessions", "drop", "x"}, "sandstep sessions: unknown subcommand \"drop\" (list, show, open or delete)\n"},
		{[]string{"jobs", "x"}, "sandstep jobs: unexpected argument \"x\"\n"},
	} {
		r := runCLI(ctx, tc.args...)
		wantCode(t, r, 2)
		if !strings.HasPrefix(r.stderr, tc.want) || r.stdout != "" {
			t.Errorf("%q: stderr %q, want it to start %q", tc.args, r.stderr, tc.want)
		}
	}
}

// With neither --server nor SANDSTEP_URL, client commands find the server
// at the config's [server] addr; a server listening on every interface is
// reached on loopback; with no config file at all, the built-in default.
func TestClientFindsTheServerOfTheConfig(t *testing.T) {
	e := newEnv(t, true, false)
	t.Setenv(envServer, "")
	t.Setenv(envToken, testToken)
	ctx := testCtx(t)
	addr := strings.TrimPrefix(e.url, "http://")
	cfg := writeConfig(t, fmt.Sprintf("[server]\naddr = %q\n", addr))
	wantCode(t, runCLI(ctx, "submit", "q", "--job-id", "cfg-1", "--config", cfg), 0)
	r := runCLI(ctx, "status", "cfg-1", "--config", cfg)
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "cfg-1") {
		t.Fatalf("status through the config's addr: %+v", r)
	}
	// SANDSTEP_CONFIG names the config as for serve.
	t.Setenv("SANDSTEP_CONFIG", cfg)
	wantCode(t, runCLI(ctx, "status", "cfg-1"), 0)
	// SANDSTEP_URL wins over the config.
	t.Setenv(envServer, "http://127.0.0.1:1")
	r = runCLI(ctx, "status", "cfg-1")
	wantCode(t, r, 1)
	if !strings.Contains(r.stderr, "no sandstep server is running at http://127.0.0.1:1") {
		t.Fatalf("SANDSTEP_URL ignored: %+v", r)
	}
	t.Setenv(envServer, "")

	// A config that does not load is said, not skipped for port 8080.
	bad := writeConfig(t, "[server]\nadr = \"x\"\n")
	r = runCLI(ctx, "status", "cfg-1", "--config", bad)
	wantCode(t, r, 1)
	if !strings.Contains(r.stderr, "finding the server in "+bad) || !strings.Contains(r.stderr, `did you mean "addr"`) {
		t.Fatalf("bad config: %+v", r)
	}
	t.Setenv("SANDSTEP_CONFIG", "")
	f := clientFlags{server: new(string), config: new(string)}
	*f.config = t.TempDir() + "/none.toml"
	if got, err := f.serverURL(); err != nil || got != defaultServer {
		t.Fatalf("no config: %q %v", got, err)
	}

	for listen, dial := range map[string]string{
		"0.0.0.0:9090": "127.0.0.1:9090", "[::]:9090": "[::1]:9090", ":9090": "127.0.0.1:9090",
		"127.0.0.1:8080": "127.0.0.1:8080", "10.1.2.3:80": "10.1.2.3:80",
	} {
		if got := dialAddr(listen); got != dial {
			t.Errorf("dialAddr(%q) = %q, want %q", listen, got, dial)
		}
	}
}

// --json prints the API's answers, one JSON document a line, for scripts.
func TestClientJSON(t *testing.T) {
	e := newEnv(t, true, false)
	r := e.run("submit", "q", "--job-id", "js-1", "--json")
	wantCode(t, r, 0)
	var sub struct {
		JobID  string `json:"job_id"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &sub); err != nil || sub.JobID != "js-1" || sub.Status == "" || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("submit --json: %q %v", r.stdout, err)
	}
	e.appendEvents("js-1", 1, 3)
	r = e.run("events", "js-1", "--json")
	wantCode(t, r, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 {
		t.Fatalf("events --json: %q", r.stdout)
	}
	for i, line := range lines {
		var ev struct {
			Seq     int64  `json:"seq"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.Seq != int64(i+1) || ev.Message != fmt.Sprintf("page %d\nof the site", i+1) {
			t.Fatalf("event line %q: %+v %v", line, ev, err)
		}
	}
	r = e.run("cancel", "js-1", "--json")
	wantCode(t, r, 0)
	if err := json.Unmarshal([]byte(r.stdout), &sub); err != nil || sub.JobID != "js-1" {
		t.Fatalf("cancel --json: %q %v", r.stdout, err)
	}

	// submit --wait --json: the answer, the events, then the final status.
	out, wait := e.start("submit", "q2", "--job-id", "js-2", "--wait", "--json")
	waitFor(t, "the submit answer", func() bool { return strings.Contains(out.String(), `"job_id":"js-2"`) })
	e.appendEvents("js-2", 1, 2)
	e.setStatus("js-2", store.StatusRunning, "")
	e.setStatus("js-2", store.StatusSucceeded, "")
	r = wait()
	wantCode(t, r, 0)
	lines = strings.Split(strings.TrimSpace(r.stdout), "\n")
	var final struct {
		JobID  string `json:"job_id"`
		Status string `json:"status"`
	}
	if len(lines) != 4 || json.Unmarshal([]byte(lines[3]), &final) != nil || final.Status != "succeeded" {
		t.Fatalf("submit --wait --json:\n%s", r.stdout)
	}
	for _, line := range lines {
		if !json.Valid([]byte(line)) {
			t.Fatalf("not a JSON line: %q", line)
		}
	}
}

// openPTY returns the two ends of a new pseudo-terminal.
func openPTY(t *testing.T) (ptm, pts *os.File) {
	t.Helper()
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminal here: %v", err)
	}
	ptm = os.NewFile(uintptr(fd), "/dev/ptmx")
	t.Cleanup(func() { ptm.Close() })
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	pts, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pts.Close() })
	if err := unix.IoctlSetWinsize(int(pts.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: 40}); err != nil {
		t.Fatal(err)
	}
	return ptm, pts
}

// On a terminal each view replaces the last one in place (lines cut to the
// terminal's width, so that none wraps); elsewhere views are appended as
// they are.
func TestLiveViewRedrawsInPlaceOnlyOnATerminal(t *testing.T) {
	view1 := "\njob: running\n  [>] Searching the web\n"
	view2 := "\njob: running\n  [x] Searching the web\n  [>] Crawling sources " + strings.Repeat("#", 40) + "\n"

	var buf bytes.Buffer
	v := newLiveView(&buf)
	v.show(view1)
	v.note("warning: searxng failed")
	v.show(view2)
	if want := view1 + "warning: searxng failed\n" + view2; buf.String() != want {
		t.Fatalf("not a terminal: %q, want %q", buf.String(), want)
	}

	ptm, pts := openPTY(t)
	// The terminal would turn \n into \r\n: raw, it passes bytes as written.
	tio, err := unix.IoctlGetTermios(int(pts.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Oflag &^= unix.OPOST
	if err := unix.IoctlSetTermios(int(pts.Fd()), unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}
	// run-code with a terminal for standard input and no code says what is
	// missing instead of waiting for an end of file.
	stdin = pts
	r := runCLI(testCtx(t), "run-code", "--server", "http://127.0.0.1:1", "--token", testToken)
	stdin = os.Stdin
	wantCode(t, r, 2)
	if !strings.HasPrefix(r.stderr, "sandstep run-code: missing the code: FILE, -e CODE, or code piped to standard input\n") {
		t.Fatalf("run-code on a terminal: %+v", r)
	}

	v = newLiveView(pts)
	if !v.tty || v.width != 40 {
		t.Fatalf("the pty is not seen as a 40-column terminal: %+v", v)
	}
	v.show(view1)
	v.note("warning: searxng failed")
	v.show(view2)
	cut := "  [>] Crawling sources " + strings.Repeat("#", 16) // 39 columns
	want := view1 +
		"\x1b[3F\x1b[J" + "warning: searxng failed\n" + view1 +
		"\x1b[3F\x1b[J" + "\njob: running\n  [x] Searching the web\n" + cut + "\n"
	got := make([]byte, 0, len(want))
	buf2 := make([]byte, 4096)
	ptm.SetReadDeadline(time.Now().Add(5 * time.Second))
	for len(got) < len(want) {
		n, err := ptm.Read(buf2)
		if err != nil {
			t.Fatalf("read %q so far: %v", got, err)
		}
		got = append(got, buf2[:n]...)
	}
	if string(got) != want {
		t.Fatalf("terminal got\n%q\nwant\n%q", got, want)
	}
}
