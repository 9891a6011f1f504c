package sandy_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/testkit/fakesandy"
	"github.com/sandstep/sandstep/internal/testkit/testlog"
	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/sandy"
)

func wantCode(t *testing.T, what string, err error, code providers.Code) {
	t.Helper()
	if got := providers.CodeOf(err); err == nil || got != code {
		t.Errorf("%s: error %v (code %s), want code %s", what, err, got, code)
	}
}

func create(t *testing.T, p providers.Provider) providers.Sandbox {
	t.Helper()
	sb, err := p.Create(t.Context(), providers.CreateSpec{Lifetime: 10 * time.Minute})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := p.Terminate(ctx, sb.ID); err != nil {
			t.Errorf("Terminate(%s): %v", sb.ID, err)
		}
	})
	return sb
}

func sh(t *testing.T, p providers.Provider, id, script string) string {
	t.Helper()
	var out, errOut strings.Builder
	res, err := p.Exec(t.Context(), id, providers.ExecRequest{Shell: script, Stdout: &out, Stderr: &errOut, Timeout: time.Minute})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%q: exit %d, error %v; stderr %s", script, res.ExitCode, err, errOut.String())
	}
	return out.String()
}

// TestFatalErrors checks that what retrying cannot fix surfaces at once with
// its code.
func TestFatalErrors(t *testing.T) {
	f, log := startFake(t, fakesandy.Options{})
	p := startPlugin(t, settingsFor(f.URL, map[string]any{"max_retries": 3}), testKey, nil)
	ctx := t.Context()

	creates := func(status int) int {
		return log.count(func(q request) bool { return q.method == "POST" && q.path == "/api/sandboxes" && q.status == status })
	}
	_, err := p.Create(ctx, providers.CreateSpec{Priority: 7})
	wantCode(t, "Create with a priority Sandy refuses (422)", err, providers.InvalidArgument)
	// Sandy's validation detail is kept, the input it echoes is not.
	if msg := fmt.Sprint(err); !strings.Contains(msg, "priority") || strings.Contains(msg, "input") {
		t.Errorf("the 422 error reads %q; want Sandy's detail about priority without the echoed input", msg)
	}
	if n := creates(422); n != 1 {
		t.Errorf("the refused create was sent %d times, want once (no retry on 422)", n)
	}

	sb := create(t, p)
	if !f.Preempt(sb.ID) {
		t.Fatalf("the fake does not know sandbox %s", sb.ID)
	}
	_, err = p.Get(ctx, sb.ID)
	wantCode(t, "Get of a preempted sandbox", err, providers.NotFound)
	_, err = p.Exec(ctx, sb.ID, providers.ExecRequest{Argv: []string{"true"}})
	wantCode(t, "Exec in a preempted sandbox", err, providers.NotFound)
	_, err = p.ReadFile(ctx, sb.ID, providers.ReadFileRequest{Path: "/workspace/x"}, io.Discard)
	wantCode(t, "ReadFile in a preempted sandbox", err, providers.NotFound)
	err = p.WriteFile(ctx, sb.ID, providers.WriteFileRequest{Path: "/workspace/x", Content: strings.NewReader("x")})
	wantCode(t, "WriteFile in a preempted sandbox", err, providers.NotFound)
	_, err = p.ListFiles(ctx, sb.ID, "/workspace")
	wantCode(t, "ListFiles in a preempted sandbox", err, providers.NotFound)

	bad := startPlugin(t, settingsFor(f.URL, nil), "sk-not-the-key", nil)
	before := log.count(func(q request) bool { return q.status == 401 })
	_, err = bad.Create(ctx, providers.CreateSpec{})
	wantCode(t, "Create with a wrong API key", err, providers.PermissionDenied)
	_, err = bad.Get(ctx, "0123456789ab")
	wantCode(t, "Get with a wrong API key", err, providers.PermissionDenied)
	if n := log.count(func(q request) bool { return q.status == 401 }) - before; n != 2 {
		t.Errorf("%d requests answered 401, want 2 (no retry on 401)", n)
	}

	f.SetFaults(fakesandy.Faults{RateLimitEvery: 1, RateLimitBurst: 100})
	_, err = p.Get(ctx, "0123456789ab")
	wantCode(t, "Get while Sandy keeps answering 429", err, providers.ResourceExhausted)
	f.SetFaults(fakesandy.Faults{CreateUpstreamErrors: 100})
	_, err = p.Create(ctx, providers.CreateSpec{})
	wantCode(t, "Create while Sandy keeps answering 502", err, providers.Unavailable)

	// A sandbox that never runs a command is not handed out, nor left.
	f.SetFaults(fakesandy.Faults{WarmupExecFailures: 100})
	_, err = p.Create(ctx, providers.CreateSpec{})
	wantCode(t, "Create of a sandbox that never becomes ready", err, providers.Unavailable)
	if ids := f.Sandboxes(); len(ids) != 0 {
		t.Errorf("a sandbox that never became ready was left alive: %v", ids)
	}
}

