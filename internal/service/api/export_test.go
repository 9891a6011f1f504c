package api

import (
	"time"

	"github.com/sandstep/sandstep/config"
)

// SetHeartbeat shortens the keep-alive interval of streams for tests.
func SetHeartbeat(o *Options, d time.Duration) { o.Server.StreamHeartbeat = config.Duration(d) }
