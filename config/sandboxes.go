package config

import (
	"net/url"
	"path"
	"time"
)

// SandboxesConfig is [sandboxes]: sandboxes that API clients (and agents
// inside sandboxes) create and use directly, with child sandboxes and their
// per-parent limits.
type SandboxesConfig struct {
	// APIURL is sandstep's base URL as a sandbox reaches it: it is
	// injected as SANDSTEP_URL. "" uses the URL of the request that
	// created the sandbox.
	APIURL string `toml:"api_url"`
	// DefaultTTL is a sandbox's lifetime when the request names none;
	// MaxTTL the longest a request may ask for.
	DefaultTTL Duration `toml:"default_ttl"`
	MaxTTL     Duration `toml:"max_ttl"`
	// IdleTimeout: a sandbox that no exec keeps busy, no API call touched
	// and no request to its exposed ports reached for this long is
	// terminated by the reaper. Traffic a process inside makes on its own
	// does not count.
	IdleTimeout Duration `toml:"idle_timeout"`
	// ExpiringNotice is how long before its end a sandbox.expiring event
	// is recorded.
	ExpiringNotice Duration `toml:"expiring_notice"`
	// ArtifactsDir is the folder in the sandbox that GET .../artifacts/
	// serves from.
	ArtifactsDir string `toml:"artifacts_dir"`
	// SyncWait is how long POST .../exec waits for a command before it
	// answers with the exec still running (its output then read by
	// offset); API Gateway cuts requests at 30 s.
	SyncWait Duration `toml:"sync_wait"`
	// InlineOutputBytes is the most stdout (and stderr) an exec answer
	// carries inline; the rest is read by offset.
	InlineOutputBytes int `toml:"inline_output_bytes"`
	// MaxOutputBytes bounds what an exec's output file keeps per stream;
	// output beyond it is dropped (the command goes on).
	MaxOutputBytes int64 `toml:"max_output_bytes"`
	// Per-parent limits on child sandboxes (created with a sandbox's
	// SANDSTEP_TOKEN).
	MaxChildren     int      `toml:"max_children"`
	ChildrenPerHour int      `toml:"children_per_hour"`
	ChildMaxTTL     Duration `toml:"child_max_ttl"`
	// MaxDepth is how deep children may nest (a child of a child ...).
	MaxDepth int `toml:"max_depth"`
}

func (s *SandboxesConfig) setDefaults() {
	*s = SandboxesConfig{
		APIURL:            "",
		DefaultTTL:        Duration(10 * time.Minute),
		MaxTTL:            Duration(24 * time.Hour),
		IdleTimeout:       Duration(10 * time.Minute),
		ExpiringNotice:    Duration(time.Minute),
		ArtifactsDir:      "/workspace/artifacts",
		SyncWait:          Duration(25 * time.Second),
		InlineOutputBytes: 1 << 20,
		MaxOutputBytes:    64 << 20,
		MaxChildren:       5,
		ChildrenPerHour:   10,
		ChildMaxTTL:       Duration(time.Hour),
		MaxDepth:          3,
	}
}

func (s *SandboxesConfig) check(_ *Config, r *report) {
	const t = "sandboxes"
	if s.APIURL != "" {
		if u, err := url.Parse(s.APIURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			r.add(t+".api_url", "%s.api_url: %q is not an http or https URL", t, s.APIURL)
		}
	}
	if s.MaxTTL.D() < time.Minute {
		r.add(t+".max_ttl", "%s.max_ttl: must be at least 1m, not %s", t, s.MaxTTL)
	}
	if s.DefaultTTL.D() < time.Second || s.DefaultTTL > s.MaxTTL {
		r.add(t+".default_ttl", "%s.default_ttl: must be from 1s to %s.max_ttl (%s), not %s", t, t, s.MaxTTL, s.DefaultTTL)
	}
	if s.IdleTimeout < 0 {
		r.add(t+".idle_timeout", "%s.idle_timeout: must be 0s (never) or more, not %s", t, s.IdleTimeout)
	}
	if s.ExpiringNotice < 0 {
		r.add(t+".expiring_notice", "%s.expiring_notice: must be 0s or more, not %s", t, s.ExpiringNotice)
	}
	if !path.IsAbs(s.ArtifactsDir) || path.Clean(s.ArtifactsDir) == "/" {
		r.add(t+".artifacts_dir", "%s.artifacts_dir: must be an absolute folder other than /, not %q", t, s.ArtifactsDir)
	}
	if s.SyncWait <= 0 || s.SyncWait.D() > MaxSessionSyncWait {
		r.add(t+".sync_wait", "%s.sync_wait: must be longer than zero and at most %s (API Gateway cuts requests at 30s), not %s", t, MaxSessionSyncWait, s.SyncWait)
	}
	if s.InlineOutputBytes < 1024 || s.InlineOutputBytes > 4<<20 {
		r.add(t+".inline_output_bytes", "%s.inline_output_bytes: must be from 1024 to %d (an answer stays under API Gateway's 6 MB), not %d", t, 4<<20, s.InlineOutputBytes)
	}
	if s.MaxOutputBytes < int64(s.InlineOutputBytes) {
		r.add(t+".max_output_bytes", "%s.max_output_bytes: must be at least %s.inline_output_bytes (%d), not %d", t, t, s.InlineOutputBytes, s.MaxOutputBytes)
	}
	atLeast(r, t+".max_children", s.MaxChildren, 0)
	atLeast(r, t+".children_per_hour", s.ChildrenPerHour, 0)
	atLeast(r, t+".max_depth", s.MaxDepth, 1)
	if s.ChildMaxTTL.D() < time.Second {
		r.add(t+".child_max_ttl", "%s.child_max_ttl: must be at least 1s, not %s", t, s.ChildMaxTTL)
	}
}
