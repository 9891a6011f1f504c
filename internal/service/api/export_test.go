package api

import (
	"net/http"
	"time"

	"github.com/sandstep/sandstep/config"
)

// SetHeartbeat shortens the keep-alive interval of streams for tests.
func SetHeartbeat(o *Options, d time.Duration) { o.Server.StreamHeartbeat = config.Duration(d) }

// RoutePatterns lists the routes New registers, in order.
func RoutePatterns() []string {
	s := &server{opts: Options{Server: limits(config.ServerConfig{})}}
	s.register(http.NewServeMux())
	return s.patterns
}
