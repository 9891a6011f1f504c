package config

import "regexp"

// PricingConfig is [pricing]: what usage costs, so that a job's and a
// tenant's usage is shown with its cost. A usage with no price here is
// shown without one (and named in the cost's "unpriced").
type PricingConfig struct {
	// Currency names the unit of every price, such as "USD".
	Currency string `toml:"currency"`
	// Sandbox prices a second of sandbox life, by provider
	// ([pricing.sandbox.<provider>]) and memory size in MB ("512"), or
	// "default" for any size without its own price.
	Sandbox map[string]map[string]float64 `toml:"sandbox"`
	// Models price a million tokens of a model ([pricing.models.<model>]).
	Models map[string]ModelPrice `toml:"models"`
	// Search prices one call of a search backend, by its name.
	Search map[string]float64 `toml:"search"`
	// Egress prices a gigabyte (10^9 bytes) that a provider's sandboxes
	// sent to the network, by provider, where the provider measures it.
	Egress map[string]float64 `toml:"egress"`
}

// ModelPrice is a model's price per million input and output tokens, and,
// for models whose API reports prompt-cache tokens apart (Anthropic's),
// per million tokens read from and written to the cache: without those
// prices cached tokens are left unpriced, not priced as input.
type ModelPrice struct {
	Input      float64  `toml:"input"`
	Output     float64  `toml:"output"`
	CacheRead  *float64 `toml:"cache_read"`
	CacheWrite *float64 `toml:"cache_write"`
}

var (
	currencyCode = regexp.MustCompile(`^[A-Z]{3}$`)
	memoryKey    = regexp.MustCompile(`^(default|[1-9][0-9]{0,6})$`)
)

func (p *PricingConfig) setDefaults() {
	*p = PricingConfig{Currency: "USD", Sandbox: map[string]map[string]float64{}, Models: map[string]ModelPrice{}, Search: map[string]float64{}, Egress: map[string]float64{}}
}

func (p *PricingConfig) check(_ *Config, r *report) {
	if !currencyCode.MatchString(p.Currency) {
		r.add("pricing.currency", "pricing.currency: %q is not an ISO 4217 code such as \"USD\"", p.Currency)
	}
	negative := func(key string, v float64) {
		if v < 0 {
			r.add(key, "%s: %v is negative", key, v)
		}
	}
	// Problems come out in line order whatever the order they are found
	// in, so the maps are read as they are.
	for prov, sizes := range p.Sandbox {
		for size, price := range sizes {
			key := join(join("pricing.sandbox", prov), size)
			if !memoryKey.MatchString(size) {
				r.add(key, "%s: %q is neither a memory size in MB (such as \"512\") nor \"default\"", key, size)
			}
			negative(key, price)
		}
	}
	for m, price := range p.Models {
		negative(join(join("pricing.models", m), "input"), price.Input)
		negative(join(join("pricing.models", m), "output"), price.Output)
		if price.CacheRead != nil {
			negative(join(join("pricing.models", m), "cache_read"), *price.CacheRead)
		}
		if price.CacheWrite != nil {
			negative(join(join("pricing.models", m), "cache_write"), *price.CacheWrite)
		}
	}
	for b, price := range p.Search {
		negative(join("pricing.search", b), price)
	}
	for prov, price := range p.Egress {
		negative(join("pricing.egress", prov), price)
	}
}
