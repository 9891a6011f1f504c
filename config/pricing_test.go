package config_test

import (
	"strings"
	"testing"

	"github.com/sandstep/sandstep/config"
)

// A model's cache prices are optional: absent, they stay unset (cached
// tokens are then unpriced, not free); set, they are read and checked.
func TestPricingCachePricesAreOptional(t *testing.T) {
	c, err := config.Parse([]byte("[pricing.models.a]\ninput = 1.0\noutput = 2.0\n[pricing.models.b]\ninput = 1.0\ncache_read = 0.1\ncache_write = 1.25\n[pricing.egress]\nlocal = 0.09\n"), "config.toml", ".")
	if err != nil {
		t.Fatal(err)
	}
	a, b := c.Pricing.Models["a"], c.Pricing.Models["b"]
	if a.CacheRead != nil || a.CacheWrite != nil || b.CacheRead == nil || *b.CacheRead != 0.1 || *b.CacheWrite != 1.25 || c.Pricing.Egress["local"] != 0.09 {
		t.Fatalf("pricing %+v", c.Pricing)
	}
	for text, want := range map[string]string{
		"[pricing.models.a]\ncache_read = -1.0\n":   "pricing.models.a.cache_read: -1 is negative",
		"[pricing.models.a]\ncache_write = \"x\"\n": "pricing.models.a.cache_write: must be a number",
		"[pricing.egress]\nlocal = -0.5\n":          "pricing.egress.local: -0.5 is negative",
	} {
		if _, err := config.Parse([]byte(text), "config.toml", "."); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", text, err, want)
		}
	}
}
