package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/sandstep/sandstep/providers"
)

// EnvPath is the environment variable that names the config file when no
// path is given explicitly (for example by a -config flag).
const EnvPath = "SANDSTEP_CONFIG"

// DefaultPath returns $SANDSTEP_CONFIG, or "config.toml" in the working
// directory when it is unset.
func DefaultPath() string {
	if p := os.Getenv(EnvPath); p != "" {
		return p
	}
	return "config.toml"
}

// Config is a loaded, validated config.toml. Paths in it are absolute.
type Config struct {
	// File names the file in problems, as it was given.
	File string
	// Dir is the absolute folder relative paths are resolved against: the
	// config file's own folder, so a config works from any working directory.
	Dir string

	Server    ServerConfig    `toml:"server"`
	Provider  ProviderConfig  `toml:"provider"`
	Sandbox   SandboxConfig   `toml:"sandbox"`
	Auth      AuthConfig      `toml:"auth"`
	Sessions  SessionsConfig  `toml:"sessions"`
	Sandboxes SandboxesConfig `toml:"sandboxes"`
	Research  ResearchConfig  `toml:"research"`
	Tools     ToolsConfig     `toml:"tools"`
	Quotas    QuotasConfig    `toml:"quotas"`
	Pricing   PricingConfig   `toml:"pricing"`
	Agents    AgentsConfig    `toml:"agents"`

	// providerTables holds the [provider.<name>] tables as JSON, as they
	// were written: each provider decodes and checks its own.
	providerTables map[string]json.RawMessage
	// lines keeps the key lines so that problems found after loading (a
	// missing secret) still point at the file.
	lines map[string]int
}

// section is one top-level table of config.toml. Adding a table means a
// struct with toml tags, a field on Config, an entry in sections, and these
// two methods.
type section interface {
	// setDefaults sets the documented defaults before the file is decoded
	// over them.
	setDefaults()
	// check validates the decoded values, resolves relative paths against
	// c.Dir, and reports every problem to r.
	check(c *Config, r *report)
}

// sections lists the tables in the order they are checked: a table may
// depend on one checked before it (provider.local.state_dir defaults to a
// folder of server.data_dir).
func (c *Config) sections() []section {
	return []section{&c.Server, &c.Provider, &c.Sandbox, &c.Auth, &c.Research, &c.Sessions, &c.Sandboxes, &c.Tools, &c.Quotas, &c.Pricing, &c.Agents}
}

// Load reads and validates the config file at path; an empty path means
// DefaultPath(). Problems in the file come back as one *Error.
func Load(path string) (*Config, error) {
	if path == "" {
		path = DefaultPath()
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(data, path, filepath.Dir(path))
}

// Parse validates a config held in memory. name is used in problems; dir is
// the folder relative paths are resolved against.
func Parse(data []byte, name, dir string) (*Config, error) {
	absDir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("config: resolving %s: %w", dir, err)
	}
	c := &Config{File: name, Dir: absDir}
	for _, s := range c.sections() {
		s.setDefaults()
	}
	r := &report{file: name, lines: make(map[string]int)}
	values := parse(data, r)
	if values == nil {
		return nil, r.err()
	}
	c.lines = r.lines
	c.providerTables = takeProviderTables(values, r)
	r.decodeTable("", values, reflect.ValueOf(c).Elem())
	for _, s := range c.sections() {
		s.check(c, r)
	}
	if err := r.err(); err != nil {
		return nil, err
	}
	return c, nil
}

// takeProviderTables removes from values the [provider.<name>] tables,
// checks them for secrets and returns them as JSON.
func takeProviderTables(values map[string]any, r *report) map[string]json.RawMessage {
	prov, ok := values["provider"].(map[string]any)
	if !ok {
		return nil
	}
	out := make(map[string]json.RawMessage)
	for _, name := range slices.Sorted(maps.Keys(prov)) {
		table, isTable := prov[name].(map[string]any)
		if !isTable {
			continue
		}
		delete(prov, name)
		key := join("provider", name)
		r.checkPassThrough(key, table)
		b, err := json.Marshal(table)
		if err != nil {
			r.add(key, "%s: cannot be passed to the plugin as JSON: %v", key, err)
			continue
		}
		out[name] = b
	}
	return out
}

// ProviderSettings returns the [provider.<name>] table as the JSON the
// plugin receives in Configure, as written ("{}" when there is none).
func (c *Config) ProviderSettings(name string) []byte {
	if raw, ok := c.providerTables[name]; ok {
		return slices.Clone(raw)
	}
	return []byte("{}")
}

// SetProviderSetting sets key of the [provider.<name>] table to v, as if
// the file said so: for a command that points a provider somewhere of its
// own (the conformance fixture's DNS server, say).
func (c *Config) SetProviderSetting(name, key string, v any) error {
	table := map[string]any{}
	if err := json.Unmarshal(c.ProviderSettings(name), &table); err != nil {
		return fmt.Errorf("config: decoding provider.%s: %w", name, err)
	}
	table[key] = v
	b, err := json.Marshal(table)
	if err != nil {
		return fmt.Errorf("config: provider.%s.%s: %w", name, key, err)
	}
	if c.providerTables == nil {
		c.providerTables = make(map[string]json.RawMessage)
	}
	c.providerTables[name] = b
	return nil
}

