package api

import "time"

// SetHeartbeat shortens the keep-alive interval of streams for tests.
func SetHeartbeat(o *Options, d time.Duration) { o.heartbeat = d }
