// Package config loads and validates config.toml.
//
// Decoding is strict: an unknown key is an error naming the key and its line,
// and every problem in a file is reported at once. Secrets are never written in
// the file; keys ending in "_env" name the environment variable that holds one.
package config

import (
	"fmt"
	"time"
)

// Duration is a time.Duration written as a Go duration string ("30s", "5m")
// in TOML and JSON.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("invalid duration %q (want a number with a unit, e.g. \"30s\" or \"5m\")", string(b))
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }
