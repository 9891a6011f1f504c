package config

import (
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
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

// ProviderConfig is [provider]: which sandbox provider plugin runs, and the
// settings of each. Tables of third-party plugins ([provider.<name>]) are
// kept aside and handed to their plugin as they are.
type ProviderConfig struct {
	// Name selects the plugin: sandstep-provider-<name> in PluginDir.
	Name      string        `toml:"name"`
	PluginDir string        `toml:"plugin_dir"`
	Local     LocalSettings `toml:"local"`
	Sandy     SandySettings `toml:"sandy"`
}

func (p *ProviderConfig) setDefaults() {
	p.Name = "local"
	p.PluginDir = "bin/plugins"
	p.Local.setDefaults()
	p.Sandy.setDefaults()
}

// pluginName keeps a provider name usable as part of a file name.
var pluginName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

func (p *ProviderConfig) check(c *Config, r *report) {
	if !pluginName.MatchString(p.Name) {
		r.add("provider.name", "provider.name: %q is not a plugin name (lower-case letters, digits, - and _)", p.Name)
	}
	if p.PluginDir == "" {
		r.add("provider.plugin_dir", "provider.plugin_dir: must not be empty")
	} else {
		p.PluginDir = resolve(c.Dir, p.PluginDir)
		p.checkKnown(c, r)
	}
	p.Local.check(c, r)
	p.Sandy.check(p.Name == "sandy", r)
}

// checkKnown catches a misspelt provider name as unknown keys are caught:
// a name with no plugin binary in plugin_dir that is near one that has a
// binary there, one sandstep ships, or one the file has a table for. A name
// near none of them may be a plugin not built yet, which starting it says.
func (p *ProviderConfig) checkKnown(c *Config, r *report) {
	if _, err := os.Stat(c.PluginPath(p.Name)); err == nil {
		return
	}
	var known []string
	for name := range tomlFields(reflect.TypeFor[ProviderConfig]()) {
		if name != "name" && name != "plugin_dir" {
			known = append(known, name)
		}
	}
	for name := range c.thirdParty {
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
	if best := closest(p.Name, slices.Compact(known)); best != "" {
		r.add("provider.name", "provider.name: unknown provider %q (did you mean %q?): there is no sandstep-provider-%s in %s",
			p.Name, best, p.Name, p.PluginDir)
	}
}

func (l *LocalSettings) setDefaults() {
	// StateDir is left empty: its default lives under server.data_dir,
	// which is only known once the file is read.
	l.ROPaths = append([]string(nil), DefaultLocalROPaths...)
	l.UIDRangeStart = 2_000_000_000
	l.UIDRangeSize = 10_000
	l.MaxProcesses = 256
	l.MaxFileSizeMB = 1024
	l.MaxCPUSeconds = 0
	l.MaxAddressSpaceMB = 0
	l.MaxOpenFiles = 1024
	l.ToolsDir = "bin/sandbox"
	l.TmpSizeMB = 512
	l.HomeSizeMB = 512
	l.WorkspaceSizeMB = 512
	l.VolumeCapacityMB = 1024
	l.SnapshotSizeMB = 8192
	l.UnenforcedLimits = []string{}
	l.DNSServers = []string{}
	l.UpstreamCAFiles = []string{}
}

// DefaultLocalROPaths are the host paths every local sandbox sees,
// read-only: programs and libraries, CA certificates for TLS, and what name
// resolution needs when the network is on, and the browser's settings.
// Missing ones are skipped.
var DefaultLocalROPaths = []string{
	"/usr", "/bin", "/sbin", "/lib", "/lib64",
	"/etc/alternatives", "/etc/ssl", "/etc/ca-certificates", "/etc/resolv.conf", "/etc/hosts",
	"/etc/nsswitch.conf", "/etc/passwd", "/etc/group", "/etc/localtime",
	// Debian's chromium wrapper sources /etc/chromium.d and fails without it.
	"/etc/chromium.d", "/etc/chromium", "/etc/fonts",
}

// maxUID is the highest uid a sandbox may get: bubblewrap 0.8 writes uid
// maps with %d, so larger uids wrap negative.
const maxUID int64 = 1<<31 - 1

func (l *LocalSettings) check(c *Config, r *report) {
	const t = "provider.local"
	if l.StateDir == "" {
		l.StateDir = filepath.Join(c.Server.DataDir, "local")
	} else {
		l.StateDir = resolve(c.Dir, l.StateDir)
	}
	for i, p := range l.ROPaths {
		if !filepath.IsAbs(p) {
			r.add(index(t+".ro_paths", i), "%s.ro_paths[%d]: %q is not an absolute path", t, i, p)
		}
	}
	switch {
	case l.UIDRangeSize < 1:
		r.add(t+".uid_range_size", "%s.uid_range_size: must be at least 1", t)
	case l.UIDRangeStart < 1000:
		r.add(t+".uid_range_start", "%s.uid_range_start: must be at least 1000, above system and login accounts", t)
	case int64(l.UIDRangeStart)+int64(l.UIDRangeSize)-1 > maxUID:
		r.add(t+".uid_range_size", "%s.uid_range_start + uid_range_size: the range must end at or below %d", t, maxUID)
	}
	atLeast(r, t+".max_processes", l.MaxProcesses, 1)
	atLeast(r, t+".max_file_size_mb", l.MaxFileSizeMB, 1)
	atLeast(r, t+".max_cpu_seconds", l.MaxCPUSeconds, 0)
	atLeast(r, t+".max_address_space_mb", l.MaxAddressSpaceMB, 0)
	atLeast(r, t+".max_open_files", l.MaxOpenFiles, 16)
	if l.ToolsDir != "" {
		l.ToolsDir = resolve(c.Dir, l.ToolsDir)
	}
	if l.BwrapPath != "" && !filepath.IsAbs(l.BwrapPath) {
		r.add(t+".bwrap_path", "%s.bwrap_path: %q is not an absolute path (leave it empty to look bwrap up in PATH)", t, l.BwrapPath)
	}
	atLeast(r, t+".tmp_size_mb", l.TmpSizeMB, 1)
	atLeast(r, t+".home_size_mb", l.HomeSizeMB, 1)
	atLeast(r, t+".workspace_size_mb", l.WorkspaceSizeMB, 1)
	atLeast(r, t+".volume_capacity_mb", l.VolumeCapacityMB, MinVolumeCapacityMB)
	atLeast(r, t+".snapshot_size_mb", l.SnapshotSizeMB, MinVolumeCapacityMB)
	for i, v := range l.UnenforcedLimits {
		if !slices.Contains(UnenforceableLimits, v) {
			r.add(index(t+".unenforced_limits", i), "%s.unenforced_limits[%d]: %q is not one of %s", t, i, v, strings.Join(quoteAll(UnenforceableLimits), ", "))
		}
	}
	for i, d := range l.DNSServers {
		if _, err := egress.ParseDNSServer(d); err != nil {
			r.add(index(t+".dns_servers", i), "%s.dns_servers[%d]: %v", t, i, err)
		}
	}
	for i, f := range l.UpstreamCAFiles {
		l.UpstreamCAFiles[i] = resolve(c.Dir, f)
		if b, err := os.ReadFile(l.UpstreamCAFiles[i]); err != nil {
			r.add(index(t+".upstream_ca_files", i), "%s.upstream_ca_files[%d]: %v", t, i, err)
		} else if !x509.NewCertPool().AppendCertsFromPEM(b) {
			r.add(index(t+".upstream_ca_files", i), "%s.upstream_ca_files[%d]: %s holds no PEM certificate", t, i, f)
		}
	}
}

// MinVolumeCapacityMB is the smallest volume (and snapshot image) the local
// provider makes: an ext4 file system with its journal needs a few MiB.
const MinVolumeCapacityMB = 16

func quoteAll(vs []string) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = strconv.Quote(v)
	}
	return out
}

