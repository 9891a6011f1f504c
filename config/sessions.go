package config

import (
	"net/url"
	"strings"
	"time"
	"unicode"
)

// SessionsConfig is [sessions]: the run_code workload. Each session has a
// volume mounted at /workspace that outlives its sandboxes; sandboxes boot
// from a snapshot holding the configured dependencies.
type SessionsConfig struct {
	// Enabled turns the session routes on; off, they answer 404.
	Enabled bool `toml:"enabled"`
	// Mode is SessionModeLazy (a session's sandbox starts with its first
	// run) or SessionModeWarm (it starts when the session is opened).
	Mode string `toml:"mode"`
	// VolumeTTLMinutes: a volume unused this long is deleted with its
	// files by the scheduled cleanup.
	VolumeTTLMinutes int `toml:"volume_ttl_minutes"`
	// SandboxIdleMinutes: a session's sandbox unused this long is closed;
	// the volume stays.
	SandboxIdleMinutes int    `toml:"sandbox_idle_minutes"`
	VolumeCapacityMB   int    `toml:"volume_capacity_mb"`
	TimeoutSeconds     int    `toml:"timeout_seconds"`
	MaxTimeoutSeconds  int    `toml:"max_timeout_seconds"`
	MemoryMB           int    `toml:"memory_mb"`
	Region             string `toml:"region"`
	// SyncWait is how long POST .../run waits for a run before answering
	// 202 with a link to poll; API Gateway cuts requests at 30 s.
	SyncWait Duration `toml:"sync_wait"`
	// ReaperInterval is how often `sandstep serve` runs the cleanup; in AWS
	// the ReaperFunction's schedule in template.yaml does.
	ReaperInterval Duration            `toml:"reaper_interval"`
	Dependencies   []SessionDependency `toml:"dependencies"`
	// BuildEnv names environment variables of the server handed to the
	// package managers that install the dependencies (a proxy, a CA
	// bundle), and to nothing else: sandboxes that run code never see them.
	BuildEnv []string `toml:"build_env"`
	// SnapshotRetryAfter is how long a failed dependency snapshot build is
	// remembered: runs meanwhile fail at once with its error instead of
	// building again.
	SnapshotRetryAfter Duration `toml:"snapshot_retry_after"`
	// SnapshotGrace is how long an old dependency snapshot is kept once a
	// new dependency list's snapshot replaced it, for processes still on
	// the old list; then the reaper deletes it unless a live sandbox uses
	// it.
	SnapshotGrace Duration `toml:"snapshot_grace"`
}

// SessionDependency is one [[sessions.dependencies]] entry.
type SessionDependency struct {
	// Package is an npm package spec ("lodash@4.17.21", also "npm:...")
	// or a pip requirement ("pip:requests==2.32.3").
	Package string `toml:"package"`
	// Docs are markdown documentation URLs of the package, indexed for
	// the search_docs tool (see [tools]).
	Docs []string `toml:"docs"`
	// SecretEnv names the environment variable whose value every session
	// sandbox gets as a secret of the same name.
	SecretEnv string `toml:"secret_env"`
	// Hosts the secret may be sent to, where the provider scopes secrets
	// by host.
	Hosts []string `toml:"hosts"`
}

// Session modes.
const (
	SessionModeLazy = "lazy"
	SessionModeWarm = "warm"
)

// Limits of [sessions] values.
const (
	// MaxSessionTimeoutSeconds keeps a run within what one Lambda
	// invocation (900 s) can supervise, with time to record the result.
	MaxSessionTimeoutSeconds = 840
	// MaxSessionSyncWait stays under API Gateway's 30 s integration limit
	// with time for the answer itself.
	MaxSessionSyncWait = 28 * time.Second
)

// VolumeTTL, SandboxIdle, Timeout and MaxTimeout are the durations the
// minute and second settings stand for.
func (s SessionsConfig) VolumeTTL() time.Duration {
	return time.Duration(s.VolumeTTLMinutes) * time.Minute
}

func (s SessionsConfig) SandboxIdle() time.Duration {
	return time.Duration(s.SandboxIdleMinutes) * time.Minute
}

func (s SessionsConfig) Timeout() time.Duration {
	return time.Duration(s.TimeoutSeconds) * time.Second
}

func (s SessionsConfig) MaxTimeout() time.Duration {
	return time.Duration(s.MaxTimeoutSeconds) * time.Second
}

func (s *SessionsConfig) setDefaults() {
	s.Enabled = false
	s.Mode = SessionModeLazy
	s.VolumeTTLMinutes = 30
	s.SandboxIdleMinutes = 5
	s.VolumeCapacityMB = 1024
	s.TimeoutSeconds = 60
	s.MaxTimeoutSeconds = 600
	s.MemoryMB = 1024
	s.Region = ""
	s.SyncWait = Duration(25 * time.Second)
	s.ReaperInterval = Duration(time.Minute)
	s.Dependencies = []SessionDependency{}
	s.BuildEnv = []string{}
	s.SnapshotRetryAfter = Duration(5 * time.Minute)
	s.SnapshotGrace = Duration(time.Hour)
}

