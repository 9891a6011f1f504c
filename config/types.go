// Package config loads and validates config.toml.
//
// Decoding is strict: an unknown key is an error naming the key and its line,
// and every problem in a file is reported at once. Secrets are never written in
// the file; keys ending in "_env" name the environment variable that holds one.
package config

import "github.com/sandstep/sandstep/providers"

// Duration is a time.Duration written as a Go duration string ("30s", "5m")
// in TOML and JSON: the same type providers' own settings use.
type Duration = providers.Duration
