package modal_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/testkit/fakemodal"
	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/modal"
)

func TestSettings(t *testing.T) {
	s, err := modal.ParseSettings(nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.AppName != "sandstep" || s.ServerURL != "https://api.modal.com:443" || s.Workdir != "/workspace" {
		t.Errorf("defaults: %+v", s)
	}
	for _, c := range []struct{ json, want string }{
		{`{"app_nme": "x"}`, `app_nme: unknown key (did you mean "app_name"?)`},
		{`{"cpu": "two"}`, "cpu: must be a number, not a string"},
		{`{"timeout": "25h"}`, "timeout: must be from 0"},
		{`{"server_url": "http://modal.example.com"}`, "server_url: may be plain http only on a loopback address"},
		{`{"server_url": "https://ak-1:as-2@api.modal.com"}`, "server_url: must be scheme, host and port only"},
		{`{"app_name": "no spaces"}`, "app_name: must be 1 to 64"},
		{`{"image_commands": ["RUN a\nRUN b"]}`, "image_commands[0]: must be one Dockerfile command"},
		{`{"open_ports": [0]}`, "open_ports[0]: must be a port"},
		{`{"workdir": "rel"}`, "workdir: must be a clean absolute path"},
	} {
		_, err := modal.ParseSettings([]byte(c.json))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.json, err, c.want)
		}
		if err != nil && (strings.Contains(err.Error(), "as-2")) {
			t.Errorf("%s: the error repeats the URL's secret: %v", c.json, err)
		}
	}
	// Every problem at once.
	_, err = modal.ParseSettings([]byte(`{"cpu": -1, "max_retries": 99}`))
	var se *providers.SettingsError
	if !errors.As(err, &se) || len(se.Problems) != 2 {
		t.Errorf("two bad keys: %v", err)
	}
}

// TestConfigureWithoutToken names the _env keys that are missing.
func TestConfigureWithoutToken(t *testing.T) {
	p := modal.New()
	err := p.Configure(t.Context(), providers.Config{Settings: []byte(`{}`)})
	if providers.CodeOf(err) != providers.InvalidArgument || !strings.Contains(err.Error(), "token_id_env") || !strings.Contains(err.Error(), "token_secret_env") {
		t.Errorf("Configure without a token: %v", err)
	}
}

// TestNamesCheckedBeforeAnyCall: names Modal refuses are refused here,
// without a call (the fake would see a create).
func TestNamesCheckedBeforeAnyCall(t *testing.T) {
	f := startFake(t, fakemodal.Options{})
	p := inProcess(t, f, nil)
	for _, name := range []string{"job/1", "has space", strings.Repeat("x", 65), "ap-abcdefghijklmnopqrstuv", "job#1"} {
		_, err := p.Create(t.Context(), providers.CreateSpec{Name: name})
		if providers.CodeOf(err) != providers.InvalidArgument {
			t.Errorf("Create(%q): %v, want InvalidArgument", name, err)
		}
	}
	if n := f.Stats().Creates; n != 0 {
		t.Errorf("the fake saw %d creates", n)
	}
}

// TestSameJobOneSandbox: submits racing with the same job id make one
// sandbox; a create whose answer is lost adopts the sandbox it made.
func TestSameJobOneSandbox(t *testing.T) {
	f := startFake(t, fakemodal.Options{Faults: fakemodal.Faults{LoseCreateAnswers: 1}})
	p := inProcess(t, f, nil)
	labels := map[string]string{providers.LabelOwner: "sandstep", providers.LabelJob: "job-1", providers.LabelTenant: "t1"}
	spec := providers.CreateSpec{Name: "jb-job-1", Labels: labels, Lifetime: time.Minute}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ok   []providers.Sandbox
		errs []error
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := p.Create(t.Context(), spec)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else {
				ok = append(ok, sb)
			}
		}()
	}
	wg.Wait()
	if len(ok) != 1 {
		t.Fatalf("%d creates succeeded (errors %v); want exactly one", len(ok), errs)
	}
	for _, err := range errs {
		if providers.CodeOf(err) != providers.AlreadyExists {
			t.Errorf("a racing create: %v, want AlreadyExists", err)
		}
	}
	if live := f.Sandboxes(); len(live) != 1 || live[0] != ok[0].ID {
		t.Errorf("running on the fake: %v, want only %s", live, ok[0].ID)
	}
	if s := f.Stats(); s.LostCreates != 1 {
		t.Errorf("lost create answers: %d, want 1", s.LostCreates)
	}
	// The reaper's view: by labels, and by name.
	for _, filter := range []providers.ListFilter{{Labels: map[string]string{providers.LabelJob: "job-1"}}, {Name: "jb-job-1"}} {
		got, err := p.List(t.Context(), filter)
		if err != nil || len(got) != 1 || got[0].ID != ok[0].ID || got[0].Name != "jb-job-1" || got[0].Labels[providers.LabelTenant] != "t1" {
			t.Errorf("List(%+v) = %+v, %v", filter, got, err)
		}
	}
	if err := p.Terminate(t.Context(), ok[0].ID); err != nil {
		t.Fatal(err)
	}
	// The name is free again once its holder ended.
	again, err := p.Create(t.Context(), spec)
	if err != nil {
		t.Fatalf("Create after the holder ended: %v", err)
	}
	if err := p.Terminate(t.Context(), again.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := p.List(t.Context(), providers.ListFilter{Labels: labels}); err != nil || len(got) != 0 {
		t.Errorf("List after terminate: %+v, %v", got, err)
	}
}