// TestAPIKeyNeverAppears runs requests that fail, are retried and are
// refused, with the plugin logging at debug level and the fake echoing the
// Authorization header it gets, and looks for the keys in every log line
// and error.
func TestAPIKeyNeverAppears(t *testing.T) {
	f, _ := startFake(t, fakesandy.Options{Faults: fakesandy.Faults{
		EchoAuthorization:  true,
		RateLimitEvery:     2,
		RateLimitBurst:     2,
		UpstreamErrorEvery: 3,
		WarmupExecFailures: 2,
	}})
	var logs testlog.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	const wrongKey = "sk-wrong-0d9e8f7a6b5c4d3e"
	good := startPlugin(t, settingsFor(f.URL, map[string]any{"max_retries": 3}), testKey, logger)
	bad := startPlugin(t, settingsFor(f.URL, nil), wrongKey, logger)
	ctx := t.Context()

	var errs []error
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	_, err := bad.Create(ctx, providers.CreateSpec{})
	note(err)
	if err == nil || !strings.Contains(err.Error(), "[redacted]") {
		t.Errorf("the fake's echo of the wrong key did not reach the error scrubbed: %v", err)
	}
	_, err = bad.Get(ctx, "0123456789ab")
	note(err)
	sb, err := good.Create(ctx, providers.CreateSpec{Secrets: []providers.Secret{{Name: "TOKEN", Value: "not-the-api-key"}}})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	_, err = good.ReadFile(ctx, sb.ID, providers.ReadFileRequest{Path: "/workspace/missing"}, io.Discard)
	note(err)
	_, err = good.Exec(ctx, sb.ID, providers.ExecRequest{Argv: []string{"true"}, Cwd: "/no/such/dir"})
	note(err)
	note(good.Terminate(ctx, sb.ID))
	_, err = good.Exec(ctx, sb.ID, providers.ExecRequest{Argv: []string{"true"}})
	note(err)
	f.SetFaults(fakesandy.Faults{CreateUpstreamErrors: 10, EchoAuthorization: true})
	_, err = good.Create(ctx, providers.CreateSpec{})
	note(err)

	if len(errs) < 6 {
		t.Errorf("only %d of the calls failed: %v", len(errs), errs)
	}
	text := logs.String()
	if !strings.Contains(text, "retrying a Sandy request") {
		t.Errorf("the plugin logged no retries at debug level; the test proves little:\n%s", text)
	}
	for _, key := range []string{testKey, wrongKey} {
		if strings.Contains(text, key) {
			t.Errorf("the API key %s... appears in the logs", key[:6])
		}
		for _, err := range errs {
			if strings.Contains(err.Error(), key) {
				t.Errorf("the API key %s... appears in the error %q", key[:6], strings.ReplaceAll(err.Error(), key, "<KEY>"))
			}
		}
	}
}

// hashWriter counts and hashes what is written to it.
type hashWriter struct {
	h interface {
		io.Writer
		Sum([]byte) []byte
	}
	n int64
}

func newHashWriter() *hashWriter { return &hashWriter{h: sha256.New()} }

func (w *hashWriter) Write(b []byte) (int, error) {
	w.n += int64(len(b))
	return w.h.Write(b)
}

func payload(seed byte, n int64) io.Reader {
	var key [32]byte
	key[0] = seed
	return io.LimitReader(rand.NewChaCha8(key), n)
}

func TestBinaryRoundTrip20MB(t *testing.T) {
	f, _ := startFake(t, fakesandy.Options{Faults: retryableFaults})
	p := startPlugin(t, settingsFor(f.URL, nil), testKey, nil)
	sb := create(t, p)
	const size = 20 << 20
	in := newHashWriter()
	if err := p.WriteFile(t.Context(), sb.ID, providers.WriteFileRequest{Path: "/workspace/data/blob.bin", Content: io.TeeReader(payload(7, size), in)}); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	out := newHashWriter()
	n, err := p.ReadFile(t.Context(), sb.ID, providers.ReadFileRequest{Path: "/workspace/data/blob.bin"}, out)
	if err != nil {
		t.Fatalf("ReadFile: %v", err)
	}
	want := hex.EncodeToString(in.h.Sum(nil))
	if n != size || out.n != size || hex.EncodeToString(out.h.Sum(nil)) != want {
		t.Errorf("read back %d bytes (n=%d), want %d; same content: %v", out.n, n, size, hex.EncodeToString(out.h.Sum(nil)) == want)
	}
	if got := sh(t, p, sb.ID, "sha256sum /workspace/data/blob.bin | cut -d' ' -f1"); strings.TrimSpace(got) != want {
		t.Errorf("in the sandbox the file hashes to %s, want %s", got, want)
	}
	// No temporary or staged file is left behind.
	if got := sh(t, p, sb.ID, "ls -A /workspace/data; ls -A /tmp/.sandstep/w"); got != "blob.bin\n" {
		t.Errorf("files left: %q", got)
	}
}

