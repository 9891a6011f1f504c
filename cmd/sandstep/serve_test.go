package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/testkit/testlog"
)

// The log of `sandstep serve` from start to a normal shutdown is one an
// operator can read: JSON lines each with its own level and message (no
// "INFO configured ..." relayed from a plugin), durations in milliseconds,
// no key twice, and no ERROR or WARN for the plugin ending with the server.
func TestServeLogIsReadable(t *testing.T) {
	needBwrap(t)
	defer slog.SetDefault(slog.Default())
	addr := freeAddr(t)
	cfg := writeConfig(t, fmt.Sprintf("[server]\naddr = %q\ndata_dir = %q\n[provider]\nplugin_dir = %q\n", addr, t.TempDir(), buildLocalPlugin(t)))
	t.Setenv(envDevToken, devToken)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	serveCtx, stop := context.WithCancel(ctx)
	var out, errb testlog.Buffer
	done := make(chan int, 1)
	go func() { done <- run(serveCtx, []string{"serve", "--config", cfg}, &out, &errb) }()
	waitFor(t, "the server", func() bool {
		res, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			res.Body.Close()
		}
		return err == nil && res.StatusCode == http.StatusOK
	})
	stop()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exited %d\n%s\n%s", code, out.String(), errb.String())
		}
	case <-time.After(90 * time.Second):
		t.Fatal("serve did not stop")
	}
	if strings.Contains(out.String(), "client commands: export") {
		t.Errorf("the banner asks for SANDSTEP_URL when serving on [server] addr:\n%s", out.String())
	}

	levelWord := regexp.MustCompile(`^(TRACE|DEBUG|INFO|WARN|ERROR)\b|^\[(TRACE|DEBUG|INFO|WARN|ERROR)\]`)
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(errb.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON line: %q", line)
		}
		msg, _ := m["msg"].(string)
		seen[msg] = true
		if levelWord.MatchString(msg) {
			t.Errorf("a level inside the message: %s", line)
		}
		if m["level"] == "ERROR" || m["level"] == "WARN" {
			t.Errorf("%s on a normal start and stop: %s", m["level"], line)
		}
		if n := strings.Count(line, `"provider":`); n > 1 {
			t.Errorf("provider %d times: %s", n, line)
		}
		if _, ok := m["took"]; ok {
			t.Errorf("a duration in nanoseconds: %s", line)
		}
	}
	for _, msg := range []string{"configured", "reaper startup pass", "plugin process exited"} {
		if !seen[msg] {
			t.Errorf("no %q line in:\n%s", msg, errb.String())
		}
	}
	if !strings.Contains(errb.String(), `"took_ms":`) {
		t.Errorf("no duration in ms:\n%s", errb.String())
	}

	// Served elsewhere (make run ADDR=...), the banner tells the client
	// commands where to look.
	other := freeAddr(t)
	serveCtx, stop = context.WithCancel(ctx)
	var banner testlog.Buffer
	go func() {
		done <- run(serveCtx, []string{"serve", "--config", cfg, "--addr", other}, &banner, &testlog.Buffer{})
	}()
	want := "client commands: export SANDSTEP_URL=http://" + other + " (this server does not listen on [server] addr)\n"
	for deadline := time.Now().Add(90 * time.Second); !strings.Contains(banner.String(), want); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("serve --addr banner:\n%s", banner.String())
		}
	}
	stop()
	if code := <-done; code != 0 {
		t.Fatalf("serve --addr exited %d:\n%s", code, banner.String())
	}

	r := runCLI(ctx, "serve", "--config", cfg, "--log-level", "loud")
	wantCode(t, r, 2)
	if !strings.HasPrefix(r.stderr, `sandstep serve: --log-level: unknown log level "loud" (debug, info, warn or error)`) {
		t.Errorf("bad level: %q", r.stderr)
	}
}
