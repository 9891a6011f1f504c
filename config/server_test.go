package config_test

import (
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
)

func TestServerLimitDefaults(t *testing.T) {
	c := mustParse(t, "", t.TempDir())
	s := c.Server
	if s.ReadHeaderTimeout.D() != 10*time.Second || s.ReadBodyTimeout.D() != 30*time.Second || s.WriteTimeout.D() != 90*time.Second ||
		s.IdleTimeout.D() != 2*time.Minute || s.MaxHeaderBytes != 32<<10 || s.MaxBodyBytes != 64<<10 || s.MaxRunBodyBytes != 2<<20 ||
		s.StreamHeartbeat.D() != 15*time.Second || s.StreamMaxDuration.D() != 30*time.Minute {
		t.Fatalf("server defaults = %+v", s)
	}
	if s.ReadTimeout() != 40*time.Second {
		t.Fatalf("ReadTimeout = %s, want headers + body = 40s", s.ReadTimeout())
	}
	d := config.DefaultServer()
	d.DataDir = s.DataDir // resolved against the config folder
	if d != s {
		t.Fatalf("DefaultServer() = %+v, a config without [server] has %+v", d, s)
	}
}

func TestServerLimitsAreChecked(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"[server]\nread_header_timeout = \"0s\"\n", `config.toml:2: server.read_header_timeout: must be from 100ms to 5m0s, not 0s`},
		{"[server]\nread_body_timeout = \"11m\"\n", `config.toml:2: server.read_body_timeout: must be from 100ms to 10m0s, not 11m0s`},
		{"[server]\nidle_timeout = \"-1s\"\n", `config.toml:2: server.idle_timeout: must be from 100ms to 1h0m0s, not -1s`},
		{"[server]\nmax_header_bytes = 100\n", `config.toml:2: server.max_header_bytes: must be from 4096 to 1048576 bytes, not 100`},
		{"[server]\nmax_body_bytes = 20000000\n", `config.toml:2: server.max_body_bytes: must be from 1024 to 10485760 bytes, not 20000000`},
		{"[server]\nmax_run_body_bytes = 0\n", `config.toml:2: server.max_run_body_bytes: must be from 4096 to 10485760 bytes, not 0`},
		{"[server]\nstream_heartbeat = \"1m\"\nstream_max_duration = \"30s\"\n", `config.toml:2: server.stream_heartbeat: must be shorter than stream_max_duration (30s), not 1m0s`},
		// The write deadline must leave room for a run answered at
		// sync_wait, after its body was read.
		{"[server]\nwrite_timeout = \"40s\"\n", `config.toml:2: server.write_timeout: must be at least read_body_timeout + sessions.sync_wait + 5s (1m0s), so that a run's answer is written in time; not 40s`},
		{"[server]\nread_body_timeout = \"70s\"\n", `config.toml:1: server.write_timeout: must be at least read_body_timeout + sessions.sync_wait + 5s (1m40s), so that a run's answer is written in time; not 1m30s`},
		{"[server]\nmax_body_bytes = \"64k\"\n", `config.toml:2: server.max_body_bytes: must be an integer, not a string`},
	} {
		if got := only(t, tc.src); got != tc.want {
			t.Errorf("%q:\n got  %s\n want %s", tc.src, got, tc.want)
		}
	}
	// Short timeouts are allowed (tests use them).
	c := mustParse(t, "[server]\nread_header_timeout = \"200ms\"\nread_body_timeout = \"300ms\"\nwrite_timeout = \"40s\"\n[sessions]\nsync_wait = \"5s\"\n", t.TempDir())
	if c.Server.ReadTimeout() != 500*time.Millisecond {
		t.Fatalf("ReadTimeout = %s", c.Server.ReadTimeout())
	}
}
