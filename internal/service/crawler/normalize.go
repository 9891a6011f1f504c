package crawler

import (
	"net/url"

	"github.com/sandstep/sandstep/internal/service/urlnorm"
)

// Normalize and Key are the shared URL rules (package urlnorm).
var (
	Normalize = urlnorm.Normalize
	Key       = urlnorm.Key
)

// hostOf returns the host[:port] of a normalized URL: distinct ports are
// distinct hosts for the same-host and per-host rules.
func hostOf(normalized string) string {
	u, err := url.Parse(normalized)
	if err != nil {
		return ""
	}
	return u.Host
}
