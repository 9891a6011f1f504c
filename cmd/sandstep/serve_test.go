package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/testkit/testlog"
)

// freeAddr is a 127.0.0.1 address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
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