// ProviderDataDir is the folder of provider name's own state, for what its
// settings put nowhere else: <server.data_dir>/<name>.
func (c *Config) ProviderDataDir(name string) string {
	return filepath.Join(c.Server.DataDir, name)
}

// ProviderError turns the problems a provider found in its settings (a
// *providers.SettingsError in err's chain) into an *Error that names each
// key with its line in the file, as problems found at load do. Any other
// error is returned as it is.
func (c *Config) ProviderError(name string, err error) error {
	var se *providers.SettingsError
	if !errors.As(err, &se) {
		return err
	}
	table := join("provider", name)
	r := &report{file: c.File, lines: c.lines}
	for _, p := range se.Problems {
		key, msg := table, table+": "+p.Message
		if p.Key != "" {
			key, msg = table+"."+p.Key, table+"."+p.Message
		}
		// A key the file lacks (a required one, a default) points at its
		// table, or at provider.name when the table is missing too.
		line := r.line(key)
		if line == 0 {
			line = r.line("provider.name")
		}
		r.addAt(line, key, "%s", msg)
	}
	return r.err()
}

// ProviderSecrets resolves every "<secret>_env" key of the provider's table
// through getenv (os.Getenv when nil) and returns them by secret name:
// api_key_env = "SANDY_API_KEY" gives secrets["api_key"]. A variable that
// is named must be set and non-empty; every one that is not is reported in
// one *Error naming the variable, never a value. References to AWS secret
// stores need ProviderSecretsFrom.
func (c *Config) ProviderSecrets(name string, getenv func(string) string) (map[string]string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	return c.ProviderSecretsFrom(name, EnvLookup(getenv))
}

// ProviderSecretRefs returns the references of the provider's *_env keys
// by secret name, as ParseSecretRef reads them.
func (c *Config) ProviderSecretRefs(name string) (map[string]SecretRef, error) {
	var table map[string]any
	if err := json.Unmarshal(c.ProviderSettings(name), &table); err != nil {
		return nil, fmt.Errorf("config: decoding provider.%s: %w", name, err)
	}
	refs := map[string]SecretRef{}
	for k, v := range table {
		s, ok := v.(string)
		if !strings.HasSuffix(k, "_env") || !ok || s == "" {
			continue
		}
		ref, err := ParseSecretRef(s)
		if err != nil {
			return nil, fmt.Errorf("provider.%s.%s: %w", name, k, err)
		}
		refs[strings.TrimSuffix(k, "_env")] = ref
	}
	return refs, nil
}

// ProviderSecretsFrom is ProviderSecrets reading each *_env reference
// through lookup: an environment variable, a Secrets Manager secret or an
// SSM parameter. Every reference that cannot be read is reported in one
// *Error naming its key and the reference, never a value.
func (c *Config) ProviderSecretsFrom(name string, lookup SecretLookup) (map[string]string, error) {
	var table map[string]any
	if err := json.Unmarshal(c.ProviderSettings(name), &table); err != nil {
		return nil, fmt.Errorf("config: decoding provider.%s: %w", name, err)
	}
	r := &report{file: c.File, lines: c.lines}
	secrets := make(map[string]string)
	for _, k := range slices.Sorted(maps.Keys(table)) {
		variable, ok := table[k].(string)
		if !strings.HasSuffix(k, "_env") || !ok || variable == "" {
			continue
		}
		key := join(join("provider", name), k)
		ref, err := ParseSecretRef(variable)
		if err != nil {
			r.add(key, "%s: %v", key, err)
			continue
		}
		value, err := lookup(ref)
		if err != nil {
			r.add(key, "%s: %v", key, err)
			continue
		}
		secrets[strings.TrimSuffix(k, "_env")] = value
	}
	if err := r.err(); err != nil {
		return nil, err
	}
	return secrets, nil
}

// SandboxDefaults returns the [sandbox] table as the provider interface
// takes it.
func (c *Config) SandboxDefaults() providers.SandboxDefaults {
	s := c.Sandbox
	return providers.SandboxDefaults{
		Lifetime:     s.Lifetime.D(),
		IdleTimeout:  s.IdleTimeout.D(),
		ExecTimeout:  s.ExecTimeout.D(),
		MemoryMB:     s.MemoryMB,
		Network:      providers.NetworkPolicy{Mode: s.Network, AllowHosts: slices.Clone(s.AllowHosts)},
		AllowPrivate: slices.Clone(s.AllowPrivate),
	}
}

// PluginPath returns where the plugin binary for provider name lives.
func (c *Config) PluginPath(name string) string {
	return filepath.Join(c.Provider.PluginDir, "sandstep-provider-"+name)
}
