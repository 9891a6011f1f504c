package fakemodal_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
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
	// The first token expires almost at once: the SDK must refresh it; so
	// do the command router's JWTs.
	f := start(t, fakemodal.Options{FirstTokenTTL: 2 * time.Second, RouterTokenTTL: 2 * time.Second})
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

// TestSDKVolumesAndTags: volumes by name (a lookup that misses is
// NotFoundError), mounted read-write and read-only, kept across sandboxes
// and deleted; List by tags finds exactly the tagged sandboxes.
func TestSDKVolumesAndTags(t *testing.T) {
	f := start(t, fakemodal.Options{})
	c := sdkClient(t, f, testTokenSecret)
	ctx := t.Context()
	app, err := c.Apps.FromName(ctx, "sdk-vol", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	img := c.Images.FromRegistry("python:3.12-slim", nil)
	if _, err := c.Volumes.FromName(ctx, "sdk-data", nil); !errors.As(err, new(modal.NotFoundError)) {
		t.Fatalf("FromName of a missing volume: %v; want NotFoundError", err)
	}
	vol, err := c.Volumes.FromName(ctx, "sdk-data", &modal.VolumeFromNameParams{CreateIfMissing: true})
	if err != nil || !strings.HasPrefix(vol.VolumeID, "vo-") {
		t.Fatalf("Volumes.FromName(create): %+v, %v", vol, err)
	}
	if again, err := c.Volumes.FromName(ctx, "sdk-data", nil); err != nil || again.VolumeID != vol.VolumeID {
		t.Fatalf("FromName of the volume: %+v, %v; want %s", again, err, vol.VolumeID)
	}
	run := func(sb *modal.Sandbox, script string) (string, int) {
		t.Helper()
		p, err := sb.Exec(ctx, []string{"sh", "-c", script}, nil)
		if err != nil {
			t.Fatalf("Exec: %v", err)
		}
		out, _ := io.ReadAll(p.Stdout)
		code, err := p.Wait(ctx, nil)
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
		return string(out), code
	}
	writer, err := c.Sandboxes.Create(ctx, app, img, &modal.SandboxCreateParams{
		Volumes: map[string]*modal.Volume{"/data": vol}, Tags: map[string]string{"role": "writer", "job": "j1"}, Timeout: time.Minute,
	})
	if err != nil {
		t.Fatalf("Create with a volume: %v", err)
	}
	other, err := c.Sandboxes.Create(ctx, app, img, &modal.SandboxCreateParams{Tags: map[string]string{"role": "other", "job": "j1"}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, code := run(writer, "echo kept > /data/note"); code != 0 {
		t.Fatalf("writing to the volume: exit %d", code)
	}
	list := func(tags map[string]string) []string {
		t.Helper()
		it, err := c.Sandboxes.List(ctx, &modal.SandboxListParams{AppID: app.AppID, Tags: tags})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for sb, err := range it {
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			ids = append(ids, sb.SandboxID)
		}
		return ids
	}
	if got := list(map[string]string{"role": "writer", "job": "j1"}); len(got) != 1 || got[0] != writer.SandboxID {
		t.Errorf("List(role=writer, job=j1) = %v; want [%s]", got, writer.SandboxID)
	}
	if got := list(map[string]string{"job": "j1"}); len(got) != 2 {
		t.Errorf("List(job=j1) = %v; want both", got)
	}
	if got := list(map[string]string{"job": "j2"}); len(got) != 0 {
		t.Errorf("List(job=j2) = %v; want none", got)
	}
	for _, sb := range []*modal.Sandbox{writer, other} {
		if _, err := sb.Terminate(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := list(map[string]string{"job": "j1"}); len(got) != 0 {
		t.Errorf("List after terminate = %v; want none", got)
	}

	ro := true
	reader, err := c.Sandboxes.Create(ctx, app, img, &modal.SandboxCreateParams{
		Volumes: map[string]*modal.Volume{"/data": vol.WithMountOptions(&modal.VolumeMountOptionsParams{ReadOnly: &ro})}, Timeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := run(reader, "cat /data/note"); out != "kept\n" {
		t.Errorf("a later sandbox reads %q from the volume", out)
	}
	if _, code := run(reader, "echo x > /data/new 2>/dev/null"); code == 0 {
		t.Error("a read-only mount took a write")
	}
	if _, err := reader.Terminate(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Volumes.Delete(ctx, "sdk-data", nil); err != nil {
		t.Fatalf("Volumes.Delete: %v", err)
	}
	if _, err := c.Volumes.FromName(ctx, "sdk-data", nil); !errors.As(err, new(modal.NotFoundError)) {
		t.Errorf("FromName after Delete: %v; want NotFoundError", err)
	}
	if err := c.Volumes.Delete(ctx, "sdk-data", &modal.VolumeDeleteParams{AllowMissing: true}); err != nil {
		t.Errorf("Delete of a missing volume with AllowMissing: %v", err)
	}
}

// TestSDKRetryableFaults: the SDK rides out what the fake's retryable
// faults inject: RESOURCE_EXHAUSTED with Modal's RPCRetryPolicy on creates,
// UNAVAILABLE on the control plane and on the command router.
func TestSDKRetryableFaults(t *testing.T) {
	f := start(t, fakemodal.Options{Faults: fakemodal.Faults{CreatesPerSecond: 1, UnavailableEvery: 4, RouterUnavailableEvery: 3}})
	c := sdkClient(t, f, testTokenSecret)
	ctx := t.Context()
	app, err := c.Apps.FromName(ctx, "sdk-faults", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	img := c.Images.FromRegistry("python:3.12-slim", nil)
	var sbs []*modal.Sandbox
	for i := range 3 {
		sb, err := c.Sandboxes.Create(ctx, app, img, &modal.SandboxCreateParams{Name: fmt.Sprintf("fault-%d", i), Timeout: time.Minute})
		if err != nil {
			t.Fatalf("Create #%d under faults: %v", i, err)
		}
		sbs = append(sbs, sb)
		p, err := sb.Exec(ctx, []string{"echo", "ok"}, nil)
		if err != nil {
			t.Fatalf("Exec under faults: %v", err)
		}
		out, _ := io.ReadAll(p.Stdout)
		if code, err := p.Wait(ctx, nil); err != nil || code != 0 || string(out) != "ok\n" {
			t.Errorf("exec under faults: %q, exit %d, %v", out, code, err)
		}
	}
	for _, sb := range sbs {
		if _, err := sb.Terminate(ctx, nil); err != nil {
			t.Errorf("Terminate under faults: %v", err)
		}
	}
	if s := f.Stats(); s.RateLimited == 0 || s.Unavailable == 0 || s.RouterUnavailable == 0 {
		t.Errorf("the faults were not all met: %+v", s)
	}
}

// TestSDKStaleContainer: after the fake removes a running sandbox's
// container, the SDK's exec fails (router NOT_FOUND, or the router access
// refused for a finished task) and Wait reports it terminated.
func TestSDKStaleContainer(t *testing.T) {
	f := start(t, fakemodal.Options{})
	c := sdkClient(t, f, testTokenSecret)
	ctx := t.Context()
	app, err := c.Apps.FromName(ctx, "sdk-stale", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Sandboxes.Create(ctx, app, c.Images.FromRegistry("python:3.12-slim", nil), &modal.SandboxCreateParams{Name: "stale", Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !f.Vanish(sb.SandboxID) {
		t.Fatal("Vanish found no running sandbox")
	}
	if p, err := sb.Exec(ctx, []string{"true"}, nil); err == nil {
		if _, err := p.Wait(ctx, nil); err == nil {
			t.Error("exec into a removed container succeeded")
		}
	}
	if code, err := sb.Wait(ctx, nil); err != nil || code != 137 {
		t.Errorf("Wait of a removed container = %d, %v; want 137 (terminated)", code, err)
	}
	if _, err := c.Sandboxes.FromName(ctx, "sdk-stale", "stale", nil); !errors.As(err, new(modal.NotFoundError)) {
		t.Errorf("FromName of a removed container: %v; want NotFoundError", err)
	}
}

// TestSDKExecTimeout: an exec's timeout_secs ends the command on the
// fake's side, with the SDK's reading of how it ended.
func TestSDKExecTimeout(t *testing.T) {
	f := start(t, fakemodal.Options{})
	c := sdkClient(t, f, testTokenSecret)
	ctx := t.Context()
	app, err := c.Apps.FromName(ctx, "sdk-timeout", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Sandboxes.Create(ctx, app, c.Images.FromRegistry("python:3.12-slim", nil), &modal.SandboxCreateParams{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Terminate(context.WithoutCancel(ctx), nil)
	began := time.Now()
	p, err := sb.Exec(ctx, []string{"sh", "-c", "sleep 60 & sleep 60"}, &modal.SandboxExecParams{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	code, err := p.Wait(ctx, nil)
	t.Logf("exec past its timeout: exit %d, %v after %s", code, err, time.Since(began).Round(time.Millisecond))
	if err == nil && code == 0 {
		t.Error("an exec past its timeout ended well")
	}
	if time.Since(began) > 30*time.Second {
		t.Error("the exec's timeout did not end it")
	}
}

// TestSDKFilesystemSnapshot: the SDK's filesystem snapshot is an image
// that new sandboxes start from, with the files the first one wrote; an
// ENV layer built on it by the SDK sets the environment; a published name
// finds it; a sandbox from a plain image does not see the files.
func TestSDKFilesystemSnapshot(t *testing.T) {
	f := start(t, fakemodal.Options{})
	c := sdkClient(t, f, testTokenSecret)
	ctx := t.Context()
	app, err := c.Apps.FromName(ctx, "sdk-snap", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	base := c.Images.FromRegistry("python:3.12-slim", nil)
	run := func(sb *modal.Sandbox, script string) string {
		t.Helper()
		p, err := sb.Exec(ctx, []string{"sh", "-c", script}, nil)
		if err != nil {
			t.Fatalf("Exec: %v", err)
		}
		out, _ := io.ReadAll(p.Stdout)
		if _, err := p.Wait(ctx, nil); err != nil {
			t.Fatalf("Wait: %v", err)
		}
		return string(out)
	}
	// An image from commands on the registry image, as [provider.modal]
	// image_commands make one.
	withCommands := base.DockerfileCommands([]string{"RUN pip install httpx", `ENV FROM_COMMANDS=yes`}, nil)
	if _, err := withCommands.Build(ctx, app, nil); err != nil || !strings.HasPrefix(withCommands.ImageID, "im-") {
		t.Fatalf("an image from commands: %q, %v", withCommands.ImageID, err)
	}
	builder, err := c.Sandboxes.Create(ctx, app, withCommands, &modal.SandboxCreateParams{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if out := run(builder, `echo "$FROM_COMMANDS"`); out != "yes\n" {
		t.Errorf("the ENV of an image from commands: %q", out)
	}
	run(builder, "mkdir -p /opt/tool && echo built > /opt/tool/mark && echo ws > /workspace/w")
	snap, err := builder.SnapshotFilesystem(ctx, &modal.SandboxSnapshotFilesystemParams{TTL: modal.NoExpiryTTL})
	if err != nil || !strings.HasPrefix(snap.ImageID, "im-") {
		t.Fatalf("SnapshotFilesystem: %+v, %v", snap, err)
	}
	if _, err := builder.Terminate(ctx, nil); err != nil {
		t.Fatal(err)
	}
	layered := snap.DockerfileCommands([]string{`ENV GREETING="hello there"`}, nil)
	if _, err := layered.Build(ctx, app, nil); err != nil {
		t.Fatalf("building on the snapshot: %v", err)
	}
	if err := layered.Publish(ctx, "sdk-snap-image:v1", nil); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	named, err := c.Images.FromName(ctx, "sdk-snap-image:v1", nil)
	if err != nil || named.ImageID != layered.ImageID {
		t.Fatalf("Images.FromName = %+v, %v; want %s", named, err, layered.ImageID)
	}
	if _, err := c.Images.FromName(ctx, "sdk-snap-image:v2", nil); !errors.As(err, new(modal.NotFoundError)) {
		t.Errorf("FromName of an unpublished tag: %v; want NotFoundError", err)
	}
	child, err := c.Sandboxes.Create(ctx, app, named, &modal.SandboxCreateParams{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if out := run(child, `cat /opt/tool/mark /workspace/w; echo "$GREETING"`); out != "built\nws\nhello there\n" {
		t.Errorf("a sandbox from the snapshot sees %q", out)
	}
	plain, err := c.Sandboxes.Create(ctx, app, base, &modal.SandboxCreateParams{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if out := run(plain, "test -e /opt/tool/mark && echo present || echo absent"); out != "absent\n" {
		t.Errorf("a plain sandbox sees the snapshot's files: %q", out)
	}
	for _, sb := range []*modal.Sandbox{child, plain} {
		if _, err := sb.Terminate(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
}
