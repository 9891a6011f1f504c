package deno_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/testkit/fakedeno"
	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/deno"
)

func execOut(t *testing.T, p providers.Provider, id, shell string) string {
	t.Helper()
	var out strings.Builder
	r, err := p.Exec(t.Context(), id, providers.ExecRequest{Shell: shell, Stdout: &out, Stderr: &out, Timeout: time.Minute})
	if err != nil {
		t.Fatalf("Exec(%q): %v", shell, err)
	}
	if r.ExitCode != 0 {
		t.Fatalf("Exec(%q): exit %d: %s", shell, r.ExitCode, out.String())
	}
	return out.String()
}

// TestReconnectByIDFromAnotherProcess: a sandbox created by one plugin
// process outlives it (Deno's duration mode) and the next process, as the
// next Lambda invocation would, reaches it by id alone.
func TestReconnectByIDFromAnotherProcess(t *testing.T) {
	f := startFake(t, fakedeno.Options{})
	first := startPlugin(t, f, providers.SandboxDefaults{})
	sb, err := first.Create(t.Context(), providers.CreateSpec{Name: "reconnect", Lifetime: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	execOut(t, first, sb.ID, "echo kept > /workspace/x")
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	next := inProcess(t, f)
	if got := execOut(t, next, sb.ID, "cat /workspace/x"); got != "kept\n" {
		t.Fatalf("the next process reads %q", got)
	}
	got, err := next.Get(t.Context(), sb.ID)
	if err != nil || got.Name != "reconnect" || got.State != providers.StateRunning {
		t.Fatalf("Get from the next process: %+v, %v", got, err)
	}
	if err := next.Terminate(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if ids := f.Running(); len(ids) > 0 {
		t.Fatalf("still running: %v", ids)
	}
}

// TestSingleAttachWaitsForDetach: Deno attaches a volume to one sandbox at
// a time. A create mounting a volume still attached waits until the old
// sandbox is gone, within create_timeout, and says so when it is not.
func TestSingleAttachWaitsForDetach(t *testing.T) {
	f := startFake(t, fakedeno.Options{})
	p := inProcess(t, f)
	ctx := t.Context()
	if _, err := p.CreateVolume(ctx, providers.VolumeSpec{Slug: "ws-attach"}); err != nil {
		t.Fatal(err)
	}
	mount := []providers.Mount{{Volume: "ws-attach"}}
	old, err := p.Create(ctx, providers.CreateSpec{Mounts: mount})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(700 * time.Millisecond)
		if err := p.Terminate(context.WithoutCancel(ctx), old.ID); err != nil {
			t.Errorf("Terminate: %v", err)
		}
	}()
	next, err := p.Create(ctx, providers.CreateSpec{Mounts: mount})
	wg.Wait()
	if err != nil {
		t.Fatalf("Create waiting for the volume: %v", err)
	}
	if err := p.DeleteVolume(ctx, "ws-attach"); providers.CodeOf(err) != providers.FailedPrecondition {
		t.Fatalf("DeleteVolume of an attached volume: %v, want FailedPrecondition", err)
	}

	short := deno.New()
	if err := short.Configure(ctx, providers.Config{Settings: settingsFor(f, map[string]any{"create_timeout": "1s"}), Secrets: map[string]string{"token": testToken}}); err != nil {
		t.Fatal(err)
	}
	_, err = short.Create(ctx, providers.CreateSpec{Mounts: mount})
	if providers.CodeOf(err) != providers.FailedPrecondition || !strings.Contains(err.Error(), "VOLUME_ALREADY_ATTACHED") {
		t.Fatalf("Create while the volume stays attached: %v, want FailedPrecondition naming it", err)
	}
	if err := p.Terminate(ctx, next.ID); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotsCannotBeListed: Deno keeps no labels on snapshots, so the
// provider cannot say whose a snapshot is and does not list them; a
// snapshot it built still boots sandboxes.
func TestSnapshotsCannotBeListed(t *testing.T) {
	f := startFake(t, fakedeno.Options{})
	p := inProcess(t, f)
	ctx := t.Context()
	labels := map[string]string{"sandstep.deployment": "d1", "sandstep.snapshot": "session-dependencies"}
	for _, slug := range []string{"deps-aaaa", "deps-bbbb"} {
		spec := providers.SnapshotSpec{Slug: slug, Setup: []string{"mkdir -p /opt/sandstep && echo " + slug + " > /opt/sandstep/which"}, Labels: labels, Timeout: time.Minute}
		if _, err := p.EnsureSnapshot(ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.ListSnapshots(ctx, labels); !providers.IsUnsupported(err) {
		t.Fatalf("ListSnapshots = %v, want Unsupported", err)
	}
	if info, err := p.Info(ctx); err != nil || info.Capabilities.ListSnapshots || !info.Capabilities.Snapshots {
		t.Fatalf("capabilities %+v, %v: want snapshots without listing", info.Capabilities, err)
	}
	// A sandbox booted from it sees the build's files and environment.
	sb, err := p.Create(ctx, providers.CreateSpec{Snapshot: "deps-aaaa"})
	if err != nil {
		t.Fatal(err)
	}
	if out := execOut(t, p, sb.ID, "cat /opt/sandstep/which"); out != "deps-aaaa\n" {
		t.Fatalf("booted from the snapshot: %q", out)
	}
	if err := p.Terminate(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	for _, slug := range []string{"deps-aaaa", "deps-bbbb"} {
		if err := p.DeleteSnapshot(ctx, slug); err != nil {
			t.Fatal(err)
		}
	}
	for _, slug := range []string{"deps-aaaa", "deps-bbbb"} {
		if _, err := p.GetSnapshot(ctx, slug); !providers.IsNotFound(err) {
			t.Fatalf("GetSnapshot(%s) after DeleteSnapshot: %v, want NotFound", slug, err)
		}
	}
}

// TestSnapshotEnvReachesBootedSandboxes: SnapshotSpec.Env holds in every
// sandbox booted from the snapshot, under the spec's own Env.
func TestSnapshotEnvReachesBootedSandboxes(t *testing.T) {
	f := startFake(t, fakedeno.Options{})
	p := inProcess(t, f)
	ctx := t.Context()
	if _, err := p.EnsureSnapshot(ctx, providers.SnapshotSpec{Slug: "deps-env", Setup: []string{"true"}, Env: map[string]string{"NODE_PATH": "/opt/x", "KEEP": "snap"}, Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	sb, err := p.Create(ctx, providers.CreateSpec{Snapshot: "deps-env", Env: map[string]string{"KEEP": "spec"}})
	if err != nil {
		t.Fatal(err)
	}
	if out := execOut(t, p, sb.ID, `echo "$NODE_PATH $KEEP"`); out != "/opt/x spec\n" {
		t.Fatalf("environment: %q", out)
	}
	_ = p.Terminate(ctx, sb.ID)
}

// TestExposeHTTP returns a port's public URL, the one Deno issues, after
// telling the sandbox which port it serves.
func TestExposeHTTP(t *testing.T) {
	f := startFake(t, fakedeno.Options{})
	p := inProcess(t, f)
	ctx := t.Context()
	sb, err := p.Create(ctx, providers.CreateSpec{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Terminate(context.WithoutCancel(ctx), sb.ID)
	u, err := p.ExposeHTTP(ctx, sb.ID, 8000)
	if err != nil {
		t.Fatal(err)
	}
	exposed := f.Exposed(sb.ID)
	if len(exposed) != 1 {
		t.Fatalf("the fake saw %v", exposed)
	}
	for domain, target := range exposed {
		if u != "https://"+domain || target != "port:8000" {
			t.Fatalf("URL %s for %s -> %s", u, domain, target)
		}
	}
	if _, err := p.ExposeHTTP(ctx, sb.ID, 0); providers.CodeOf(err) != providers.InvalidArgument {
		t.Fatalf("port 0: %v", err)
	}
	if _, err := p.ExposeHTTP(ctx, "sbx_ord_00000000000000000000", 80); !providers.IsNotFound(err) {
		t.Fatalf("unknown sandbox: %v", err)
	}
}

// TestHostScopedSecretThroughTheFake: a Secret with hosts is a placeholder
// in the sandbox, replaced by the value only on the way to its host.
func TestHostScopedSecretThroughTheFake(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := newRecorder(t, &mu, &seen)
	f := startFake(t, fakedeno.Options{Hosts: map[string]string{"api.example.test": srv}})
	p := inProcess(t, f)
	ctx := t.Context()
	const value = "sk-provider-test-91d0"
	sb, err := p.Create(ctx, providers.CreateSpec{Secrets: []providers.Secret{{Name: "API_KEY", Value: value, Hosts: []string{"api.example.test"}}, {Name: "PLAIN", Value: "plain-value"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Terminate(context.WithoutCancel(ctx), sb.ID)
	out := execOut(t, p, sb.ID, `env | grep -E '^(API_KEY|PLAIN)=' | sort; curl -s -H "X-Key: $API_KEY" http://api.example.test/`)
	if !strings.Contains(out, "API_KEY=DENO_SECRET_PLACEHOLDER_") || !strings.Contains(out, "PLAIN=plain-value") || strings.Contains(out, value) {
		t.Fatalf("inside the sandbox: %q", out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0] != value {
		t.Fatalf("the secret's host saw %q", seen)
	}
}

func TestSettings(t *testing.T) {
	for _, c := range []struct {
		settings string
		want     []string
	}{
		{`{"region":"fra","memory_mb":100,"console_url":"ftp://x","sandbox_url":"https://x/path","volume_capacity_mb":10,"request_timeout":"0s"}`,
			[]string{"region", "memory_mb", "console_url", "sandbox_url", "volume_capacity_mb", "request_timeout"}},
		{`{"tokn_env":"X"}`, []string{"tokn_env"}},
		{`{"memory_mb":"lots"}`, []string{"memory_mb"}},
	} {
		_, err := deno.ParseSettings([]byte(c.settings))
		if err == nil {
			t.Errorf("%s: accepted", c.settings)
			continue
		}
		for _, key := range c.want {
			if !strings.Contains(err.Error(), key) {
				t.Errorf("%s: %v does not name %s", c.settings, err, key)
			}
		}
	}
	s, err := deno.ParseSettings([]byte(`{"token_env":"T","console_url":"http://127.0.0.1:1/"}`))
	if err != nil || s.ConsoleURL != "http://127.0.0.1:1" || s.Region != "ord" || s.MemoryMB != 1280 {
		t.Fatalf("defaults: %+v, %v", s, err)
	}
	p := deno.New()
	for secret, key := range map[string]string{"": "token_env", "ddp_personal": "org"} {
		settings, _ := json.Marshal(map[string]string{"token_env": "T"})
		err := p.Configure(t.Context(), providers.Config{Settings: settings, Secrets: map[string]string{"token": secret}})
		if providers.CodeOf(err) != providers.InvalidArgument || !strings.Contains(err.Error(), key) || (secret != "" && strings.Contains(err.Error(), secret)) {
			t.Errorf("token %q: %v, want InvalidArgument naming %s", secret, err, key)
		}
	}
}

// TestSnapshotBuiltOnceAcrossProcesses: two processes (as two Lambda
// invocations) ensuring one snapshot at once build it once: the loser
// meets the winner's build volume and waits for the snapshot.
func TestSnapshotBuiltOnceAcrossProcesses(t *testing.T) {
	f := startFake(t, fakedeno.Options{})
	a, b := inProcess(t, f), inProcess(t, f)
	spec := providers.SnapshotSpec{Slug: "deps-shared", Setup: []string{"sleep 1; echo built >> /opt/builds"}, Timeout: time.Minute}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, p := range []*deno.Provider{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = p.EnsureSnapshot(t.Context(), spec)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("EnsureSnapshot #%d: %v", i+1, err)
		}
	}
	sb, err := a.Create(t.Context(), providers.CreateSpec{Snapshot: "deps-shared"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Terminate(context.WithoutCancel(t.Context()), sb.ID)
	if out := execOut(t, a, sb.ID, "cat /opt/builds"); out != "built\n" {
		t.Fatalf("the setup ran %q, want once", out)
	}
	// Deno's own listing holds that one snapshot and no other.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, f.ConsoleURL+"/api/v2/snapshots", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var all []struct{ Slug string }
	if err := json.NewDecoder(res.Body).Decode(&all); err != nil || res.StatusCode != http.StatusOK || len(all) != 1 {
		t.Fatalf("snapshots: %d %+v, %v", res.StatusCode, all, err)
	}
}
