package config

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/egress"
)

// CheckListenAddr checks a host:port to serve the API on. Only loopback
// addresses (and "localhost") are accepted unless nonLoopback is set: the
// control plane is out of reach of other machines unless the operator says
// otherwise ([server] allow_non_loopback).
func CheckListenAddr(addr string, nonLoopback bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port (such as \"127.0.0.1:8080\")", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	if nonLoopback {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Unmap().IsLoopback() || host == "localhost" {
		return nil
	}
	what := fmt.Sprintf("%q is not a loopback address", host)
	if host == "" {
		what = "an empty host listens on every interface"
	}
	return fmt.Errorf("%s: the API would be reachable from other machines; use 127.0.0.1 (or ::1), or set server.allow_non_loopback = true to mean it", what)
}

// resolve makes p absolute against dir.
func resolve(dir, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(dir, p)
}

// ServerConfig is [server]: the local HTTP server, where local state lives,
// and the bounds of every request (which the API Lambda applies too).
type ServerConfig struct {
	Addr    string `toml:"addr"`
	DataDir string `toml:"data_dir"`
	// AllowNonLoopback lets Addr be something other than a loopback
	// address: the API is then reachable from other machines.
	AllowNonLoopback bool `toml:"allow_non_loopback"`

	// The bounds of a request, checked in server.go: a client that sends
	// slowly, or too much, or keeps a connection idle, is cut off.
	ReadHeaderTimeout Duration `toml:"read_header_timeout"`
	ReadBodyTimeout   Duration `toml:"read_body_timeout"`
	WriteTimeout      Duration `toml:"write_timeout"`
	IdleTimeout       Duration `toml:"idle_timeout"`
	MaxHeaderBytes    int      `toml:"max_header_bytes"`
	MaxBodyBytes      int      `toml:"max_body_bytes"`
	MaxRunBodyBytes   int      `toml:"max_run_body_bytes"`
	// Server-Sent Events streams are exempt from the read and write
	// timeouts; they send a comment every StreamHeartbeat and end after
	// StreamMaxDuration, and the client reconnects with Last-Event-ID.
	StreamHeartbeat   Duration `toml:"stream_heartbeat"`
	StreamMaxDuration Duration `toml:"stream_max_duration"`
}

func (s *ServerConfig) setDefaults() {
	*s = DefaultServer()
}

func (s *ServerConfig) check(c *Config, r *report) {
	if err := CheckListenAddr(s.Addr, s.AllowNonLoopback); err != nil {
		r.add("server.addr", "server.addr: %v", err)
	}
	s.checkLimits(c, r)
	if s.DataDir == "" {
		r.add("server.data_dir", "server.data_dir: must not be empty")
		return
	}
	s.DataDir = resolve(c.Dir, s.DataDir)
}

// ProviderConfig is [provider]: which sandbox provider plugin runs. Each
// provider owns its [provider.<name>] table: the host keeps it as written
// (refusing secret values in it) and hands it to the plugin, which decodes
// and checks it in Configure; Config.ProviderError points the problems it
// reports at their lines.
type ProviderConfig struct {
	// Name selects the plugin: sandstep-provider-<name> in PluginDir.
	Name      string `toml:"name"`
	PluginDir string `toml:"plugin_dir"`
	// Deployment is this stack's id, written into the label
	// sandstep.deployment of every sandbox, volume and snapshot it makes:
	// its reaper touches only what carries it. In AWS the stack name
	// replaces it (SANDSTEP_DEPLOYMENT, set by template.yaml).
	Deployment string `toml:"deployment"`
	// SecretRefresh is how often the provider's secrets are read again
	// (a rotated key reaches the running plugin); 0 reads them once, when
	// the process starts (a Lambda's init).
	SecretRefresh Duration `toml:"secret_refresh"`
}

func (p *ProviderConfig) setDefaults() {
	p.Name = "local"
	p.PluginDir = "bin/plugins"
	p.Deployment = "local"
	p.SecretRefresh = 0
}

// deploymentID keeps a deployment id usable as a label value at every
// provider and as part of a snapshot's slug; an AWS stack name fits it.
var deploymentID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$`)

// CheckDeployment checks a deployment id, from the config file or from the
// environment of a Lambda.
func CheckDeployment(id string) error {
	if !deploymentID.MatchString(id) {
		return fmt.Errorf("%q is not a deployment id (1 to 63 letters, digits, - and _, starting with a letter or digit)", id)
	}
	return nil
}

// pluginName keeps a provider name usable as part of a file name.
var pluginName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

func (p *ProviderConfig) check(c *Config, r *report) {
	if !pluginName.MatchString(p.Name) {
		r.add("provider.name", "provider.name: %q is not a plugin name (lower-case letters, digits, - and _)", p.Name)
	}
	if err := CheckDeployment(p.Deployment); err != nil {
		r.add("provider.deployment", "provider.deployment: %v", err)
	}
	if p.SecretRefresh < 0 {
		r.add("provider.secret_refresh", "provider.secret_refresh: must be 0s or more, not %s", p.SecretRefresh)
	}
	if p.PluginDir == "" {
		r.add("provider.plugin_dir", "provider.plugin_dir: must not be empty")
	} else {
		p.PluginDir = resolve(c.Dir, p.PluginDir)
		p.checkKnown(c, r)
	}
}

// shippedProviders are the provider plugins sandstep builds.
var shippedProviders = []string{"local", "sandy", "modal"}

// checkKnown catches a misspelt provider name as unknown keys are caught:
// a name with no plugin binary in plugin_dir that is near one that has a
// binary there, one sandstep ships, or one the file has a table for. A name
// near none of them may be a plugin not built yet, which starting it says.
func (p *ProviderConfig) checkKnown(c *Config, r *report) {
	if _, err := os.Stat(c.PluginPath(p.Name)); err == nil {
		return
	}
	known := slices.Clone(shippedProviders)
	for name := range c.providerTables {
		known = append(known, name)
	}
	if entries, err := os.ReadDir(p.PluginDir); err == nil {
		for _, e := range entries {
			if name, ok := strings.CutPrefix(e.Name(), "sandstep-provider-"); ok && name != "" && !e.IsDir() {
				known = append(known, name)
			}
		}
	}
	slices.Sort(known)
	if slices.Contains(known, p.Name) {
		return
	}
	if best := providers.ClosestKey(p.Name, slices.Compact(known)); best != "" {
		r.add("provider.name", "provider.name: unknown provider %q (did you mean %q?): there is no sandstep-provider-%s in %s",
			p.Name, best, p.Name, p.PluginDir)
	}
}

// SandboxConfig is [sandbox]: what a sandbox gets when a request does not
// say otherwise.
type SandboxConfig struct {
	Lifetime    Duration              `toml:"lifetime"`
	IdleTimeout Duration              `toml:"idle_timeout"`
	ExecTimeout Duration              `toml:"exec_timeout"`
	MemoryMB    int                   `toml:"memory_mb"`
	Network     providers.NetworkMode `toml:"network"`
	AllowHosts  []string              `toml:"allow_hosts"`
	// AllowPrivate lists the never-public addresses (loopback, private
	// ranges, link-local, the host's own) that sandboxes with network may
	// reach all the same: "IP", "IP:port", "CIDR" or "CIDR:port".
	AllowPrivate []string `toml:"allow_private"`
}

func (s *SandboxConfig) setDefaults() {
	s.Lifetime = Duration(30 * time.Minute)
	s.IdleTimeout = Duration(10 * time.Minute)
	s.ExecTimeout = Duration(5 * time.Minute)
	s.MemoryMB = 1024
	s.Network = providers.NetworkNone
	s.AllowHosts = []string{}
	s.AllowPrivate = []string{}
}

// checkHostRule reports a host that is not a name, "*.domain" or an
// address, each optionally with ":port" (the grammar the egress proxy
// matches with).
func checkHostRule(r *report, key string, i int, h, example string) {
	if _, err := egress.ParseHostRule(h); err != nil {
		r.add(index(key, i), "%s[%d]: %q is not a host name (such as %s, optionally with :port; no scheme or path)", key, i, h, example)
	}
}

func (s *SandboxConfig) check(_ *Config, r *report) {
	positive(r, "sandbox.lifetime", s.Lifetime)
	positive(r, "sandbox.exec_timeout", s.ExecTimeout)
	if s.IdleTimeout < 0 {
		r.add("sandbox.idle_timeout", "sandbox.idle_timeout: must not be negative (0s means never)")
	}
	if s.Lifetime > 0 && s.ExecTimeout > s.Lifetime {
		r.add("sandbox.exec_timeout", "sandbox.exec_timeout (%s) must not be longer than sandbox.lifetime (%s)", s.ExecTimeout, s.Lifetime)
	}
	if s.MemoryMB < 64 || s.MemoryMB > 65536 {
		r.add("sandbox.memory_mb", "sandbox.memory_mb: must be from 64 to 65536, not %d", s.MemoryMB)
	}
	switch s.Network {
	case providers.NetworkNone, providers.NetworkAll:
		if len(s.AllowHosts) > 0 {
			r.add("sandbox.allow_hosts", "sandbox.allow_hosts: only used when sandbox.network = \"allowlist\" (it is %q)", s.Network)
		}
	case providers.NetworkAllowlist:
		if len(s.AllowHosts) == 0 {
			r.add("sandbox.network", "sandbox.network = \"allowlist\" needs at least one host in sandbox.allow_hosts")
		}
	default:
		r.add("sandbox.network", "sandbox.network: must be \"none\", \"all\" or \"allowlist\", not %q", s.Network)
	}
	for i, h := range s.AllowHosts {
		checkHostRule(r, "sandbox.allow_hosts", i, h, `"pypi.org" or "*.github.com"`)
	}
	for i, a := range s.AllowPrivate {
		if _, err := egress.ParseAddrRule(a); err != nil {
			r.add(index("sandbox.allow_private", i), "sandbox.allow_private[%d]: %v", i, err)
		}
	}
}

func positive(r *report, key string, d Duration) {
	if d <= 0 {
		r.add(key, "%s: must be longer than zero, not %s", key, d)
	}
}

func atLeast(r *report, key string, v, lowest int) {
	if v < lowest {
		r.add(key, "%s: must be at least %d, not %d", key, lowest, v)
	}
}
