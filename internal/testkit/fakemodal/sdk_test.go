package fakemodal_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	modal "github.com/modal-labs/modal-client/go"

	"github.com/sandstep/sandstep/internal/testkit/fakemodal"
)

const (
	testTokenID     = "ak-fakemodaltest0001"
	testTokenSecret = "as-fakemodaltestsecret0001"
)

// start serves a fake; without a working bubblewrap the test is skipped,
// or fails under CI.
func start(t *testing.T, opts fakemodal.Options) *fakemodal.Running {
	t.Helper()
	opts.TokenID, opts.TokenSecret = testTokenID, testTokenSecret
	f, err := fakemodal.Start(opts, "")
	if errors.Is(err, fakemodal.ErrNoBubblewrap) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ids := f.Sandboxes(); len(ids) > 0 {
			t.Errorf("sandboxes left running on the fake: %v", ids)
		}
		_ = f.Close()
	})
	return f
}

// sdkClient is Modal's own Go client, pointed at the fake.
func sdkClient(t *testing.T, f *fakemodal.Running, secret string) *modal.Client {
	t.Helper()
	t.Setenv("MODAL_SERVER_URL", f.URL)
	t.Setenv("MODAL_CONFIG_PATH", t.TempDir()+"/none.toml")
	c, err := modal.NewClientWithOptions(&modal.ClientParams{TokenID: testTokenID, TokenSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestOfficialSDK drives the fake with the official Go SDK's own calls:
// app, registry image, a named and tagged V2 sandbox, exec with stdin and
// both streams, lookup by name, the name conflict, terminate and wait.
func TestOfficialSDK(t *testing.T) {
	// The first token expires almost at once: the SDK must refresh it.
	f := start(t, fakemodal.Options{FirstTokenTTL: 2 * time.Second})
	c := sdkClient(t, f, testTokenSecret)
	ctx := t.Context()

	app, err := c.Apps.FromName(ctx, "sdk-test", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatalf("Apps.FromName: %v", err)
	}
	img := c.Images.FromRegistry("python:3.12-slim", nil)
	sb, err := c.Sandboxes.Create(ctx, app, img, &modal.SandboxCreateParams{
		Name: "job-1", Tags: map[string]string{"owner": "sdk"}, Workdir: "/workspace",
		Env: map[string]string{"GREETING": "hello"}, Timeout: time.Minute,
	})
	if err != nil {
		t.Fatalf("Sandboxes.Create: %v", err)
	}
	if got := f.Tags(sb.SandboxID)["owner"]; got != "sdk" {
		t.Errorf("tag owner = %q, want sdk", got)
	}
	time.Sleep(2500 * time.Millisecond) // past the first token's expiry

	p, err := sb.Exec(ctx, []string{"sh", "-c", `read line; echo "$GREETING $line from $(pwd)"; echo oops >&2; exit 3`}, nil)
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if _, err := io.WriteString(p.Stdin, "world\n"); err != nil {
		t.Fatalf("stdin: %v", err)
	}
	if err := p.Stdin.Close(); err != nil {
		t.Fatalf("closing stdin: %v", err)
	}
	out, err := io.ReadAll(p.Stdout)
	if err != nil {
		t.Fatalf("stdout: %v", err)
	}
	errOut, _ := io.ReadAll(p.Stderr)
	code, err := p.Wait(ctx, nil)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if string(out) != "hello world from /workspace\n" || string(errOut) != "oops\n" || code != 3 {
		t.Errorf("exec = %q, %q, exit %d; want the greeting, oops and exit 3", out, errOut, code)
	}

	again, err := c.Sandboxes.FromName(ctx, "sdk-test", "job-1", nil)
	if err != nil || again.SandboxID != sb.SandboxID {
		t.Errorf("FromName = %v, %v; want %s", again, err, sb.SandboxID)
	}
	_, err = c.Sandboxes.Create(ctx, app, img, &modal.SandboxCreateParams{Name: "job-1"})
	var exists modal.AlreadyExistsError
	if !errors.As(err, &exists) || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second create with the name: %v; want AlreadyExistsError", err)
	}

	if _, err := sb.Terminate(ctx, nil); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	code, err = sb.Wait(ctx, nil)
	if err != nil || code != 137 {
		t.Errorf("Wait after terminate = %d, %v; want 137", code, err)
	}
	if _, err := c.Sandboxes.FromName(ctx, "sdk-test", "job-1", nil); !errors.As(err, new(modal.NotFoundError)) {
		t.Errorf("FromName after terminate: %v; want NotFoundError", err)
	}
	if s := f.Stats(); s.TokensIssued < 2 {
		t.Errorf("the SDK took %d auth tokens; the short first one should have been refreshed", s.TokensIssued)
	}
}

// TestSDKBadSecret: a wrong secret is refused, and the refusal does not
// carry it.
func TestSDKBadSecret(t *testing.T) {
	f := start(t, fakemodal.Options{})
	c := sdkClient(t, f, "as-wrong-secret-value")
	_, err := c.Apps.FromName(t.Context(), "sdk-test", &modal.AppFromNameParams{CreateIfMissing: true})
	if err == nil {
		t.Fatal("a wrong token secret was accepted")
	}
	if strings.Contains(err.Error(), "as-wrong-secret-value") {
		t.Errorf("the error carries the secret: %v", err)
	}
}

// TestSDKTimeouts: Modal's lifetime and idle timeouts end sandboxes with
// their results, which the SDK maps to exit codes.
func TestSDKTimeouts(t *testing.T) {
	f := start(t, fakemodal.Options{})
	c := sdkClient(t, f, testTokenSecret)
	ctx := t.Context()
	app, err := c.Apps.FromName(ctx, "sdk-test", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	img := c.Images.FromRegistry("alpine:3", nil)
	life, err := c.Sandboxes.Create(ctx, app, img, &modal.SandboxCreateParams{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	idle, err := c.Sandboxes.Create(ctx, app, img, &modal.SandboxCreateParams{Timeout: time.Minute, IdleTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if code, err := life.Wait(ctx, nil); err != nil || code != 124 {
		t.Errorf("lifetime: Wait = %d, %v; want 124", code, err)
	}
	if _, err := idle.Wait(ctx, nil); err != nil {
		t.Errorf("idle: Wait: %v", err)
	}
	if st, _ := f.Result(idle.SandboxID); st != "GENERIC_STATUS_IDLE_TIMEOUT" {
		t.Errorf("idle sandbox ended with %q, want IDLE_TIMEOUT", st)
	}
	if _, err := life.Exec(ctx, []string{"true"}, nil); err == nil {
		t.Error("exec into a timed-out sandbox succeeded")
	}
}

// TestMainServes: `sandstep fake-modal` serves until its context ends, on
// loopback only, and the official SDK reaches it.
func TestMainServes(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	t.Setenv("FAKE_MODAL_ID", testTokenID)
	t.Setenv("FAKE_MODAL_SECRET", testTokenSecret)
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- fakemodal.Main(ctx, []string{"-addr", "127.0.0.1:0", "-token-id-env", "FAKE_MODAL_ID", "-token-secret-env", "FAKE_MODAL_SECRET"}, pw, io.Discard)
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
	c := sdkClient(t, &fakemodal.Running{URL: m[1]}, testTokenSecret)
	if _, err := c.Apps.FromName(t.Context(), "main-test", &modal.AppFromNameParams{CreateIfMissing: true}); err != nil {
		t.Errorf("the SDK against fake-modal: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Main: %v", err)
	}
	if err := fakemodal.Main(t.Context(), []string{"-addr", "0.0.0.0:0", "-token-id-env", "FAKE_MODAL_ID", "-token-secret-env", "FAKE_MODAL_SECRET"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("Main on a public address: %v", err)
	}
}
