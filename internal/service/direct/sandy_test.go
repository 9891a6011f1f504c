package direct_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/conformance"
	"github.com/sandstep/sandstep/providers/plugin/plugintest"
	"github.com/sandstep/sandstep/providers/sandy"
)

// TestSandyFacadePassesConformance points the Sandy provider, Sandy's own
// client in sandstep, at sandstep's /api/sandboxes and runs the
// conformance suite's core cases through the plugin protocol: an agent
// written for Sandy works against sandstep unchanged.
func TestSandyFacadePassesConformance(t *testing.T) {
	e := newEnv(t, "")
	settings, _ := json.Marshal(map[string]any{"base_url": e.url, "retry_base_delay": "10ms", "max_retries": 4})
	p := plugintest.Connect(t, sandy.New())
	if err := p.Configure(t.Context(), providers.Config{Settings: settings, Secrets: map[string]string{"api_key": tokenAcme}}); err != nil {
		t.Fatal(err)
	}
	conformance.Run(t, p, conformance.Options{Core: true, CaseTimeout: 2 * time.Minute})
	if n := e.liveSandboxes(); n != 0 {
		t.Errorf("%d sandboxes left running by the conformance cases", n)
	}
}
