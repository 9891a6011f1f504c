package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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

// serving is a `sandstep serve` run in this process.
type serving struct {
	url            string
	stdout, stderr *testlog.Buffer
	stop           func() result
}

// startServe runs `sandstep serve` with the config at cfg until the test
// stops it, and waits until it serves.
func startServe(t *testing.T, cfg string, extra ...string) *serving {
	t.Helper()
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	s := &serving{url: "http://" + addr, stdout: &testlog.Buffer{}, stderr: &testlog.Buffer{}}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"serve", "--config", cfg, "--addr", addr, "--log-level", "warn"}, extra...), s.stdout, s.stderr)
	}()
	ended := false
	s.stop = func() result {
		if !ended {
			cancel()
			select {
			case code := <-done:
				ended = true
				return result{code, s.stdout.String(), s.stderr.String()}
			case <-time.After(2 * time.Minute):
				t.Fatalf("serve did not stop:\n%s\n%s", s.stdout.String(), s.stderr.String())
			}
		}
		return result{}
	}
	t.Cleanup(func() { s.stop() })
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(s.stdout.String(), "try:") {
		select {
		case code := <-done:
			ended = true
			t.Fatalf("serve ended with %d before serving:\n%s\n%s", code, s.stdout.String(), s.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s\n%s", s.stdout.String(), s.stderr.String())
		}
	}
	return s
}

// status is the status code of GET path with token.
func (s *serving) status(t *testing.T, path, token string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// dev_token_env = "" turns the development token off: none is generated,
// the variable is not read, the banner says so, and only issued tokens get
// in.
func TestServeWithTheDevTokenOff(t *testing.T) {
	needBwrap(t)
	sum := sha256.Sum256([]byte(testToken))
	cfg := writeConfig(t, fmt.Sprintf(`
[server]
data_dir = %q
[provider]
plugin_dir = %q
[auth]
dev_token_env = ""
[[auth.tokens]]
tenant = "acme"
sha256 = %q
`, t.TempDir(), buildLocalPlugin(t), hex.EncodeToString(sum[:])))
	t.Setenv(envDevToken, devToken) // must not be read
	s := startServe(t, cfg)
	banner := s.stdout.String()
	if !strings.Contains(banner, `dev token: off ([auth] dev_token_env = ""); callers use the 1 issued token of [[auth.tokens]]`) ||
		!strings.Contains(banner, "web console: http://") ||
		strings.Contains(banner, "sdt_") || strings.Contains(banner, "set  to") || strings.Contains(banner, "tenant dev") {
		t.Errorf("banner:\n%s", banner)
	}
	if code := s.status(t, "/v1/providers", devToken); code != http.StatusUnauthorized {
		t.Errorf("the development variable's token: %d, want 401", code)
	}
	if code := s.status(t, "/v1/providers", testToken); code != http.StatusOK {
		t.Errorf("the issued token: %d, want 200", code)
	}
	if r := s.stop(); r.code != 0 {
		t.Errorf("serve exit %d: %s", r.code, r.stderr)
	}
}

// With the development token on and its variable unset, serve makes one
// up, shows it with the variable that would choose it, and accepts it.
func TestServeGeneratesADevToken(t *testing.T) {
	needBwrap(t)
	cfg := writeConfig(t, fmt.Sprintf("[server]\ndata_dir = %q\n[provider]\nplugin_dir = %q\n", t.TempDir(), buildLocalPlugin(t)))
	t.Setenv(envDevToken, "")
	s := startServe(t, cfg)
	banner := s.stdout.String()
	var token string
	for _, l := range strings.Split(banner, "\n") {
		if v, ok := strings.CutPrefix(l, "dev token (tenant dev): "); ok {
			token = v
		}
	}
	if !strings.HasPrefix(token, "sdt_") || !strings.Contains(banner, "set SANDSTEP_DEV_TOKEN to choose your own") ||
		!strings.Contains(banner, "SANDSTEP_DEV_TOKEN="+token+" bin/sandstep research") {
		t.Fatalf("banner:\n%s", banner)
	}
	if code := s.status(t, "/v1/providers", token); code != http.StatusOK {
		t.Errorf("the generated token: %d, want 200", code)
	}
}

// A server nobody could call does not start: one line, before DynamoDB
// Local or a plugin is started.
func TestServeWithNoTokenOfAnyKindRefusesToStart(t *testing.T) {
	cfg := writeConfig(t, fmt.Sprintf("[server]\ndata_dir = %q\n[auth]\ndev_token_env = \"\"\n", t.TempDir()))
	r := runCLI(testCtx(t), "serve", "--config", cfg, "--addr", freeAddr(t))
	msg := strings.TrimRight(r.stderr, "\n")
	if r.code != 1 || strings.Contains(msg, "\n") || r.stdout != "" ||
		msg != `sandstep serve: no API token of any kind: the development token is off ([auth] dev_token_env = "") and [[auth.tokens]] lists none; add an [[auth.tokens]] entry (a tenant and the sha256 of its token)` {
		t.Errorf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}
