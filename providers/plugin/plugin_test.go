package plugin_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/testkit/testlog"
	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/plugin"
	"github.com/sandstep/sandstep/providers/plugin/mtls"
	"github.com/sandstep/sandstep/providers/providertest"
)

// binDir holds the test plugins, built once by TestMain.
var binDir string

func TestMain(m *testing.M) {
	if dir := os.Getenv(hostRoleEnv); dir != "" {
		os.Exit(runHost(dir)) // this process is a host that a test kills
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sandstep-plugin-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "./internal/cmd/sandstep-provider-test", "./internal/cmd/sandstep-provider-future")
	build := exec.Command("go", args...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the test plugins:", err)
		return 1
	}
	binDir = dir
	return m.Run()
}

func testOptions(logs *testlog.Buffer) plugin.Options {
	return plugin.Options{
		Dir:    binDir,
		Name:   "test",
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		// A race in a plugin kills it, which fails the test that ran into it.
		Env: []string{"GORACE=halt_on_error=1"},
	}
}

func start(t testing.TB, opts plugin.Options) *plugin.Client {
	t.Helper()
	c, err := plugin.Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// run an exec and return its stdout.
func execOut(t *testing.T, p providers.Provider, id string, argv ...string) string {
	t.Helper()
	var out bytes.Buffer
	res, err := p.Exec(ctxFor(t), id, providers.ExecRequest{Argv: argv, Stdout: &out})
	if err != nil {
		t.Fatalf("exec %v: %v", argv, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exec %v: exit %d", argv, res.ExitCode)
	}
	return out.String()
}

func newSandbox(t *testing.T, p providers.Provider) string {
	t.Helper()
	sb, err := p.Create(ctxFor(t), providers.CreateSpec{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return sb.ID
}

func TestRoundTripEveryMethod(t *testing.T) {
	logs := &testlog.Buffer{}
	opts := testOptions(logs)
	opts.Settings = []byte(`{"name":"roundtrip"}`)
	opts.Defaults = providers.SandboxDefaults{Lifetime: time.Hour, ExecTimeout: time.Minute, MemoryMB: 512,
		Network: providers.NetworkPolicy{Mode: providers.NetworkNone}, AllowPrivate: []string{"127.0.0.1:8443", "10.1.2.0/24"}}
	c := start(t, opts)
	ctx := ctxFor(t)

	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	caps := info.Capabilities
	if info.Name != "roundtrip" || info.Version != "0.0.0-test" || info.APIVersion != providers.APIVersion ||
		!caps.Snapshots || !caps.ListSnapshots || !caps.Volumes || !caps.NamedSandboxes || !caps.ListByLabels || !caps.ExecStreaming ||
		!caps.FileAPI || caps.PublicURL || !caps.HostScopedSecrets || caps.MaxLifetime != time.Hour || !caps.Supports(providers.NetworkAll) ||
		!caps.Supports(providers.NetworkAllowlist) || len(caps.Regions) != 1 || caps.Regions[0] != "local" ||
		caps.Limits.Cgroups != "v1" || caps.Limits.Volumes != "ext4-image" || !caps.Limits.Enforces(providers.LimitMemory) ||
		caps.Limits.Enforces(providers.LimitCPU) {
		t.Fatalf("info = %+v", info)
	}

	snap, err := c.EnsureSnapshot(ctx, providers.SnapshotSpec{Slug: "deps-1", Setup: []string{"true"},
		Env: map[string]string{"A": "b"}, Labels: map[string]string{"k": "v"}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if snap.Slug != "deps-1" || snap.Labels["k"] != "v" || snap.SizeBytes != 4 || snap.CreatedAt.IsZero() {
		t.Fatalf("snapshot = %+v", snap)
	}
	again, err := c.EnsureSnapshot(ctx, providers.SnapshotSpec{Slug: "deps-1"})
	if err != nil || !again.CreatedAt.Equal(snap.CreatedAt) {
		t.Fatalf("ensure again = %+v, %v; want the same snapshot", again, err)
	}
	if got, err := c.GetSnapshot(ctx, "deps-1"); err != nil || got.Slug != "deps-1" || !got.CreatedAt.Equal(snap.CreatedAt) {
		t.Fatalf("get snapshot = %+v, %v", got, err)
	}
	if ss, err := c.ListSnapshots(ctx, map[string]string{"k": "v"}); err != nil || len(ss) != 1 || ss[0].Slug != "deps-1" || ss[0].Labels["k"] != "v" || !ss[0].CreatedAt.Equal(snap.CreatedAt) {
		t.Fatalf("list snapshots = %+v, %v", ss, err)
	}
	if ss, err := c.ListSnapshots(ctx, map[string]string{"k": "other"}); err != nil || len(ss) != 0 {
		t.Fatalf("list snapshots (no match) = %+v, %v", ss, err)
	}

	vol, err := c.CreateVolume(ctx, providers.VolumeSpec{Slug: "vol-1", Labels: map[string]string{"sandstep.session": "s1"}, CapacityMB: 64, Region: "local"})
	if err != nil || vol.Slug != "vol-1" || vol.CapacityMB != 64 || vol.CreatedAt.IsZero() {
		t.Fatalf("create volume = %+v, %v", vol, err)
	}
	if got, err := c.GetVolume(ctx, "vol-1"); err != nil || got.Labels["sandstep.session"] != "s1" {
		t.Fatalf("get volume = %+v, %v", got, err)
	}
	if vs, err := c.ListVolumes(ctx, map[string]string{"sandstep.session": "s1"}); err != nil || len(vs) != 1 || vs[0].Slug != "vol-1" {
		t.Fatalf("list volumes = %+v, %v", vs, err)
	}
	if vs, err := c.ListVolumes(ctx, map[string]string{"sandstep.session": "other"}); err != nil || len(vs) != 0 {
		t.Fatalf("list volumes (no match) = %+v, %v", vs, err)
	}

	spec := providers.CreateSpec{
		Name:        "job-1",
		Labels:      map[string]string{providers.LabelOwner: "sandstep", providers.LabelJob: "job-1"},
		Snapshot:    "deps-1",
		Mounts:      []providers.Mount{{Volume: "vol-1", Path: "/workspace", ReadOnly: true}},
		Env:         map[string]string{"X": "1"},
		Secrets:     []providers.Secret{{Name: "TOKEN", Value: "t", Hosts: []string{"api.example.com"}}},
		Network:     providers.NetworkPolicy{Mode: providers.NetworkAllowlist, AllowHosts: []string{"example.com"}},
		Lifetime:    30 * time.Minute,
		IdleTimeout: time.Minute,
		Resources:   providers.Resources{MemoryMB: 256, CPUs: 0.5, DiskMB: 100},
		Priority:    3, Preemptible: true, Flavor: "small", Region: "local",
	}
	sb, err := c.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID == "" || sb.Name != "job-1" || sb.State != providers.StateRunning || sb.Snapshot != "deps-1" ||
		len(sb.Mounts) != 1 || sb.Mounts[0] != spec.Mounts[0] || sb.Labels[providers.LabelJob] != "job-1" ||
		sb.CreatedAt.IsZero() || !sb.ExpiresAt.Equal(sb.CreatedAt.Add(30*time.Minute)) {
		t.Fatalf("create = %+v", sb)
	}
	if _, err := c.Create(ctx, spec); !errors.Is(err, providers.ErrAlreadyExists) {
		t.Fatalf("second create with the same name: %v, want AlreadyExists", err)
	}
	got, err := c.Get(ctx, sb.ID)
	if err != nil || got.ID != sb.ID || !got.CreatedAt.Equal(sb.CreatedAt) {
		t.Fatalf("get = %+v, %v", got, err)
	}
	if u := got.Network; u.BytesOut != 1<<40 || u.Denied != 1 || strings.Join(u.Hosts, " ") != "127.0.0.1:8443 10.1.2.0/24" {
		t.Fatalf("get: network usage %+v did not make the round trip", u)
	}
	list, err := c.List(ctx, providers.ListFilter{Labels: map[string]string{providers.LabelJob: "job-1"}})
	if err != nil || len(list) != 1 || list[0].ID != sb.ID {
		t.Fatalf("list = %+v, %v", list, err)
	}
	if list, err := c.List(ctx, providers.ListFilter{Name: "nope"}); err != nil || len(list) != 0 {
		t.Fatalf("list by another name = %+v, %v", list, err)
	}

	var stdout, stderr bytes.Buffer
	res, err := c.Exec(ctx, sb.ID, providers.ExecRequest{Argv: []string{"echo", "hello", "world"}, Stdout: &stdout, Stderr: &stderr})
	if err != nil || res.ExitCode != 0 || res.TimedOut || stdout.String() != "hello world\n" || stderr.Len() != 0 {
		t.Fatalf("exec echo = %+v, %v, stdout %q stderr %q", res, err, stdout.String(), stderr.String())
	}
	stdout.Reset()
	res, err = c.Exec(ctx, sb.ID, providers.ExecRequest{Shell: "stderr oops", Stdout: &stdout, Stderr: &stderr})
	if err != nil || stderr.String() != "oops\n" || stdout.Len() != 0 {
		t.Fatalf("exec stderr = %+v, %v, stdout %q stderr %q", res, err, stdout.String(), stderr.String())
	}
	if res, err := c.Exec(ctx, sb.ID, providers.ExecRequest{Argv: []string{"exit", "3"}}); err != nil || res.ExitCode != 3 || res.OOM {
		t.Fatalf("exec exit 3 = %+v, %v", res, err)
	}
	if res, err := c.Exec(ctx, sb.ID, providers.ExecRequest{Argv: []string{"oom"}}); err != nil || !res.OOM || res.Signal != "SIGKILL" {
		t.Fatalf("exec oom = %+v, %v; want OOM across the boundary", res, err)
	}

	if err := c.WriteFile(ctx, sb.ID, providers.WriteFileRequest{Path: "/workspace/dir/a.txt", Mode: 0o600, Content: strings.NewReader("abc")}); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(ctx, sb.ID, providers.WriteFileRequest{Path: "/workspace/empty"}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if n, err := c.ReadFile(ctx, sb.ID, providers.ReadFileRequest{Path: "/workspace/dir/a.txt"}, &buf); err != nil || n != 3 || buf.String() != "abc" {
		t.Fatalf("read = %d, %v, %q", n, err, buf.String())
	}
	buf.Reset()
	if n, err := c.ReadFile(ctx, sb.ID, providers.ReadFileRequest{Path: "/workspace/empty"}, &buf); err != nil || n != 0 {
		t.Fatalf("read empty = %d, %v", n, err)
	}
	files, err := c.ListFiles(ctx, sb.ID, "/workspace")
	if err != nil || len(files) != 2 {
		t.Fatalf("list files = %+v, %v", files, err)
	}
	if d := files[0]; d.Name != "dir" || !d.IsDir || d.Path != "/workspace/dir" {
		t.Fatalf("first entry = %+v", d)
	}
	if f := files[1]; f.Name != "empty" || f.IsDir || f.Size != 0 || f.Mode != 0o644 || f.ModTime.IsZero() {
		t.Fatalf("second entry = %+v", f)
	}
	if files, err := c.ListFiles(ctx, sb.ID, "/workspace/dir"); err != nil || len(files) != 1 || files[0].Size != 3 || files[0].Mode != 0o600 {
		t.Fatalf("list files dir = %+v, %v", files, err)
	}

	if err := c.DeleteVolume(ctx, "vol-1"); !errors.Is(err, providers.ErrFailedPrecondition) {
		t.Fatalf("delete mounted volume: %v, want FailedPrecondition", err)
	}
	for range 2 { // idempotent
		if err := c.Terminate(ctx, sb.ID); err != nil {
			t.Fatalf("terminate: %v", err)
		}
	}
	if _, err := c.Get(ctx, sb.ID); !providers.IsNotFound(err) {
		t.Fatalf("get after terminate: %v, want NotFound", err)
	}
	for range 2 {
		if err := c.DeleteVolume(ctx, "vol-1"); err != nil {
			t.Fatalf("delete volume: %v", err)
		}
		if err := c.DeleteSnapshot(ctx, "deps-1"); err != nil {
			t.Fatalf("delete snapshot: %v", err)
		}
	}
	if _, err := c.GetVolume(ctx, "vol-1"); !providers.IsNotFound(err) {
		t.Fatalf("get deleted volume: %v", err)
	}
	if _, err := c.GetSnapshot(ctx, "deps-1"); !providers.IsNotFound(err) {
		t.Fatalf("get deleted snapshot: %v", err)
	}

	// Configure again replaces the settings.
	if err := c.Configure(ctx, providers.Config{Settings: []byte(`{"name":"renamed"}`)}); err != nil {
		t.Fatal(err)
	}
	if info, err := c.Info(ctx); err != nil || info.Name != "renamed" {
		t.Fatalf("info after configure = %+v, %v", info, err)
	}
}

func TestErrorCodesCrossTheBoundary(t *testing.T) {
	logs := &testlog.Buffer{}
	c := start(t, testOptions(logs))
	ctx := ctxFor(t)
	id := newSandbox(t, c)
	local := providertest.New()

	for code := providers.Unknown; code <= providers.Internal; code++ {
		for _, method := range []string{"Get", "Exec", "WriteFile", "ReadFile"} {
			settings := fmt.Sprintf(`{"fail":{%q:%q}}`, method, code.String())
			cfg := providers.Config{Settings: []byte(settings)}
			if err := c.Configure(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			if err := local.Configure(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			call := func(p providers.Provider) error {
				switch method {
				case "Get":
					_, err := p.Get(ctx, id)
					return err
				case "Exec":
					_, err := p.Exec(ctx, id, providers.ExecRequest{Argv: []string{"echo"}, Stdin: strings.NewReader("x")})
					return err
				case "WriteFile":
					return p.WriteFile(ctx, id, providers.WriteFileRequest{Path: "/f", Content: strings.NewReader("x")})
				default:
					_, err := p.ReadFile(ctx, id, providers.ReadFileRequest{Path: "/f"}, io.Discard)
					return err
				}
			}
			err, want := call(c), call(local)
			if got := providers.CodeOf(err); got != code {
				t.Errorf("%s failing with %s: got code %s (%v)", method, code, got, err)
				continue
			}
			if err.Error() != want.Error() {
				t.Errorf("%s failing with %s: message %q, want %q", method, code, err.Error(), want.Error())
			}
			if !errors.Is(err, &providers.Error{Code: code}) {
				t.Errorf("%s failing with %s: errors.Is with the sentinel fails", method, code)
			}
		}
	}

	if err := c.Configure(ctx, providers.Config{Settings: []byte(`{"fail":{"Get":"plain"}}`)}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Get(ctx, id)
	if providers.CodeOf(err) != providers.Unknown || !strings.Contains(err.Error(), "injected plain failure in Get") {
		t.Fatalf("plain error: %v (code %s), want Unknown with the message", err, providers.CodeOf(err))
	}
}

func TestBadSettingsFailStartWithInvalidArgument(t *testing.T) {
	opts := testOptions(&testlog.Buffer{})
	opts.Settings = []byte(`{"nmae":"typo"}`)
	c, err := plugin.Start(context.Background(), opts)
	if err == nil {
		c.Close()
		t.Fatal("Start accepted an unknown setting")
	}
	if providers.CodeOf(err) != providers.InvalidArgument || !strings.Contains(err.Error(), "nmae") {
		t.Fatalf("Start: %v (code %s), want InvalidArgument naming the key", err, providers.CodeOf(err))
	}
}

// A provider's settings problems cross the boundary one by one, so that the
// host can point at each key's line; the message stays what the provider
// said.
func TestSettingsErrorCrossesTheBoundary(t *testing.T) {
	c := start(t, testOptions(&testlog.Buffer{}))
	bad := providers.Config{Settings: []byte(`{"nmae":"x","fail":{"Get":"Nope"}}`)}
	err := c.Configure(ctxFor(t), bad)
	want := providertest.New().Configure(ctxFor(t), bad)
	var se *providers.SettingsError
	if !errors.As(err, &se) {
		t.Fatalf("Configure: %v, want a *providers.SettingsError", err)
	}
	var keys []string
	for _, p := range se.Problems {
		keys = append(keys, p.Key)
	}
	if !slices.Equal(keys, []string{"nmae"}) || providers.CodeOf(err) != providers.InvalidArgument {
		t.Errorf("problems %+v (code %s), want nmae", se.Problems, providers.CodeOf(err))
	}
	if err.Error() != want.Error() {
		t.Errorf("message %q, want the provider's %q", err.Error(), want.Error())
	}
}

func randomBytes(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// chunkRecorder keeps what is written and the largest single write, which
// is the largest message the plugin sent.
type chunkRecorder struct {
	bytes.Buffer
	largest int
}

func (r *chunkRecorder) Write(p []byte) (int, error) {
	r.largest = max(r.largest, len(p))
	return r.Buffer.Write(p)
}

func TestFiftyMegabyteFileRoundTrip(t *testing.T) {
	c := start(t, testOptions(&testlog.Buffer{}))
	ctx := ctxFor(t)
	id := newSandbox(t, c)
	data := randomBytes(t, 50<<20)
	if err := c.WriteFile(ctx, id, providers.WriteFileRequest{Path: "/big.bin", Content: bytes.NewReader(data)}); err != nil {
		t.Fatal(err)
	}
	var got chunkRecorder
	n, err := c.ReadFile(ctx, id, providers.ReadFileRequest{Path: "/big.bin"}, &got)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len(data)) || !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("read back %d bytes (n=%d), want the %d bytes written", got.Len(), n, len(data))
	}
	if got.largest > 1<<20 {
		t.Fatalf("a read chunk of %d bytes exceeds 1 MiB", got.largest)
	}
}

func TestReadFileOffsetAndLimit(t *testing.T) {
	c := start(t, testOptions(&testlog.Buffer{}))
	ctx := ctxFor(t)
	id := newSandbox(t, c)
	data := randomBytes(t, 3<<20+5)
	if err := c.WriteFile(ctx, id, providers.WriteFileRequest{Path: "/d/f", Content: bytes.NewReader(data)}); err != nil {
		t.Fatal(err)
	}
	size := int64(len(data))
	for _, tc := range []struct{ offset, limit int64 }{
		{0, 0},
		{0, 10},
		{1<<20 - 1, 1<<20 + 2}, // spans chunk boundaries
		{5, -1},
		{size - 3, 100},
		{size, 0},
		{size + 10, 5},
	} {
		var got bytes.Buffer
		n, err := c.ReadFile(ctx, id, providers.ReadFileRequest{Path: "/d/f", Offset: tc.offset, Limit: tc.limit}, &got)
		if err != nil {
			t.Fatalf("offset %d limit %d: %v", tc.offset, tc.limit, err)
		}
		want := data[min(tc.offset, size):]
		if tc.limit > 0 && int64(len(want)) > tc.limit {
			want = want[:tc.limit]
		}
		if n != int64(len(want)) || !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("offset %d limit %d: got %d bytes (n=%d), want %d", tc.offset, tc.limit, got.Len(), n, len(want))
		}
	}
	for _, tc := range []struct {
		req  providers.ReadFileRequest
		code providers.Code
	}{
		{providers.ReadFileRequest{Path: "/d/f", Offset: -1}, providers.InvalidArgument},
		{providers.ReadFileRequest{Path: "/d/missing"}, providers.NotFound},
		{providers.ReadFileRequest{Path: "/d"}, providers.FailedPrecondition},
		{providers.ReadFileRequest{Path: "relative"}, providers.InvalidArgument},
	} {
		if _, err := c.ReadFile(ctx, id, tc.req, io.Discard); providers.CodeOf(err) != tc.code {
			t.Fatalf("read %+v: %v, want %s", tc.req, err, tc.code)
		}
	}
}

// failingReader returns data, then an error.
type failingReader struct {
	data []byte
	err  error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func TestFailedUploadLeavesNoFile(t *testing.T) {
	c := start(t, testOptions(&testlog.Buffer{}))
	ctx := ctxFor(t)
	id := newSandbox(t, c)
	boom := errors.New("disk read failed")
	err := c.WriteFile(ctx, id, providers.WriteFileRequest{Path: "/partial", Content: &failingReader{data: randomBytes(t, 3<<20), err: boom}})
	if !errors.Is(err, boom) {
		t.Fatalf("WriteFile: %v, want the reader's error", err)
	}
	if _, err := c.ReadFile(ctx, id, providers.ReadFileRequest{Path: "/partial"}, io.Discard); !providers.IsNotFound(err) {
		t.Fatalf("read after failed upload: %v, want NotFound", err)
	}
}

// signalWriter records output and reports when it contains want.
type signalWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func newSignalWriter(want string) *signalWriter {
	return &signalWriter{want: want, seen: make(chan struct{})}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func (w *signalWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("timed out waiting for %s", what)
	}
}

type execReturn struct {
	res providers.ExecResult
	err error
}

func TestExecOutputStreamsWhileCommandRuns(t *testing.T) {
	c := start(t, testOptions(&testlog.Buffer{}))
	ctx := ctxFor(t)
	id := newSandbox(t, c)
	stdinR, stdinW := io.Pipe()
	out := newSignalWriter("ping\n")
	done := make(chan execReturn, 1)
	go func() {
		res, err := c.Exec(ctx, id, providers.ExecRequest{Argv: []string{"cat"}, Stdin: stdinR, Stdout: out})
		done <- execReturn{res, err}
	}()
	if _, err := stdinW.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	// cat is still running: its stdin is open. The output must be here.
	waitFor(t, out.seen, "output of a running command")
	select {
	case r := <-done:
		t.Fatalf("exec ended before its stdin was closed: %+v", r)
	default:
	}
	if _, err := stdinW.Write([]byte("pong\n")); err != nil {
		t.Fatal(err)
	}
	stdinW.Close()
	r := <-done
	if r.err != nil || r.res.ExitCode != 0 || out.String() != "ping\npong\n" {
		t.Fatalf("exec = %+v, %v, output %q", r.res, r.err, out.String())
	}
}

func TestExecStdinSeveralMegabytes(t *testing.T) {
	c := start(t, testOptions(&testlog.Buffer{}))
	ctx := ctxFor(t)
	id := newSandbox(t, c)
	data := randomBytes(t, 6<<20+123)
	var out chunkRecorder
	res, err := c.Exec(ctx, id, providers.ExecRequest{Argv: []string{"cat"}, Stdin: bytes.NewReader(data), Stdout: &out})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec = %+v, %v", res, err)
	}
	if !bytes.Equal(out.Bytes(), data) {
		t.Fatalf("cat returned %d bytes, want the %d sent", out.Len(), len(data))
	}
	if out.largest > 64<<10 {
		t.Fatalf("an output chunk of %d bytes exceeds 64 KiB", out.largest)
	}
}

func TestExecEndsWithoutReadingStdin(t *testing.T) {
	c := start(t, testOptions(&testlog.Buffer{}))
	ctx := ctxFor(t)
	id := newSandbox(t, c)
	// More input than any buffer on the way holds, never read by echo.
	var out bytes.Buffer
	res, err := c.Exec(ctx, id, providers.ExecRequest{Argv: []string{"echo", "done"}, Stdin: bytes.NewReader(randomBytes(t, 8<<20)), Stdout: &out})
	if err != nil || res.ExitCode != 0 || out.String() != "done\n" {
		t.Fatalf("exec with unread stdin = %+v, %v, %q", res, err, out.String())
	}
	// Input that never ends: Exec returns all the same.
	stdinR, stdinW := io.Pipe()
	defer stdinW.Close()
	out.Reset()
	res, err = c.Exec(ctx, id, providers.ExecRequest{Argv: []string{"echo", "done"}, Stdin: stdinR, Stdout: &out})
	if err != nil || res.ExitCode != 0 || out.String() != "done\n" {
		t.Fatalf("exec with endless stdin = %+v, %v, %q", res, err, out.String())
	}
}

type failingWriter struct{ err error }

func (w failingWriter) Write([]byte) (int, error) { return 0, w.err }

func TestExecOutputWriterFailureStopsCommand(t *testing.T) {
	c := start(t, testOptions(&testlog.Buffer{}))
	id := newSandbox(t, c)
	full := errors.New("disk full")
	_, err := c.Exec(ctxFor(t), id, providers.ExecRequest{Argv: []string{"block"}, Stdout: failingWriter{full}})
	if !errors.Is(err, full) {
		t.Fatalf("exec: %v, want the writer's error", err)
	}
	if got := execOut(t, c, id, "wait-cancelled"); got != "cancelled\n" {
		t.Fatalf("wait-cancelled printed %q", got)
	}
}

func TestExecCancelMidway(t *testing.T) {
	c := start(t, testOptions(&testlog.Buffer{}))
	id := newSandbox(t, c)
	ctx, cancel := context.WithCancel(ctxFor(t))
	out := newSignalWriter("started\n")
	done := make(chan execReturn, 1)
	go func() {
		res, err := c.Exec(ctx, id, providers.ExecRequest{Argv: []string{"block"}, Stdout: out})
		done <- execReturn{res, err}
	}()
	waitFor(t, out.seen, "the command to start")
	cancel()
	r := <-done
	if !errors.Is(r.err, context.Canceled) || providers.CodeOf(r.err) != providers.DeadlineExceeded {
		t.Fatalf("cancelled exec = %+v, %v; want a DeadlineExceeded error wrapping context.Canceled", r.res, r.err)
	}
	// The command inside the plugin saw the cancellation too.
	if got := execOut(t, c, id, "wait-cancelled"); got != "cancelled\n" {
		t.Fatalf("wait-cancelled printed %q", got)
	}
}

func TestExecTimeoutIsAResult(t *testing.T) {
	c := start(t, testOptions(&testlog.Buffer{}))
	id := newSandbox(t, c)
	res, err := c.Exec(ctxFor(t), id, providers.ExecRequest{Argv: []string{"block"}, Timeout: 50 * time.Millisecond})
	if err != nil || !res.TimedOut || res.Signal != "SIGKILL" || res.ExitCode != -1 {
		t.Fatalf("exec = %+v, %v; want a timed-out result", res, err)
	}
}

func pidOf(t *testing.T, c providers.Provider, id string) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(execOut(t, c, id, "pid")))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func TestRestartAfterPluginKilled(t *testing.T) {
	logs := &testlog.Buffer{}
	opts := testOptions(logs)
	opts.Settings = []byte(`{"name":"survivor"}`)
	c := start(t, opts)
	ctx := ctxFor(t)
	id := newSandbox(t, c)
	pid := pidOf(t, c, id)

	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Info has no side effects: it goes through whether the client notices
	// the death before the call or during it.
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatalf("info after kill: %v", err)
	}
	if info.Name != "survivor" {
		t.Fatalf("restarted plugin was not configured again: name %q", info.Name)
	}
	// The new plugin is a new process, and the in-memory sandbox died with
	// the old one.
	if _, err := c.Get(ctx, id); !providers.IsNotFound(err) {
		t.Fatalf("get old sandbox: %v, want NotFound", err)
	}
	id = newSandbox(t, c)
	pid2 := pidOf(t, c, id)
	if pid2 == pid {
		t.Fatalf("plugin pid unchanged after kill: %d", pid)
	}

	// Exec is not retried: if the death shows during the call, the call
	// fails with Unavailable, and the next one runs on a new plugin.
	if err := syscall.Kill(pid2, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, err = c.Exec(ctx, id, providers.ExecRequest{Argv: []string{"echo"}})
	t.Logf("exec right after the kill: %v", err)
	if err != nil && providers.CodeOf(err) != providers.Unavailable && !providers.IsNotFound(err) {
		t.Fatalf("exec during the death: %v, want Unavailable (or NotFound from a new plugin)", err)
	}
	id = newSandbox(t, c)
	if pid3 := pidOf(t, c, id); pid3 == pid2 {
		t.Fatalf("plugin pid unchanged after second kill: %d", pid3)
	}
	if !strings.Contains(logs.String(), "restarting") {
		t.Fatalf("no restart was logged:\n%s", logs.String())
	}
}

func TestRestartFailureIsClear(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "sandstep-provider-test")
	data, err := os.ReadFile(filepath.Join(binDir, "sandstep-provider-test"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := testOptions(&testlog.Buffer{})
	opts.Dir = dir
	c := start(t, opts)
	id := newSandbox(t, c)
	pid := pidOf(t, c, id)
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, err = c.Info(ctxFor(t))
	if providers.CodeOf(err) != providers.Unavailable || !strings.Contains(err.Error(), "plugin binary not found at "+bin) {
		t.Fatalf("info with the binary gone: %v, want Unavailable naming the missing binary", err)
	}
}

func TestMissingBinaryIsOneClearLine(t *testing.T) {
	dir := t.TempDir()
	_, err := plugin.Start(context.Background(), plugin.Options{Dir: dir, Name: "sandy"})
	want := fmt.Sprintf("provider %q: plugin binary not found at %s (build it with make plugins)",
		"sandy", filepath.Join(dir, "sandstep-provider-sandy"))
	if err == nil || err.Error() != want {
		t.Fatalf("Start: %v\nwant: %s", err, want)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("errors.Is(err, fs.ErrNotExist) is false")
	}
}

func TestWrongProtocolVersionIsRefused(t *testing.T) {
	path := filepath.Join(binDir, "sandstep-provider-future")
	_, err := plugin.Start(context.Background(), plugin.Options{Path: path, Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		t.Fatal("Start accepted a plugin speaking another protocol version")
	}
	msg := err.Error()
	t.Log(msg)
	for _, want := range []string{
		`provider "future"`, path,
		fmt.Sprintf("protocol version %d", providers.APIVersion+1),
		fmt.Sprintf("this host speaks version %d", providers.APIVersion),
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not contain %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error spans several lines: %q", msg)
	}
}

func TestPluginDoesNotInheritHostEnvironment(t *testing.T) {
	t.Setenv("AWS_SECRET_ACCESS_KEY", "host-aws-secret")
	t.Setenv("AWS_ACCESS_KEY_ID", "host-aws-key-id")
	logs := &testlog.Buffer{}
	opts := testOptions(logs)
	opts.Env = append(opts.Env, "SANDSTEP_TEST_EXTRA=yes")
	opts.Secrets = map[string]string{"api_key": "configure-secret-value"}
	c := start(t, opts)
	id := newSandbox(t, c)

	environ := execOut(t, c, id, "environ")
	if strings.Contains(environ, "AWS_") || strings.Contains(environ, "host-aws-secret") {
		t.Fatalf("the plugin sees the host's AWS credentials:\n%s", environ)
	}
	for _, want := range []string{"PATH=" + os.Getenv("PATH"), "SANDSTEP_TEST_EXTRA=yes"} {
		if !strings.Contains(environ, want+"\n") {
			t.Fatalf("plugin environment lacks %q:\n%s", want, environ)
		}
	}
	if got := execOut(t, c, id, "secret", "api_key"); got != "configure-secret-value\n" {
		t.Fatalf("secret api_key = %q", got)
	}
	if strings.Contains(logs.String(), "configure-secret-value") {
		t.Fatal("a Configure secret appeared in the logs")
	}
}

func TestPluginLogsReachHostLogger(t *testing.T) {
	logs := &testlog.Buffer{}
	c := start(t, testOptions(logs))
	id := newSandbox(t, c)
	execOut(t, c, id, "log", "hello-from-the-plugin")
	// Relayed from the plugin's stderr asynchronously; Close waits for the
	// relay to drain.
	c.Close()
	var found bool
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `"msg":"hello-from-the-plugin"`) {
			found = true
			for _, want := range []string{`"level":"INFO"`, `"provider":"test"`, `"sandbox":"` + id + `"`} {
				if !strings.Contains(line, want) {
					t.Errorf("relayed line lacks %s: %s", want, line)
				}
			}
		}
	}
	if !found {
		t.Fatalf("plugin log line not relayed:\n%s", logs.String())
	}
}

func TestCallsAfterCloseFail(t *testing.T) {
	c := start(t, testOptions(&testlog.Buffer{}))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Info(ctxFor(t)); !errors.Is(err, providers.ErrFailedPrecondition) {
		t.Fatalf("info after close: %v, want FailedPrecondition", err)
	}
}

func TestCloseEndsAFrozenPlugin(t *testing.T) {
	logs := &testlog.Buffer{}
	c := start(t, testOptions(logs))
	id := newSandbox(t, c)
	pid := pidOf(t, c, id)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() {
		c.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(time.Minute):
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatal("Close did not return for a frozen plugin")
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("plugin process %d still exists after Close (%v)", pid, err)
	}
	// Killed by the host on purpose: the exit is no error.
	for _, m := range logLines(t, logs) {
		if m["level"] == "ERROR" {
			t.Errorf("an ERROR line for a plugin the host ended: %v", m)
		}
	}
}

func TestConcurrentCalls(t *testing.T) {
	c := start(t, testOptions(&testlog.Buffer{}))
	ctx := ctxFor(t)
	id := newSandbox(t, c)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				var out bytes.Buffer
				want := fmt.Sprintf("g%d-%d", g, i)
				if _, err := c.Exec(ctx, id, providers.ExecRequest{Argv: []string{"echo", want}, Stdout: &out}); err != nil {
					errs <- err
					return
				}
				if out.String() != want+"\n" {
					errs <- fmt.Errorf("echo %s printed %q", want, out.String())
					return
				}
				if _, err := c.Info(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestAutoMTLS(t *testing.T) {
	logs := &testlog.Buffer{}
	opts := testOptions(logs)
	opts.MTLS = mtls.OneTime
	c := start(t, opts)
	if info, err := c.Info(ctxFor(t)); err != nil || info.Name != "test" {
		t.Fatalf("info over mTLS = %+v, %v", info, err)
	}
	// go-plugin's server says when it took the host's certificate and
	// answered with its own; without it the connection would be plain.
	line(t, logs, "configuring server automatic mTLS")
}
