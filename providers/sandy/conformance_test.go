package sandy_test

import (
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/testkit/fakesandy"
	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/conformance"
	"github.com/sandstep/sandstep/providers/plugin/plugintest"
	"github.com/sandstep/sandstep/providers/sandy"
)

// retryableFaults are the fake's transient failures, as many as the
// provider's retries (max_retries 6 in settingsFor) absorb: a create meets
// up to 2 429s, a 502 and 2 more 502s.
var retryableFaults = fakesandy.Faults{
	CreateUpstreamErrors: 2,
	UpstreamErrorEvery:   7,
	RateLimitEvery:       5,
	RateLimitBurst:       2,
	WarmupExecFailures:   2,
	TruncateReadsAbove:   4096,
	TeardownDelay:        config.Duration(2 * time.Second),
}

// TestConformance runs the suite through the plugin boundary against the
// fake with every retryable fault switched on.
func TestConformance(t *testing.T) {
	f, log := startFake(t, fakesandy.Options{Faults: retryableFaults})
	p := startPlugin(t, settingsFor(f.URL, nil), testKey, nil)
	conformance.Run(t, p, conformance.Options{
		Short: testing.Short(),
		// A healthy case takes seconds; the bound keeps a hung provider
		// from running into go test's own timeout.
		CaseTimeout: 90 * time.Second,
	})
	if ids := f.Sandboxes(); len(ids) > 0 {
		t.Errorf("sandboxes left alive on the fake: %v", ids)
	}
	for _, status := range []int{429, 502} {
		n := log.count(func(q request) bool { return q.status == status })
		if n == 0 {
			t.Errorf("the fake never answered %d: the faults were not exercised", status)
		}
		t.Logf("%d answers of %d survived", n, status)
	}
}

// TestConformanceCoreInProcess runs the core cases through the plugin
// protocol inside the test process: no plugin binary, the same gRPC.
func TestConformanceCoreInProcess(t *testing.T) {
	f, _ := startFake(t, fakesandy.Options{})
	p := plugintest.Connect(t, sandy.New())
	if err := p.Configure(t.Context(), providers.Config{Settings: settingsFor(f.URL, nil), Secrets: map[string]string{"api_key": testKey}}); err != nil {
		t.Fatal(err)
	}
	conformance.Run(t, p, conformance.Options{Core: true, CaseTimeout: 90 * time.Second})
	if ids := f.Sandboxes(); len(ids) > 0 {
		t.Errorf("sandboxes left alive on the fake: %v", ids)
	}
}
