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

// Bytes out are priced per gigabyte by provider, cache tokens at their own
// prices (unpriced, not priced as input, without them); a usage with no
// measured bytes shows none, one measured at zero shows 0.
func TestPriceEgressAndCacheTokens(t *testing.T) {
	read, write := 0.3, 3.75
	p := config.PricingConfig{Currency: "USD",
		Models: map[string]config.ModelPrice{"claude": {Input: 3, Output: 15, CacheRead: &read, CacheWrite: &write}, "plain": {Input: 1, Output: 1}},
		Egress: map[string]float64{"local": 0.09}}
	u := store.Usage{
		Tokens: map[string]store.TokenCount{
			"claude": {Input: 1000, Output: 2000, CacheRead: 1_000_000, CacheWrite: 100_000},
			"plain":  {Input: 1_000_000, CacheRead: 10},
		},
		BytesOut: map[string]int64{"local": 2_000_000_000, "sandy": 5},
	}
	c := usage.Price(p, u)
	// claude: 1000*3/1e6 + 2000*15/1e6 + 1e6*0.3/1e6 + 1e5*3.75/1e6 = 0.003+0.03+0.3+0.375;
	// plain: its input, its cache tokens unpriced.
	if c.Tokens != 1.708 || c.Egress != 0.18 || c.Total != 1.888 {
		t.Fatalf("cost %+v", c)
	}
	if want := []string{"egress:sandy", "model:plain:cache"}; !slices.Equal(c.Unpriced, want) {
		t.Fatalf("unpriced %v, want %v", c.Unpriced, want)
	}
	if v := usage.ViewOf(u); v.BytesOut == nil || *v.BytesOut != 2_000_000_005 || v.Tokens[0].CacheRead != 1_000_000 {
		t.Fatalf("view %+v", v)
	}
	if v := usage.ViewOf(store.Usage{Execs: 1}); v.BytesOut != nil {
		t.Fatalf("nothing measured shows bytes_out %d", *v.BytesOut)
	}
	if v := usage.ViewOf(store.Usage{BytesOut: map[string]int64{"local": 0}}); v.BytesOut == nil || *v.BytesOut != 0 {
		t.Fatalf("measured zero: %v", v.BytesOut)
	}
}
