package deno

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/testkit/fakedeno"
	"github.com/sandstep/sandstep/providers"
)

// TestExtendNearDenosEnd: Deno ends a sandbox 30 minutes after its create
// or last extend; one asked to live longer is extended by the first call
// into it within 10 minutes of that end, up to the lifetime asked for.
func TestExtendNearDenosEnd(t *testing.T) {
	f, configured := internalFake(t, "ddo_extend_test")
	p := configured()
	start := time.Now()
	sb, err := p.Create(t.Context(), providers.CreateSpec{Lifetime: 45 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Terminate(t.Context(), sb.ID)
	first := f.StopAt(sb.ID)
	if d := first.Sub(start); d < 29*time.Minute || d > 31*time.Minute {
		t.Fatalf("Deno's end is %s after the create, want 30m", d)
	}
	if !sb.ExpiresAt.After(start.Add(44 * time.Minute)) {
		t.Fatalf("ExpiresAt %s, want the lifetime asked for", sb.ExpiresAt)
	}
	exec := func() {
		t.Helper()
		if r, err := p.Exec(t.Context(), sb.ID, providers.ExecRequest{Argv: []string{"true"}}); err != nil || r.ExitCode != 0 {
			t.Fatalf("Exec: %+v, %v", r, err)
		}
	}
	exec() // 30 minutes left: nothing to do
	if got := f.StopAt(sb.ID); !got.Equal(first) {
		t.Fatalf("extended with 30 minutes left: %s -> %s", first, got)
	}
	p.now = func() time.Time { return start.Add(25 * time.Minute) }
	exec() // 5 minutes left: extended to the lifetime's end
	if got := f.StopAt(sb.ID); got.Sub(start) < 44*time.Minute || got.Sub(start) > 46*time.Minute {
		t.Fatalf("after the call near the end Deno's end is %s after the create, want 45m", got.Sub(start))
	}
}

// TestExtendFromAnotherProcess: the lifetime asked for lives in the
// sandbox, so the next process to reach it (the next Lambda invocation)
// reports it from Get and extends the sandbox near Deno's end as the
// creating process would. A sandbox whose record is gone is reported to
// end 30 minutes after its create, Deno's end without an extend.
func TestExtendFromAnotherProcess(t *testing.T) {
	f, configured := internalFake(t, "ddo_extend_test")
	first := configured()
	start := time.Now()
	sb, err := first.Create(t.Context(), providers.CreateSpec{Lifetime: 45 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Terminate(t.Context(), sb.ID)
	plain, err := first.Create(t.Context(), providers.CreateSpec{Lifetime: 45 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Terminate(t.Context(), plain.ID)
	if r, err := first.Exec(t.Context(), plain.ID, providers.ExecRequest{Shell: "rm " + recordFile}); err != nil || r.ExitCode != 0 {
		t.Fatalf("removing the record: %+v, %v", r, err)
	}

	next := configured()
	got, err := next.Get(t.Context(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d := got.ExpiresAt.Sub(start); d < 44*time.Minute || d > 46*time.Minute {
		t.Fatalf("the next process reports the end %s after the create, want 45m", d)
	}
	got, err = next.Get(t.Context(), plain.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d := got.ExpiresAt.Sub(start); d < 29*time.Minute || d > 31*time.Minute {
		t.Fatalf("without its record the sandbox is reported to end %s after the create, want Deno's 30m", d)
	}
	next.now = func() time.Time { return start.Add(25 * time.Minute) }
	if r, err := next.Exec(t.Context(), sb.ID, providers.ExecRequest{Argv: []string{"true"}}); err != nil || r.ExitCode != 0 {
		t.Fatalf("Exec: %+v, %v", r, err)
	}
	if d := f.StopAt(sb.ID).Sub(start); d < 44*time.Minute || d > 46*time.Minute {
		t.Fatalf("after the next process's call near the end Deno's end is %s after the create, want 45m", d)
	}
	// A third process learns the new end from the sandbox: nothing to do.
	third := configured()
	third.now = next.now
	if _, err := third.Get(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	third.mu.Lock()
	r := third.records[sb.ID]
	third.mu.Unlock()
	if r == nil || !r.stopAt.Equal(f.StopAt(sb.ID).Truncate(time.Millisecond)) {
		t.Fatalf("the third process's record %+v, Deno's end %s", r, f.StopAt(sb.ID))
	}
}

// internalFake serves a fake Deno expecting token for a test inside the
// package (which cannot use the external tests' startFake), and returns it
// with a constructor of providers configured for it, each as a new
// process would be. Without bubblewrap the test is skipped, or fails under
// CI.
func internalFake(t *testing.T, token string) (*fakedeno.Running, func() *Provider) {
	t.Helper()
	f, err := fakedeno.Start(fakedeno.Options{Token: token}, "", "")
	if errors.Is(err, fakedeno.ErrNoBubblewrap) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	settings := []byte(`{"token_env":"T","console_url":"` + f.ConsoleURL + `","sandbox_url":"` + f.SandboxURL + `"}`)
	return f, func() *Provider {
		t.Helper()
		p := New()
		if err := p.Configure(t.Context(), providers.Config{Settings: settings, Secrets: map[string]string{"token": token}}); err != nil {
			t.Fatal(err)
		}
		return p
	}
}
