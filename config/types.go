// Package config loads and validates config.toml.
//
// Decoding is strict: an unknown key is an error naming the key and its line,
// and every problem in a file is reported at once. Secrets are never written in
// the file; keys ending in "_env" name the environment variable that holds one.
package config

import (
	"bytes"
	"encoding/json"
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

// LocalSettings is [provider.local]: the bubblewrap provider on this machine.
// The plugin decodes the same struct from the JSON the host sends it.
type LocalSettings struct {
	// StateDir holds sandbox roots, volumes, snapshots and the provider's
	// state; relative paths are resolved against the config file's folder.
	StateDir string `toml:"state_dir" json:"state_dir"`
	// ROPaths are host paths bound read-only into every sandbox; nothing
	// else of the host is visible. Symlinks (as /bin on merged-/usr systems)
	// are recreated as symlinks.
	ROPaths []string `toml:"ro_paths" json:"ro_paths"`
	// UIDRangeStart and UIDRangeSize give each sandbox its own host uid when
	// the plugin runs as root, so process limits and file ownership are per
	// sandbox. Without root, sandboxes run as the plugin's own uid.
	UIDRangeStart int `toml:"uid_range_start" json:"uid_range_start"`
	UIDRangeSize  int `toml:"uid_range_size" json:"uid_range_size"`
	// Resource limits applied to every process in a sandbox (setrlimit).
	MaxProcesses      int `toml:"max_processes" json:"max_processes"`
	MaxFileSizeMB     int `toml:"max_file_size_mb" json:"max_file_size_mb"`
	MaxCPUSeconds     int `toml:"max_cpu_seconds" json:"max_cpu_seconds"`
	MaxAddressSpaceMB int `toml:"max_address_space_mb" json:"max_address_space_mb"`
	MaxOpenFiles      int `toml:"max_open_files" json:"max_open_files"`
	// ToolsDir is a host folder mounted read-only at /opt/sandstep/tools
	// in every sandbox: sandstep's in-sandbox programs (the crawler) are
	// delivered there without a copy. Relative to the config file.
	ToolsDir string `toml:"tools_dir" json:"tools_dir"`
	// BwrapPath is the bubblewrap binary ("" = look up "bwrap" in PATH).
	BwrapPath string `toml:"bwrap_path" json:"bwrap_path"`
	// Sizes in MiB of the writable scratch of every sandbox, each a tmpfs
	// whose pages count against the sandbox's memory: /tmp, /home/sandbox,
	// and /workspace when no volume is mounted there.
	TmpSizeMB       int `toml:"tmp_size_mb" json:"tmp_size_mb"`
	HomeSizeMB      int `toml:"home_size_mb" json:"home_size_mb"`
	WorkspaceSizeMB int `toml:"workspace_size_mb" json:"workspace_size_mb"`
	// VolumeCapacityMB is the capacity of a volume whose creator names
	// none.
	VolumeCapacityMB int `toml:"volume_capacity_mb" json:"volume_capacity_mb"`
	// SnapshotSizeMB caps what a snapshot's setup commands may write.
	SnapshotSizeMB int `toml:"snapshot_size_mb" json:"snapshot_size_mb"`
	// UnenforcedLimits lists the limits (UnenforceableLimits) the operator
	// accepts to go without on a host that lacks their mechanism; without
	// it such a host refuses to run sandboxes.
	UnenforcedLimits []string `toml:"unenforced_limits" json:"unenforced_limits"`
	// DNSServers are the resolvers ("IP" or "IP:port") the egress proxy
	// asks for the names sandboxes connect to; empty means the system's.
	DNSServers []string `toml:"dns_servers" json:"dns_servers"`
	// UpstreamCAFiles are PEM files of extra roots the egress proxy trusts
	// when it connects to a host on a sandbox's behalf over TLS (hosts a
	// secret is scoped to), besides the system's: a corporate TLS proxy's
	// root, say. Relative to the config file.
	UpstreamCAFiles []string `toml:"upstream_ca_files" json:"upstream_ca_files"`
}

// UnenforceableLimits are the limits of the local provider that need a
// mechanism a host may lack: cgroups for memory, processes and cpu, loop
// devices (root) for volume_capacity. They are the values
// unenforced_limits accepts.
var UnenforceableLimits = []string{"memory", "processes", "cpu", "volume_capacity"}

// SandySettings is [provider.sandy]: the Sandy sandbox service over HTTP.
// The plugin decodes the same struct from the JSON the host sends it.
type SandySettings struct {
	BaseURL        string   `toml:"base_url" json:"base_url"`
	APIKeyEnv      string   `toml:"api_key_env" json:"api_key_env"`
	Priority       int      `toml:"priority" json:"priority"`
	Preemptable    bool     `toml:"preemptable" json:"preemptable"`
	Flavor         string   `toml:"flavor" json:"flavor"`
	Upstream       string   `toml:"upstream" json:"upstream"`
	RequestTimeout Duration `toml:"request_timeout" json:"request_timeout"`
	MaxRetries     int      `toml:"max_retries" json:"max_retries"`
	RetryBaseDelay Duration `toml:"retry_base_delay" json:"retry_base_delay"`
	// CreateTimeout bounds one create request: a cold start takes tens of
	// seconds.
	CreateTimeout Duration `toml:"create_timeout" json:"create_timeout"`
	// WarmupAttempts is how often a new sandbox is probed (status, then a
	// trivial exec) before Create gives up on it.
	WarmupAttempts int `toml:"warmup_attempts" json:"warmup_attempts"`
	// ReadChunkBytes is how much file content or command output one exec
	// brings back; WriteChunkBytes how much one file upload carries.
	ReadChunkBytes  int `toml:"read_chunk_bytes" json:"read_chunk_bytes"`
	WriteChunkBytes int `toml:"write_chunk_bytes" json:"write_chunk_bytes"`
}

// Decode decodes a provider's settings JSON (as sent by the host in
// Configure) into v, rejecting unknown fields.
func Decode(settings []byte, v any) error {
	if len(settings) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(settings))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