// TestTruncatedReadComesBackWhole reads a text file that files/read cuts
// short, in every answer format Sandy has used.
func TestTruncatedReadComesBackWhole(t *testing.T) {
	f, log := startFake(t, fakesandy.Options{})
	p := startPlugin(t, settingsFor(f.URL, map[string]any{"read_chunk_bytes": 4096}), testKey, nil)
	sb := create(t, p)
	var text strings.Builder
	for i := 0; text.Len() < 200<<10; i++ {
		text.WriteString("ligne ünïcode № ")
		text.WriteString(strings.Repeat("x", i%50))
		text.WriteString("\n")
	}
	want := text.String()
	if err := p.WriteFile(t.Context(), sb.ID, providers.WriteFileRequest{Path: "/workspace/big.txt", Content: strings.NewReader(want)}); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	apiReads := func() int {
		return log.count(func(q request) bool { return strings.HasSuffix(q.path, "/files/read") && q.status == 200 })
	}
	execs := func() int {
		return log.count(func(q request) bool { return strings.HasSuffix(q.path, "/exec") })
	}
	for _, format := range []string{"json", "base64", "raw"} {
		for _, truncate := range []int{0, 1000} {
			f.SetFaults(fakesandy.Faults{ReadFormat: format, TruncateReadsAbove: truncate})
			reads, ex := apiReads(), execs()
			var got bytes.Buffer
			if _, err := p.ReadFile(t.Context(), sb.ID, providers.ReadFileRequest{Path: "/workspace/big.txt"}, &got); err != nil {
				t.Fatalf("%s, truncated at %d: ReadFile: %v", format, truncate, err)
			}
			if got.String() != want {
				t.Errorf("%s, truncated at %d: read %d bytes, want %d (equal: %v)", format, truncate, got.Len(), len(want), got.String() == want)
			}
			if apiReads()-reads != 1 {
				t.Errorf("%s, truncated at %d: files/read was not tried", format, truncate)
			}
			// One exec for the size; chunks through exec only after a cut.
			if n := execs() - ex; (truncate == 0) != (n == 1) {
				t.Errorf("%s, truncated at %d: %d execs", format, truncate, n)
			}
		}
	}
}

func TestTerminatedSandbox(t *testing.T) {
	f, _ := startFake(t, fakesandy.Options{Faults: fakesandy.Faults{TeardownDelay: config.Duration(time.Second)}})
	p := startPlugin(t, settingsFor(f.URL, nil), testKey, nil)
	sb, err := p.Create(t.Context(), providers.CreateSpec{Name: "job-1", Labels: map[string]string{"sandstep.job": "job-1"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.Get(t.Context(), sb.ID)
	if err != nil || got.Name != "job-1" || got.Labels["sandstep.job"] != "job-1" || got.State != providers.StateRunning {
		t.Errorf("Get: %+v, %v", got, err)
	}
	if err := p.Terminate(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	// Sandy still shows it while teardown lasts.
	if got, err := p.Get(t.Context(), sb.ID); err == nil && got.State != providers.StateTerminated {
		t.Errorf("Get during teardown: state %q", got.State)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := p.Get(t.Context(), sb.ID)
		if providers.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Get long after terminate: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := p.Terminate(t.Context(), sb.ID); err != nil {
		t.Errorf("Terminate of a gone sandbox: %v", err)
	}
	_, err = p.List(t.Context(), providers.ListFilter{})
	wantCode(t, "List", err, providers.Unsupported)
}

func TestConfigure(t *testing.T) {
	for _, c := range []struct {
		name     string
		settings string
		key      string
	}{
		{"no base_url", `{}`, testKey},
		{"not a URL", `{"base_url": "sandy.example.com"}`, testKey},
		{"unknown key", `{"base_url": "http://127.0.0.1:1", "colour": "blue"}`, testKey},
		{"chunk too small", `{"base_url": "http://127.0.0.1:1", "read_chunk_bytes": 10}`, testKey},
		{"no key", `{"base_url": "http://127.0.0.1:1"}`, ""},
	} {
		p := sandy.New()
		err := p.Configure(t.Context(), providers.Config{Settings: []byte(c.settings), Secrets: map[string]string{"api_key": c.key}})
		wantCode(t, c.name, err, providers.InvalidArgument)
	}
}

// TestExposedPortURL: Sandy's public URL proxies its runtime port only, so
// of the exposed ports only 5173 gets a URL, the create's own, through the
// plugin protocol.
func TestExposedPortURL(t *testing.T) {
	f, _ := startFake(t, fakesandy.Options{})
	p := startPlugin(t, settingsFor(f.URL, nil), testKey, nil)
	sb, err := p.Create(t.Context(), providers.CreateSpec{Name: "web", ExposePorts: []int{3000, 5173}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Terminate(t.Context(), sb.ID)
	if sb.PublicURL == "" || len(sb.PortURLs) != 1 || sb.PortURLs[5173] != sb.PublicURL {
		t.Errorf("Create: public URL %q, port URLs %v", sb.PublicURL, sb.PortURLs)
	}
	got, err := p.Get(t.Context(), sb.ID)
	if err != nil || got.PortURLs[5173] != sb.PublicURL || got.PortURLs[3000] != "" {
		t.Errorf("Get: %v %v", got.PortURLs, err)
	}
}
