package config

import (
	"path/filepath"
	"testing"
)

// Every key the loader knows is written, and so documented, in the shipped
// config.toml.
func TestShippedConfigHasEveryKey(t *testing.T) {
	c, err := Load(filepath.Join("..", "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, paths := range schemaKeys() {
		for _, p := range paths {
			if c.lines[p] == 0 {
				t.Errorf("config.toml does not set %s", p)
			}
		}
	}
}
