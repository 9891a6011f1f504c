package deno_test

import (
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/testkit/fakedeno"
	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/conformance"
	"github.com/sandstep/sandstep/providers/deno"
	"github.com/sandstep/sandstep/providers/plugin/plugintest"
)

// TestConformanceCore runs the core cases through the real plugin process
// against the fake, with Deno's limit of 5 running sandboxes in force.
func TestConformanceCore(t *testing.T) {
	f := startFake(t, fakedeno.Options{})
	p := startPlugin(t, f, providers.SandboxDefaults{})
	conformance.Run(t, p, conformance.Options{Core: true, CaseTimeout: 2 * time.Minute})
	if ids := f.Running(); len(ids) > 0 {
		t.Errorf("sandboxes left running on the fake: %v", ids)
	}
}

// TestConformance runs the whole suite, the heavy cases too, through the
// real plugin process. Only the network cases do not run: the fake's
// sandboxes share this machine's network, and its allow_net holds only for
// what goes through its proxy, so a refused connection would prove nothing
// (the harness skips them without a Fixture).
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("the full suite takes minutes")
	}
	f := startFake(t, fakedeno.Options{})
	p := startPlugin(t, f, providers.SandboxDefaults{})
	conformance.Run(t, p, conformance.Options{CaseTimeout: 3 * time.Minute})
	if ids := f.Running(); len(ids) > 0 {
		t.Errorf("sandboxes left running on the fake: %v", ids)
	}
}

// TestConformanceCoreInProcess runs the core cases through the plugin
// protocol inside the test process.
func TestConformanceCoreInProcess(t *testing.T) {
	f := startFake(t, fakedeno.Options{})
	p := plugintest.Connect(t, deno.New())
	if err := p.Configure(t.Context(), providers.Config{Settings: settingsFor(f, nil), Secrets: map[string]string{"token": testToken}}); err != nil {
		t.Fatal(err)
	}
	conformance.Run(t, p, conformance.Options{Core: true, CaseTimeout: 2 * time.Minute})
}
