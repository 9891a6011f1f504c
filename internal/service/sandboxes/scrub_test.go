package sandboxes

import (
	"errors"
	"testing"

	"github.com/sandstep/sandstep/providers"
)

// A provider error that echoes a secret is logged without it.
func TestScrubHidesSecrets(t *testing.T) {
	spec := providers.CreateSpec{Secrets: []providers.Secret{{Name: "API_KEY", Value: "sk-live-123"}, {Name: "EMPTY"}}}
	got := scrub(errors.New(`create: env API_KEY=sk-live-123 rejected (sk-live-123)`), spec)
	if want := `create: env API_KEY=[redacted:API_KEY] rejected ([redacted:API_KEY])`; got != want {
		t.Fatalf("scrub = %q, want %q", got, want)
	}
}
