package sandy_test

import (
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/fakesandy"
	"github.com/sandstep/sandstep/providers/conformance"
)

func TestConformance(t *testing.T) {
	f, _ := startFake(t, fakesandy.Options{})
	p := startPlugin(t, settingsFor(f.URL, nil), testKey, nil)
	conformance.Run(t, p, conformance.Options{
		Short:       testing.Short(),
		CaseTimeout: 90 * time.Second,
	})
	if ids := f.Sandboxes(); len(ids) > 0 {
		t.Errorf("sandboxes left alive on the fake: %v", ids)
	}
}
