package config_test

import (
	"testing"
	"time"
)

func TestQuotasDefaultToUnlimited(t *testing.T) {
	c := mustParse(t, "", t.TempDir())
	if l := c.Quotas.For("acme"); l.ConcurrentJobs != 0 || l.JobsPerHour != 0 || l.ConcurrentSandboxes != 0 ||
		l.SandboxCreationsPerHour != 0 || l.MaxSandboxTTL != 0 {
		t.Fatalf("defaults = %+v", l)
	}
}

func TestQuotaOverridesKeepTheDefaultsTheyLeaveOut(t *testing.T) {
	c := mustParse(t, "[quotas]\nconcurrent_jobs = 5\njobs_per_hour = 100\n[quotas.tenants.acme]\njobs_per_hour = 0\nmax_sandbox_ttl = \"30m\"\n", t.TempDir())
	acme := c.Quotas.For("acme")
	if acme.ConcurrentJobs != 5 || acme.JobsPerHour != 0 || acme.MaxSandboxTTL.D() != 30*time.Minute {
		t.Fatalf("acme = %+v", acme)
	}
	if other := c.Quotas.For("globex"); other.ConcurrentJobs != 5 || other.JobsPerHour != 100 || other.MaxSandboxTTL != 0 {
		t.Fatalf("globex = %+v", other)
	}
}

func TestQuotasAreChecked(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"[quotas]\nconcurrent_jobs = -1\n", `config.toml:2: quotas.concurrent_jobs: -1 is negative; 0 means unlimited`},
		{"[quotas]\nconcurrent_sandboxes = 5000\n", `config.toml:2: quotas.concurrent_sandboxes: 5000 is more than 2000, the most one tenant's quota item holds`},
		{"[quotas]\nmax_sandbox_ttl = \"-1m\"\n", `config.toml:2: quotas.max_sandbox_ttl: must not be negative; "0s" means unlimited`},
		{"[quotas.tenants.acme]\njobs_per_hour = -3\n", `config.toml:2: quotas.tenants.acme.jobs_per_hour: -3 is negative; 0 means unlimited`},
		{"[quotas.tenants.acme]\nconcurrent_job = 3\n", `config.toml:2: unknown key "quotas.tenants.acme.concurrent_job" (did you mean "concurrent_jobs"?)`},
		{"[quotas.tenants.\"a b\"]\njobs_per_hour = 3\n", `config.toml:1: quotas.tenants."a b": "a b" is not a tenant name (1 to 64 letters, digits, '.', '_' and '-', starting with a letter or digit)`},
	} {
		if got := only(t, tc.src); got != tc.want {
			t.Errorf("%q:\n got  %s\n want %s", tc.src, got, tc.want)
		}
	}
}
