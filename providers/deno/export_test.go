package deno

import "time"

// SetBuildStale sets how long a build volume may be without a builder
// before its build counts as abandoned (a minute otherwise).
func SetBuildStale(p *Provider, d time.Duration) { p.buildStale = d }
