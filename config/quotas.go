package config

import (
	"maps"
	"slices"
)

// QuotaLimits are one tenant's quotas. Zero means unlimited.
type QuotaLimits struct {
	// ConcurrentSandboxes bounds the tenant's live sandboxes of every kind
	// (research jobs', sessions', direct ones).
	ConcurrentSandboxes int `toml:"concurrent_sandboxes"`
	// SandboxCreationsPerHour bounds sandbox creations per clock hour.
	SandboxCreationsPerHour int `toml:"sandbox_creations_per_hour"`
	// MaxSandboxTTL refuses a sandbox asked to live longer.
	MaxSandboxTTL Duration `toml:"max_sandbox_ttl"`
	// ConcurrentJobs bounds the tenant's jobs not yet ended.
	ConcurrentJobs int `toml:"concurrent_jobs"`
	// JobsPerHour bounds job submissions per clock hour.
	JobsPerHour int `toml:"jobs_per_hour"`
	// MaxCostPerDay and MaxCostPerMonth, in the [pricing] currency, refuse
	// new jobs once the tenant's jobs ended that UTC day or month cost
	// that much.
	MaxCostPerDay   float64 `toml:"max_cost_per_day"`
	MaxCostPerMonth float64 `toml:"max_cost_per_month"`
}

// QuotasConfig is [quotas]: every tenant's quotas, and per-tenant
// overrides in [quotas.tenants.<tenant>], where a key left out keeps the
// default.
type QuotasConfig struct {
	// The defaults, as QuotaLimits has them (the decoder reads tagged
	// fields only, so they are spelled out).
	ConcurrentSandboxes     int      `toml:"concurrent_sandboxes"`
	SandboxCreationsPerHour int      `toml:"sandbox_creations_per_hour"`
	MaxSandboxTTL           Duration `toml:"max_sandbox_ttl"`
	ConcurrentJobs          int      `toml:"concurrent_jobs"`
	JobsPerHour             int      `toml:"jobs_per_hour"`
	MaxCostPerDay           float64  `toml:"max_cost_per_day"`
	MaxCostPerMonth         float64  `toml:"max_cost_per_month"`

	Tenants map[string]QuotaLimits `toml:"tenants"`

	// resolved holds each overridden tenant's full limits.
	resolved map[string]QuotaLimits
}

// maxSlots is store.MaxSlots (config does not link the store): the largest
// concurrency limit one quota item holds.
const maxSlots = 2000

func (q *QuotasConfig) setDefaults() {
	*q = QuotasConfig{Tenants: map[string]QuotaLimits{}}
}

// For returns the tenant's quotas: its override's keys, the defaults for
// the rest.
func (q *QuotasConfig) For(tenant string) QuotaLimits {
	if l, ok := q.resolved[tenant]; ok {
		return l
	}
	return q.defaults()
}

func (q *QuotasConfig) defaults() QuotaLimits {
	return QuotaLimits{
		ConcurrentSandboxes: q.ConcurrentSandboxes, SandboxCreationsPerHour: q.SandboxCreationsPerHour,
		MaxSandboxTTL: q.MaxSandboxTTL, ConcurrentJobs: q.ConcurrentJobs, JobsPerHour: q.JobsPerHour,
		MaxCostPerDay: q.MaxCostPerDay, MaxCostPerMonth: q.MaxCostPerMonth,
	}
}

func (q *QuotasConfig) check(c *Config, r *report) {
	checkLimits("quotas", q.defaults(), r)
	q.resolved = make(map[string]QuotaLimits, len(q.Tenants))
	for _, tenant := range slices.Sorted(maps.Keys(q.Tenants)) {
		path := join("quotas.tenants", tenant)
		if !tenantName.MatchString(tenant) {
			r.add(path, "%s: %q is not a tenant name (1 to 64 letters, digits, '.', '_' and '-', starting with a letter or digit)", path, tenant)
			continue
		}
		o := q.Tenants[tenant]
		checkLimits(path, o, r)
		// A key the override leaves out keeps the default: the file says
		// which keys it sets.
		l := q.defaults()
		set := func(k string) bool { return r.lines[join(path, k)] > 0 }
		if set("concurrent_sandboxes") {
			l.ConcurrentSandboxes = o.ConcurrentSandboxes
		}
		if set("sandbox_creations_per_hour") {
			l.SandboxCreationsPerHour = o.SandboxCreationsPerHour
		}
		if set("max_sandbox_ttl") {
			l.MaxSandboxTTL = o.MaxSandboxTTL
		}
		if set("concurrent_jobs") {
			l.ConcurrentJobs = o.ConcurrentJobs
		}
		if set("jobs_per_hour") {
			l.JobsPerHour = o.JobsPerHour
		}
		if set("max_cost_per_day") {
			l.MaxCostPerDay = o.MaxCostPerDay
		}
		if set("max_cost_per_month") {
			l.MaxCostPerMonth = o.MaxCostPerMonth
		}
		q.resolved[tenant] = l
	}
}

func checkLimits(path string, l QuotaLimits, r *report) {
	for _, f := range []struct {
		key string
		v   int
		max int
	}{
		{"concurrent_sandboxes", l.ConcurrentSandboxes, maxSlots},
		{"sandbox_creations_per_hour", l.SandboxCreationsPerHour, 0},
		{"concurrent_jobs", l.ConcurrentJobs, maxSlots},
		{"jobs_per_hour", l.JobsPerHour, 0},
	} {
		key := join(path, f.key)
		switch {
		case f.v < 0:
			r.add(key, "%s: %d is negative; 0 means unlimited", key, f.v)
		case f.max > 0 && f.v > f.max:
			r.add(key, "%s: %d is more than %d, the most one tenant's quota item holds", key, f.v, f.max)
		}
	}
	if l.MaxCostPerDay < 0 {
		key := join(path, "max_cost_per_day")
		r.add(key, "%s: %v is negative; 0 means no budget", key, l.MaxCostPerDay)
	}
	if l.MaxCostPerMonth < 0 {
		key := join(path, "max_cost_per_month")
		r.add(key, "%s: %v is negative; 0 means no budget", key, l.MaxCostPerMonth)
	}
	if l.MaxSandboxTTL < 0 {
		key := join(path, "max_sandbox_ttl")
		r.add(key, "%s: must not be negative; \"0s\" means unlimited", key)
	}
}
