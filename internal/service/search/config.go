package search

import (
	"fmt"
	"os"

	"github.com/sandstep/sandstep/config"
)

// FromConfig returns the backends of [research.search] in their configured
// order. The Serper key is read through getenv (os.Getenv when nil) from
// the variable serper_api_key_env names. h.Timeout defaults to the
// section's timeout.
func FromConfig(c config.ResearchSearchConfig, getenv func(string) string, h HTTP) ([]Backend, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if h.Timeout <= 0 {
		h.Timeout = c.Timeout.D()
	}
	out := make([]Backend, 0, len(c.Backends))
	for _, name := range c.Backends {
		var (
			b   Backend
			err error
		)
		switch name {
		case config.BackendWikipedia:
			b, err = NewWikipedia(c.WikipediaLang, c.WikipediaURL, h)
		case config.BackendSearxNG:
			b, err = NewSearxNG(c.SearxNGURL, h)
		case config.BackendSerper:
			var key string
			key, err = config.ResearchSecret("research.search.serper_api_key_env", c.SerperAPIKeyEnv, getenv)
			if err == nil {
				b, err = NewSerper(key, c.SerperURL, h)
			}
		default:
			err = fmt.Errorf("search: unknown backend %q", name)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}
