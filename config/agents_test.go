package config

import (
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/providers"
)

func TestAgentsDefaultsAndProblems(t *testing.T) {
	c, err := Parse([]byte(`
[agents.fake]
command = "fake-agent"
output = "stream-json"
key_env = "MODEL_KEY"
key_var = "ANTHROPIC_API_KEY"
key_hosts = ["127.0.0.1"]
env = { ANTHROPIC_BASE_URL = "http://127.0.0.1:9" }
`), "config.toml", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a := c.Agents["fake"]
	if a.Timeout.D() != 5*time.Minute || a.MaxTimeout.D() != time.Hour || a.Network != providers.NetworkAll || a.Env["ANTHROPIC_BASE_URL"] == "" {
		t.Errorf("defaults: %+v", a)
	}
	_, err = Parse([]byte(`
[agents.bad]
output = "xml"
key_env = "MODEL_KEY"
timeout = "2h"
commnd = "x"
`), "config.toml", t.TempDir())
	if err == nil {
		t.Fatal("a bad agent table was accepted")
	}
	for _, want := range []string{"agents.bad.command", "agents.bad.output", "agents.bad.key_var", "agents.bad.key_hosts", "agents.bad.timeout", "config.toml:6: unknown key \"agents.bad.commnd\" (did you mean \"command\"?)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not name %s:\n%v", want, err)
		}
	}
}
