package config

import (
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/sandstep/sandstep/providers"
)

// Output formats of an agent's progress on stdout.
const (
	// AgentOutputText: every line is an agent.message.
	AgentOutputText = "text"
	// AgentOutputStreamJSON: JSON lines as Claude Code's
	// --output-format stream-json writes them (type assistant, user,
	// result ...), turned into agent.message, agent.tool_use and
	// agent.result events; other lines are messages.
	AgentOutputStreamJSON = "stream-json"
)

// AgentConfig is one [agents.<name>] table: a command-line agent that POST
// /v1/agent-runs runs in a sandbox.
type AgentConfig struct {
	// Command is run by bash in /workspace with the prompt on its stdin
	// and in the file $SANDSTEP_PROMPT_FILE.
	Command string `toml:"command"`
	// Setup, when set, runs before the command (installing the agent, for
	// example); its failure fails the run.
	Setup string `toml:"setup"`
	// Output is how stdout is read: "text" or "stream-json".
	Output string `toml:"output"`
	// KeyEnv names where the model key is read on the host (a *_env
	// value). KeyVar is the variable the agent reads it from: in the
	// sandbox it holds a placeholder, which the egress proxy replaces by
	// the key on requests to KeyHosts only.
	KeyEnv   string   `toml:"key_env"`
	KeyVar   string   `toml:"key_var"`
	KeyHosts []string `toml:"key_hosts"`
	// Env is plain configuration for the agent (a model endpoint such as
	// ANTHROPIC_BASE_URL); never secrets.
	Env map[string]string `toml:"env"`
	// Network and AllowHosts are the sandbox's network policy.
	Network    providers.NetworkMode `toml:"network"`
	AllowHosts []string              `toml:"allow_hosts"`
	// Timeout is a run's limit when the request names none; MaxTimeout
	// the longest a request may ask for.
	Timeout    Duration `toml:"timeout"`
	MaxTimeout Duration `toml:"max_timeout"`
}

// MaxAgentTimeout bounds max_timeout: the agent-run state machine ends an
// execution after 25 hours, which leaves time to collect and clean up.
const MaxAgentTimeout = 24 * time.Hour

// AgentsConfig is [agents]: the agents by name.
type AgentsConfig map[string]AgentConfig

var agentName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// setDefaults gives the keys an [agents.<name>] table leaves out their
// defaults (the decoder calls it for every table of the map).
func (a *AgentConfig) setDefaults() {
	*a = AgentConfig{
		Output:     AgentOutputText,
		Network:    providers.NetworkAll,
		Timeout:    Duration(5 * time.Minute),
		MaxTimeout: Duration(time.Hour),
	}
}

// Names returns the agents' names, sorted.
func (a AgentsConfig) Names() []string {
	names := make([]string, 0, len(a))
	for n := range a {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (a *AgentsConfig) setDefaults() { *a = AgentsConfig{} }

func (a *AgentsConfig) check(_ *Config, r *report) {
	for _, name := range a.Names() {
		ag := (*a)[name]
		t := join("agents", name)
		if !agentName.MatchString(name) {
			r.add(t, "%s: an agent's name is 1 to 32 characters of a-z, 0-9, '_' and '-', starting with a letter", t)
		}
		if ag.Command == "" {
			r.add(t+".command", "%s.command: must be the command that runs the agent", t)
		}
		switch ag.Output {
		case AgentOutputText, AgentOutputStreamJSON:
		default:
			r.add(t+".output", "%s.output: must be %q or %q, not %q", t, AgentOutputText, AgentOutputStreamJSON, ag.Output)
		}
		if ag.KeyEnv != "" {
			if _, err := ParseSecretRef(ag.KeyEnv); err != nil {
				r.add(t+".key_env", "%s.key_env: %v", t, err)
			}
			if !envName.MatchString(ag.KeyVar) {
				r.add(t+".key_var", "%s.key_var: must name the variable the agent reads its key from (such as \"ANTHROPIC_API_KEY\") when key_env is set", t)
			}
			if len(ag.KeyHosts) == 0 {
				r.add(t+".key_hosts", "%s.key_hosts: must list the hosts the key is sent to when key_env is set", t)
			}
		} else if ag.KeyVar != "" || len(ag.KeyHosts) > 0 {
			r.add(t+".key_env", "%s.key_env: must be set when key_var or key_hosts are", t)
		}
		for i, h := range ag.KeyHosts {
			checkHostRule(r, t+".key_hosts", i, h, `"api.anthropic.com"`)
		}
		envKeys := make([]string, 0, len(ag.Env))
		for k := range ag.Env {
			envKeys = append(envKeys, k)
		}
		sort.Strings(envKeys)
		for _, k := range envKeys {
			if !envName.MatchString(k) || k == ag.KeyVar || strings.HasPrefix(k, "SANDSTEP") {
				r.add(join(t+".env", k), "%s.env: %q must be a variable name, not key_var and not SANDSTEP_*", t, k)
			}
		}
		switch ag.Network {
		case providers.NetworkNone, providers.NetworkAll:
			if len(ag.AllowHosts) > 0 {
				r.add(t+".allow_hosts", "%s.allow_hosts: only used when network = \"allowlist\"", t)
			}
		case providers.NetworkAllowlist:
			if len(ag.AllowHosts) == 0 {
				r.add(t+".network", "%s.network = \"allowlist\" needs at least one host in allow_hosts", t)
			}
		default:
			r.add(t+".network", "%s.network: must be \"none\", \"all\" or \"allowlist\", not %q", t, ag.Network)
		}
		for i, h := range ag.AllowHosts {
			checkHostRule(r, t+".allow_hosts", i, h, `"api.anthropic.com"`)
		}
		if ag.MaxTimeout.D() < time.Second || ag.MaxTimeout.D() > MaxAgentTimeout {
			r.add(t+".max_timeout", "%s.max_timeout: must be from 1s to %s (the agent-run state machine's own limit is 25h), not %s", t, MaxAgentTimeout, ag.MaxTimeout)
		}
		if ag.Timeout.D() < time.Second || ag.Timeout > ag.MaxTimeout {
			r.add(t+".timeout", "%s.timeout: must be from 1s to max_timeout (%s), not %s", t, ag.MaxTimeout, ag.Timeout)
		}
	}
}