// TestStaleContainer: a sandbox whose container Modal removed is a
// NotFound wrapping ErrStaleContainer for calls into it, and Get reports
// it terminated.
func TestStaleContainer(t *testing.T) {
	f := startFake(t, fakemodal.Options{})
	p := modal.New()
	if err := p.Configure(t.Context(), providers.Config{Settings: settingsFor(f.URL, nil), Secrets: testSecrets()}); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sb, err := p.Create(t.Context(), providers.CreateSpec{Name: "stale-1", Lifetime: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := p.Exec(t.Context(), sb.ID, providers.ExecRequest{Shell: "echo hi"}); err != nil || r.ExitCode != 0 {
		t.Fatalf("exec before: %+v, %v", r, err)
	}
	if !f.Vanish(sb.ID) {
		t.Fatal("Vanish found no running sandbox")
	}
	_, err = p.Exec(t.Context(), sb.ID, providers.ExecRequest{Shell: "echo hi"})
	if !providers.IsNotFound(err) || !errors.Is(err, modal.ErrStaleContainer) {
		t.Errorf("exec into a removed container: %v, want NotFound wrapping ErrStaleContainer", err)
	}
	_, err = p.ReadFile(t.Context(), sb.ID, providers.ReadFileRequest{Path: "/workspace/x"}, &bytes.Buffer{})
	if !providers.IsNotFound(err) {
		t.Errorf("read from a removed container: %v, want NotFound", err)
	}
	got, err := p.Get(t.Context(), sb.ID)
	if err != nil || got.State != providers.StateTerminated {
		t.Errorf("Get of a removed sandbox: %+v, %v; want terminated", got, err)
	}
	if err := p.Terminate(t.Context(), sb.ID); err != nil {
		t.Errorf("Terminate of a removed sandbox: %v", err)
	}
}

// TestLifetimeAndIdleTimeout: Modal ends sandboxes at their lifetime and
// idle timeout; the provider then reports them terminated.
func TestLifetimeAndIdleTimeout(t *testing.T) {
	f := startFake(t, fakemodal.Options{})
	p := inProcess(t, f, nil)
	life, err := p.Create(t.Context(), providers.CreateSpec{Lifetime: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	idle, err := p.Create(t.Context(), providers.CreateSpec{Lifetime: time.Minute, IdleTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// An exec longer than the idle timeout keeps the sandbox alive.
	if r, err := p.Exec(t.Context(), idle.ID, providers.ExecRequest{Shell: "sleep 2; echo done"}); err != nil || r.ExitCode != 0 {
		t.Fatalf("exec spanning the idle timeout: %+v, %v", r, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, id := range []string{life.ID, idle.ID} {
		for {
			sb, err := p.Get(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			if sb.State == providers.StateTerminated {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("sandbox %s still running", id)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for id, want := range map[string]string{life.ID: "GENERIC_STATUS_TIMEOUT", idle.ID: "GENERIC_STATUS_IDLE_TIMEOUT"} {
		if st, _ := f.Result(id); st != want {
			t.Errorf("sandbox %s ended with %s, want %s", id, st, want)
		}
	}
}

// TestPortURLs: ports opened by settings have tunnel URLs.
func TestPortURLs(t *testing.T) {
	f := startFake(t, fakemodal.Options{})
	p := modal.New()
	if err := p.Configure(t.Context(), providers.Config{Settings: settingsFor(f.URL, map[string]any{"open_ports": []int{8080, 5173}}), Secrets: testSecrets()}); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sb, err := p.Create(t.Context(), providers.CreateSpec{Lifetime: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	urls, err := p.PortURLs(t.Context(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(urls) != 2 || !strings.HasPrefix(urls[8080], "https://") || !strings.Contains(urls[5173], "5173") {
		t.Errorf("PortURLs = %v", urls)
	}
	if err := p.Terminate(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := p.PortURLs(t.Context(), sb.ID); providers.CodeOf(err) != providers.FailedPrecondition {
		t.Errorf("PortURLs after terminate: %v, want FailedPrecondition", err)
	}
}

// TestCreateExposesPorts: CreateSpec.ExposePorts (with the settings'
// open_ports) are opened as Modal tunnels at create, through the plugin
// protocol; Create and Get answer their URLs in PortURLs; a bad port is
// refused before any call makes a sandbox.
func TestCreateExposesPorts(t *testing.T) {
	f := startFake(t, fakemodal.Options{})
	p := inProcess(t, f, map[string]any{"open_ports": []int{9000}})
	ctx := t.Context()
	info, err := p.Info(ctx)
	if err != nil || !info.Capabilities.PublicURL {
		t.Fatalf("Info = %+v, %v; want the public-url capability", info.Capabilities, err)
	}
	sb, err := p.Create(ctx, providers.CreateSpec{Name: "ports-1", Lifetime: time.Minute, ExposePorts: []int{8080, 9000}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Terminate(context.WithoutCancel(ctx), sb.ID)
	// The fake names a tunnel's host after the task and the port.
	if len(sb.PortURLs) != 2 || !strings.HasSuffix(sb.PortURLs[8080], "-8080.modal.fake.invalid") || !strings.HasSuffix(sb.PortURLs[9000], "-9000.modal.fake.invalid") ||
		!strings.HasPrefix(sb.PortURLs[8080], "https://") {
		t.Fatalf("Create's PortURLs = %v", sb.PortURLs)
	}
	got, err := p.Get(ctx, sb.ID)
	if err != nil || !maps.Equal(got.PortURLs, sb.PortURLs) {
		t.Fatalf("Get's PortURLs = %v, %v; want %v", got.PortURLs, err, sb.PortURLs)
	}
	if _, ok := got.Labels["sandstep.modal.ports"]; ok {
		t.Errorf("the provider's own tag shows as a label: %v", got.Labels)
	}
	plain, err := p.Create(ctx, providers.CreateSpec{Name: "ports-none", Lifetime: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Terminate(context.WithoutCancel(ctx), plain.ID)
	if len(plain.PortURLs) != 1 || plain.PortURLs[9000] == "" {
		t.Errorf("a sandbox asking for no port has the settings' only: %v", plain.PortURLs)
	}

	before := f.Stats().Creates
	for _, bad := range []int{0, 65536} {
		if _, err := p.Create(ctx, providers.CreateSpec{Name: "ports-bad", ExposePorts: []int{bad}}); providers.CodeOf(err) != providers.InvalidArgument {
			t.Errorf("port %d: %v, want InvalidArgument", bad, err)
		}
	}
	if n := f.Stats().Creates; n != before {
		t.Fatalf("the refused creates reached Modal (%d creates, want %d)", n, before)
	}
	if err := p.Terminate(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := p.Get(ctx, sb.ID); err != nil || got.State != providers.StateTerminated || len(got.PortURLs) != 0 {
		t.Fatalf("Get after terminate: %+v, %v", got, err)
	}
}

// TestListSnapshotsUnsupported: Modal's snapshots carry no labels to list
// by; the provider says so.
func TestListSnapshotsUnsupported(t *testing.T) {
	_, err := modal.New().ListSnapshots(t.Context(), map[string]string{"a": "b"})
	if !providers.IsUnsupported(err) {
		t.Errorf("ListSnapshots: %v, want Unsupported", err)
	}
}

// TestTokenNeverShows: neither part of the token appears in the plugin's
// logs (at debug level) or in errors, with a refused token and with a good
// one under faults, even when the server's errors echo the request's
// credential headers (EchoCredentials).
func TestTokenNeverShows(t *testing.T) {
	f := startFake(t, fakemodal.Options{Faults: fakemodal.Faults{UnavailableEvery: 3, CreatesPerSecond: 1, RouterUnavailableEvery: 4, EchoCredentials: true}})
	var logs syncBuffer
	wrong := map[string]string{"token_id": testTokenID, "token_secret": "as-wrongsecretvalue0042"}
	bad := startPlugin(t, settingsFor(f.URL, nil), wrong, &logs)
	_, err := bad.Create(t.Context(), providers.CreateSpec{Name: "tok-1"})
	if providers.CodeOf(err) != providers.PermissionDenied || !strings.Contains(err.Error(), "[redacted]") {
		t.Errorf("Create with a wrong secret: %v, want PermissionDenied with the echoed headers redacted", err)
	}
	errText := fmt.Sprint(err)
	// A failure that outlasts the retries carries the server's echo too.
	noRetry := startPlugin(t, settingsFor(f.URL, map[string]any{"max_retries": 0}), testSecrets(), &logs)
	for range 3 {
		_, err := noRetry.List(t.Context(), providers.ListFilter{})
		errText += fmt.Sprint(err)
	}
	if !strings.Contains(errText, "upstream connect error") {
		t.Errorf("no UNAVAILABLE reached the caller: %s", errText)
	}
	good := startPlugin(t, settingsFor(f.URL, nil), testSecrets(), &logs)
	var created []string
	for i := range 3 {
		sb, err := good.Create(t.Context(), providers.CreateSpec{Name: fmt.Sprintf("tok-%d", i), Lifetime: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		created = append(created, sb.ID)
		r, err := good.Exec(t.Context(), sb.ID, providers.ExecRequest{Shell: "exit 3"})
		if err != nil || r.ExitCode != 3 {
			t.Errorf("exec: %+v, %v", r, err)
		}
		errText += fmt.Sprint(err)
	}
	for _, id := range created {
		if err := good.Terminate(t.Context(), id); err != nil {
			t.Error(err)
		}
	}
	if f.Stats().RateLimited == 0 || f.Stats().Unavailable == 0 {
		t.Errorf("the faults were not met: %+v", f.Stats())
	}
	all := logs.String() + errText
	for _, secret := range []string{testTokenID, testTokenSecret, "as-wrongsecretvalue0042"} {
		if strings.Contains(all, secret) {
			t.Errorf("%q appears in the logs or errors", secret)
		}
	}
	if !strings.Contains(logs.String(), "sandbox created") {
		t.Errorf("the logs lack the create lines: %s", logs.String())
	}
}

// TestShippedConfig: the [provider.modal] table of config.toml decodes,
// and sets every key to its default.
func TestShippedConfig(t *testing.T) {
	c, err := config.Load("../../config.toml")
	if err != nil {
		t.Fatal(err)
	}
	got, err := modal.ParseSettings(c.ProviderSettings("modal"))
	if err != nil {
		t.Fatal(err)
	}
	want := modal.DefaultSettings()
	want.TokenIDEnv, want.TokenSecretEnv = "MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET"
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("config.toml sets\n%+v\nthe defaults are\n%+v", got, want)
	}
}

// TestExpiringTokens: auth tokens and command router tokens that expire
// within seconds are refreshed, so calls keep working past them.
func TestExpiringTokens(t *testing.T) {
	f := startFake(t, fakemodal.Options{TokenTTL: 2 * time.Second, RouterTokenTTL: 2 * time.Second})
	p := inProcess(t, f, nil)
	sb, err := p.Create(t.Context(), providers.CreateSpec{Lifetime: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		time.Sleep(2100 * time.Millisecond) // past both tokens' expiry
		var out bytes.Buffer
		if r, err := p.Exec(t.Context(), sb.ID, providers.ExecRequest{Shell: "echo ok", Stdout: &out}); err != nil || out.String() != "ok\n" {
			t.Fatalf("exec after the tokens expired: %+v, %v, %q", r, err, out.String())
		}
	}
	if err := p.Terminate(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if s := f.Stats(); s.TokensIssued < 3 || s.Unauthenticated != 0 {
		t.Errorf("tokens issued %d, refused calls %d: want refreshes before expiry", s.TokensIssued, s.Unauthenticated)
	}
}

// TestRedactCredentials: whatever shape a server's message gives them,
// credentials come out.
func TestRedactCredentials(t *testing.T) {
	for _, msg := range []string{
		`denied (x-modal-token-id: ak-Zq81abcDEF x-modal-token-secret: as-Secret0123456789)`,
		`metadata map[authorization:[Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln] x-modal-token-secret:[as-Secret0123456789]]`,
		`"x-modal-auth-token"="eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"; retry`,
		`token ak-Zq81abcDEF is not allowed for as-Secret0123456789`,
	} {
		got := modal.Redact(msg)
		for _, secret := range []string{"ak-Zq81abcDEF", "as-Secret0123456789", "eyJhbGciOiJIUzI1NiJ9", "c2ln"} {
			if strings.Contains(got, secret) {
				t.Errorf("Redact(%q) = %q: keeps %s", msg, got, secret)
			}
		}
		if !strings.Contains(got, "[redacted]") {
			t.Errorf("Redact(%q) = %q", msg, got)
		}
	}
	if got := modal.Redact("Sandbox sb-01ARZ3 not found in App 'ap-x'"); got != "Sandbox sb-01ARZ3 not found in App 'ap-x'" {
		t.Errorf("a plain message changed: %q", got)
	}
}
