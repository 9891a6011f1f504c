package config_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/sandstep/sandstep/config"
)

// FuzzParse loads arbitrary TOML the way Load does with a file's bytes: it
// never panics, and a config it refuses comes back as one *config.Error
// whose every problem says where (a key or a line) and what.
func FuzzParse(f *testing.F) {
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := config.Parse(data, "config.toml", dir)
		if err == nil {
			// What loaded is usable as the program uses it.
			if c.Server.ReadTimeout() <= 0 || c.Server.MaxBodyBytes <= 0 || c.Provider.Name == "" {
				t.Fatalf("loaded a config the server cannot use: %+v", c.Server)
			}
			if !json.Valid(c.ProviderSettings(c.Provider.Name)) {
				t.Fatalf("loaded a config whose provider settings are not JSON: %s", c.ProviderSettings(c.Provider.Name))
			}
			return
		}
		var ce *config.Error
		if !errors.As(err, &ce) || len(ce.Problems) == 0 {
			t.Fatalf("error %T is not a *config.Error with problems: %v", err, err)
		}
		for _, p := range ce.Problems {
			if p.Message == "" || p.Key == "" && p.Line == 0 {
				t.Fatalf("a problem that says neither key nor line: %+v", p)
			}
		}
	})
}
