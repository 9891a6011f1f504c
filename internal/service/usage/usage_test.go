package usage_test

import (
	"slices"
	"testing"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/service/usage"
)

func TestPriceNamesWhatHasNoPrice(t *testing.T) {
	p := config.PricingConfig{Currency: "EUR",
		Sandbox: map[string]map[string]float64{"sandy": {"default": 0.001, "2048": 0.002}},
		Models:  map[string]config.ModelPrice{"m": {Input: 1, Output: 4}},
		Search:  map[string]float64{"serper": 0.01}}
	u := store.Usage{
		SandboxSeconds: map[string]float64{"sandy/2048": 100, "sandy/512": 100, "local/0": 50},
		Tokens:         map[string]store.TokenCount{"m": {Input: 1_000_000, Output: 500_000}, "other": {Input: 5}},
		SearchCalls:    map[string]int64{"serper": 3, "wikipedia": 2},
	}
	c := usage.Price(p, u)
	if c.Currency != "EUR" || c.Sandbox != 0.3 || c.Tokens != 3 || c.Search != 0.03 || c.Total != 3.33 {
		t.Fatalf("cost %+v", c)
	}
	if want := []string{"model:other", "sandbox:local/0", "search:wikipedia"}; !slices.Equal(c.Unpriced, want) {
		t.Fatalf("unpriced %v, want %v", c.Unpriced, want)
	}
	v := usage.ViewOf(u)
	if len(v.SandboxSeconds) != 3 || v.SandboxSeconds[0].Provider != "local" || v.SandboxSeconds[2].MemoryMB != 512 || v.Tokens[0].Model != "m" {
		t.Fatalf("view %+v", v)
	}
}