func (s *SandySettings) setDefaults() { *s = DefaultSandySettings() }

// DefaultSandySettings returns [provider.sandy] as an empty table leaves it.
// The plugin starts from it too, so that settings JSON written by hand may
// leave keys out.
func DefaultSandySettings() SandySettings {
	return SandySettings{
		APIKeyEnv:       "SANDY_API_KEY",
		Priority:        1,
		RequestTimeout:  Duration(60 * time.Second),
		MaxRetries:      4,
		RetryBaseDelay:  Duration(500 * time.Millisecond),
		CreateTimeout:   Duration(180 * time.Second),
		WarmupAttempts:  5,
		ReadChunkBytes:  1 << 20,
		WriteChunkBytes: 1 << 20,
	}
}

// Bounds of read_chunk_bytes and write_chunk_bytes: a chunk travels base64
// encoded inside one JSON body.
const (
	SandyMinChunkBytes = 4 << 10
	SandyMaxChunkBytes = 8 << 20
)

// check validates [provider.sandy]; base_url is only required when Sandy is
// the selected provider. The URL is never echoed: it could carry a token.
func (s *SandySettings) check(selected bool, r *report) {
	const t = "provider.sandy"
	switch {
	case s.BaseURL == "" && selected:
		line := r.lines[t]
		if line == 0 {
			line = r.line("provider.name")
		}
		r.addAt(line, t+".base_url", "%s.base_url is required when provider.name = \"sandy\" (the Sandy controller, such as \"https://sandy.example.com\")", t)
	case s.BaseURL != "":
		u, err := url.Parse(s.BaseURL)
		switch {
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			r.add(t+".base_url", "%s.base_url: must be an http or https URL with a host, such as \"https://sandy.example.com\"", t)
		case u.User != nil || u.RawQuery != "" || u.Fragment != "":
			r.add(t+".base_url", "%s.base_url: must not contain credentials, a query or a fragment (name the API key with api_key_env)", t)
		default:
			s.BaseURL = strings.TrimRight(s.BaseURL, "/")
		}
	}
	if s.APIKeyEnv == "" {
		r.add(t+".api_key_env", "%s.api_key_env: must name the environment variable that holds the Sandy API key", t)
	}
	if s.Priority < 0 || s.Priority > 3 {
		r.add(t+".priority", "%s.priority: must be 0 (critical), 1 (high), 2 (normal) or 3 (low), not %d", t, s.Priority)
	}
	positive(r, t+".request_timeout", s.RequestTimeout)
	positive(r, t+".retry_base_delay", s.RetryBaseDelay)
	positive(r, t+".create_timeout", s.CreateTimeout)
	if s.MaxRetries < 0 || s.MaxRetries > 20 {
		r.add(t+".max_retries", "%s.max_retries: must be from 0 to 20, not %d", t, s.MaxRetries)
	}
	if s.WarmupAttempts < 1 || s.WarmupAttempts > 20 {
		r.add(t+".warmup_attempts", "%s.warmup_attempts: must be from 1 to 20, not %d", t, s.WarmupAttempts)
	}
	for _, c := range []struct {
		key string
		v   int
	}{{"read_chunk_bytes", s.ReadChunkBytes}, {"write_chunk_bytes", s.WriteChunkBytes}} {
		if c.v < SandyMinChunkBytes || c.v > SandyMaxChunkBytes {
			r.add(t+"."+c.key, "%s.%s: must be from %d (4 KiB) to %d (8 MiB), not %d", t, c.key, SandyMinChunkBytes, SandyMaxChunkBytes, c.v)
		}
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
