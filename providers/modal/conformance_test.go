package modal_test

import (
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/testkit/fakemodal"
	"github.com/sandstep/sandstep/providers/conformance"
)

// retryableFaults are the fake's transient failures that the provider's
// retries absorb: Modal's create rate limit, UNAVAILABLE bursts, a lost
// create answer, and a first auth token that expires at once.
var retryableFaults = fakemodal.Faults{
	CreatesPerSecond:  5,
	UnavailableEvery:  9,
	UnavailableBurst:  2,
	LoseCreateAnswers: 2,
	// Router calls are idempotent (exec ids, stdin offsets, output
	// offsets), so the provider retries them.
	RouterUnavailableEvery: 11,
}

// TestConformance runs the whole suite through the real plugin process
// against the fake with the retryable faults on.
func TestConformance(t *testing.T) {
	f := startFake(t, fakemodal.Options{Faults: retryableFaults, FirstTokenTTL: 3 * time.Second})
	p := startPlugin(t, settingsFor(f.URL, nil), testSecrets(), nil)
	conformance.Run(t, p, conformance.Options{Short: testing.Short(), CaseTimeout: 120 * time.Second})
	s := f.Stats()
	if s.Unavailable == 0 || s.RouterUnavailable == 0 || s.LostCreates == 0 || s.TokensIssued < 2 {
		t.Errorf("the faults were not all met: %+v", s)
	}
	t.Logf("fake: %+v", s)
}

// TestConformanceCoreInProcess runs the core cases through the plugin
// protocol inside the test process.
func TestConformanceCoreInProcess(t *testing.T) {
	f := startFake(t, fakemodal.Options{})
	conformance.Run(t, inProcess(t, f, nil), conformance.Options{Core: true, CaseTimeout: 90 * time.Second})
}