func (s *SessionsConfig) check(_ *Config, r *report) {
	const t = "sessions"
	if s.Mode != SessionModeLazy && s.Mode != SessionModeWarm {
		r.add(t+".mode", "%s.mode: must be %q or %q, not %q", t, SessionModeLazy, SessionModeWarm, s.Mode)
	}
	atLeast(r, t+".volume_ttl_minutes", s.VolumeTTLMinutes, 1)
	atLeast(r, t+".sandbox_idle_minutes", s.SandboxIdleMinutes, 1)
	if s.VolumeTTLMinutes >= 1 && s.SandboxIdleMinutes > s.VolumeTTLMinutes {
		r.add(t+".sandbox_idle_minutes", "%s.sandbox_idle_minutes (%d) must not be longer than %s.volume_ttl_minutes (%d): a kept sandbox holds its volume", t, s.SandboxIdleMinutes, t, s.VolumeTTLMinutes)
	}
	atLeast(r, t+".volume_capacity_mb", s.VolumeCapacityMB, 1)
	switch {
	case s.MaxTimeoutSeconds < 1 || s.MaxTimeoutSeconds > MaxSessionTimeoutSeconds:
		r.add(t+".max_timeout_seconds", "%s.max_timeout_seconds: must be from 1 to %d, not %d", t, MaxSessionTimeoutSeconds, s.MaxTimeoutSeconds)
	case s.TimeoutSeconds < 1 || s.TimeoutSeconds > s.MaxTimeoutSeconds:
		r.add(t+".timeout_seconds", "%s.timeout_seconds: must be from 1 to %s.max_timeout_seconds (%d), not %d", t, t, s.MaxTimeoutSeconds, s.TimeoutSeconds)
	}
	if s.MemoryMB < 64 || s.MemoryMB > 65536 {
		r.add(t+".memory_mb", "%s.memory_mb: must be from 64 to 65536, not %d", t, s.MemoryMB)
	}
	if s.SyncWait <= 0 || s.SyncWait.D() > MaxSessionSyncWait {
		r.add(t+".sync_wait", "%s.sync_wait: must be longer than zero and at most %s (API Gateway cuts requests at 30s), not %s", t, MaxSessionSyncWait, s.SyncWait)
	}
	if s.ReaperInterval.D() < time.Second {
		r.add(t+".reaper_interval", "%s.reaper_interval: must be at least 1s, not %s", t, s.ReaperInterval)
	}
	if s.SnapshotGrace < 0 {
		r.add(t+".snapshot_grace", "%s.snapshot_grace: must be 0s or more, not %s", t, s.SnapshotGrace)
	}
	if s.SnapshotRetryAfter < 0 {
		r.add(t+".snapshot_retry_after", "%s.snapshot_retry_after: must be 0s or more, not %s", t, s.SnapshotRetryAfter)
	}
	named := map[string]int{}
	for i, name := range s.BuildEnv {
		key := index(t+".build_env", i)
		switch j, dup := named[name]; {
		case !envName.MatchString(name):
			r.add(key, "%s: must be the name of an environment variable (A-Z, 0-9 and _, such as \"HTTPS_PROXY\"); the value is not shown in case it is a secret", key)
		case dup:
			r.add(key, "%s: %s is already %s.build_env[%d]", key, name, t, j)
		default:
			named[name] = i
		}
	}
	packages := make(map[string]int, len(s.Dependencies))
	secrets := make(map[string]int, len(s.Dependencies))
	for i := range s.Dependencies {
		d := &s.Dependencies[i]
		el := index(t+".dependencies", i)
		if msg := checkPackage(d.Package); msg != "" {
			r.add(join(el, "package"), "%s.package: %s", el, msg)
		} else if j, dup := packages[d.Package]; dup {
			r.add(join(el, "package"), "%s.package: %q is already %s.dependencies[%d]", el, d.Package, t, j)
		} else {
			packages[d.Package] = i
		}
		for k, doc := range d.Docs {
			if u, err := url.Parse(doc); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				r.add(index(join(el, "docs"), k), "%s.docs[%d]: %q is not an http or https URL", el, k, doc)
			}
		}
		if d.SecretEnv != "" {
			if j, dup := secrets[d.SecretEnv]; dup {
				r.add(join(el, "secret_env"), "%s.secret_env: %s is already the secret of %s.dependencies[%d]", el, d.SecretEnv, t, j)
			} else {
				secrets[d.SecretEnv] = i
			}
		} else if len(d.Hosts) > 0 {
			r.add(join(el, "hosts"), "%s.hosts: only used with secret_env (the hosts the secret may be sent to)", el)
		}
		for k, h := range d.Hosts {
			checkHostRule(r, join(el, "hosts"), k, h, `"api.linear.app" or "*.example.com"`)
		}
		if d.Docs == nil {
			d.Docs = []string{}
		}
		if d.Hosts == nil {
			d.Hosts = []string{}
		}
	}
}

// checkPackage returns what is wrong with a dependency's package spec, or
// "". Specs reach npm and pip as single arguments, so they must not look
// like options or hold blanks.
func checkPackage(spec string) string {
	name := spec
	for _, p := range []string{"npm:", "pip:"} {
		if rest, ok := strings.CutPrefix(spec, p); ok {
			name = rest
			break
		}
	}
	switch {
	case name == "":
		return "must name a package, such as \"lodash@4.17.21\" (npm) or \"pip:requests==2.32.3\""
	case strings.HasPrefix(name, "-"):
		return "must not start with '-'"
	case strings.IndexFunc(name, func(c rune) bool { return unicode.IsSpace(c) || unicode.IsControl(c) }) >= 0:
		return "must not contain blanks or control characters"
	}
	return ""
}
