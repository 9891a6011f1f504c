package config

import "time"

// DefaultServer is [server] with every key at its default.
func DefaultServer() ServerConfig {
	return ServerConfig{
		Addr:              "127.0.0.1:8080",
		DataDir:           ".sandstep",
		ReadHeaderTimeout: Duration(10 * time.Second),
		ReadBodyTimeout:   Duration(30 * time.Second),
		WriteTimeout:      Duration(90 * time.Second),
		IdleTimeout:       Duration(2 * time.Minute),
		MaxHeaderBytes:    32 << 10,
		MaxBodyBytes:      64 << 10,
		MaxRunBodyBytes:   2 << 20,
		StreamHeartbeat:   Duration(15 * time.Second),
		StreamMaxDuration: Duration(30 * time.Minute),
	}
}

// Bounds of the [server] limits. Timeouts shorter than a second are
// allowed for tests; production values are seconds to minutes.
const (
	minTimeout = 100 * time.Millisecond
	// MaxAPIGatewayBody is API Gateway's payload limit: a larger body
	// never reaches the API Lambda.
	MaxAPIGatewayBody = 10 << 20
	// writeMargin is what a run answered at sync_wait needs beyond it to
	// be recorded and written.
	writeMargin = 5 * time.Second
)

// ReadTimeout is how long the server may take to read a whole request:
// its headers, then its body.
func (s ServerConfig) ReadTimeout() time.Duration {
	return s.ReadHeaderTimeout.D() + s.ReadBodyTimeout.D()
}

func (s *ServerConfig) checkLimits(c *Config, r *report) {
	durations := []struct {
		key    string
		v      Duration
		lo, hi time.Duration
	}{
		{"read_header_timeout", s.ReadHeaderTimeout, minTimeout, 5 * time.Minute},
		{"read_body_timeout", s.ReadBodyTimeout, minTimeout, 10 * time.Minute},
		{"write_timeout", s.WriteTimeout, minTimeout, time.Hour},
		{"idle_timeout", s.IdleTimeout, minTimeout, time.Hour},
		{"stream_heartbeat", s.StreamHeartbeat, minTimeout, 5 * time.Minute},
		{"stream_max_duration", s.StreamMaxDuration, minTimeout, 24 * time.Hour},
	}
	ok := true
	for _, d := range durations {
		if d.v.D() < d.lo || d.v.D() > d.hi {
			r.add("server."+d.key, "server.%s: must be from %s to %s, not %s", d.key, d.lo, d.hi, d.v)
			ok = false
		}
	}
	sizes := []struct {
		key    string
		v      int
		lo, hi int
	}{
		{"max_header_bytes", s.MaxHeaderBytes, 4 << 10, 1 << 20},
		{"max_body_bytes", s.MaxBodyBytes, 1 << 10, MaxAPIGatewayBody},
		{"max_run_body_bytes", s.MaxRunBodyBytes, 4 << 10, MaxAPIGatewayBody},
	}
	for _, z := range sizes {
		if z.v < z.lo || z.v > z.hi {
			r.add("server."+z.key, "server.%s: must be from %d to %d bytes, not %d", z.key, z.lo, z.hi, z.v)
		}
	}
	if !ok {
		return
	}
	if s.StreamHeartbeat >= s.StreamMaxDuration {
		r.add("server.stream_heartbeat", "server.stream_heartbeat: must be shorter than stream_max_duration (%s), not %s", s.StreamMaxDuration, s.StreamHeartbeat)
	}
	// A run answers at sync_wait at the latest, after its body was read;
	// the answer must still be inside the write deadline, which starts when
	// the headers are in.
	if sw := c.Sessions.SyncWait.D(); sw > 0 {
		if need := s.ReadBodyTimeout.D() + sw + writeMargin; s.WriteTimeout.D() < need {
			r.add("server.write_timeout", "server.write_timeout: must be at least read_body_timeout + sessions.sync_wait + %s (%s), so that a run's answer is written in time; not %s", writeMargin, need, s.WriteTimeout)
		}
	}
}
