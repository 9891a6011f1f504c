package local

import (
	"crypto/x509"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/egress"
)

// Settings is [provider.local] of config.toml: the bubblewrap provider on
// this machine. The host hands the table over as written; Configure decodes
// it over DefaultSettings and checks it (ParseSettings). config.toml
// documents every key with its default.
type Settings struct {
	// StateDir holds sandbox roots, volumes, snapshots and the provider's
	// state. "" is the host's data folder for the provider
	// (providers.Config.DataDir: <server.data_dir>/local).
	StateDir string `json:"state_dir"`
	// ROPaths are host paths bound read-only into every sandbox; nothing
	// else of the host is visible. Symlinks (as /bin on merged-/usr systems)
	// are recreated as symlinks.
	ROPaths []string `json:"ro_paths"`
	// UIDRangeStart and UIDRangeSize give each sandbox its own host uid when
	// the plugin runs as root, so process limits and file ownership are per
	// sandbox. Without root, sandboxes run as the plugin's own uid.
	UIDRangeStart int `json:"uid_range_start"`
	UIDRangeSize  int `json:"uid_range_size"`
	// Resource limits applied to every process in a sandbox (setrlimit).
	MaxProcesses      int `json:"max_processes"`
	MaxFileSizeMB     int `json:"max_file_size_mb"`
	MaxCPUSeconds     int `json:"max_cpu_seconds"`
	MaxAddressSpaceMB int `json:"max_address_space_mb"`
	MaxOpenFiles      int `json:"max_open_files"`
	// ToolsDir is a host folder mounted read-only at ToolsPath in every
	// sandbox: sandstep's in-sandbox programs (the crawler) are delivered
	// there without a copy.
	ToolsDir string `json:"tools_dir"`
	// BwrapPath is the bubblewrap binary ("" = look up "bwrap" in PATH).
	BwrapPath string `json:"bwrap_path"`
	// Sizes in MiB of the writable scratch of every sandbox, each a tmpfs
	// whose pages count against the sandbox's memory: /tmp, /home/sandbox,
	// and /workspace when no volume is mounted there.
	TmpSizeMB       int `json:"tmp_size_mb"`
	HomeSizeMB      int `json:"home_size_mb"`
	WorkspaceSizeMB int `json:"workspace_size_mb"`
	// VolumeCapacityMB is the capacity of a volume whose creator names
	// none.
	VolumeCapacityMB int `json:"volume_capacity_mb"`
	// SnapshotSizeMB caps what a snapshot's setup commands may write.
	SnapshotSizeMB int `json:"snapshot_size_mb"`
	// UnenforcedLimits lists the limits (UnenforceableLimits) the operator
	// accepts to go without on a host that lacks their mechanism; without
	// it such a host refuses to run sandboxes.
	UnenforcedLimits []string `json:"unenforced_limits"`
	// DNSServers are the resolvers ("IP" or "IP:port") the egress proxy
	// asks for the names sandboxes connect to; empty means the system's.
	DNSServers []string `json:"dns_servers"`
	// UpstreamCAFiles are PEM files of extra roots the egress proxy trusts
	// when it connects to a host on a sandbox's behalf over TLS (hosts a
	// secret is scoped to), besides the system's: a corporate TLS proxy's
	// root, say.
	UpstreamCAFiles []string `json:"upstream_ca_files"`
}

// Defaults of the settings. CPU time and address space have no limit
// (0): Node.js and Chromium reserve far more address space than they use,
// and exec timeouts and lifetimes bound CPU already. The uid range sits far
// above the subordinate uid ranges (/etc/subuid) that user namespaces of
// login users take.
const (
	defaultMaxProcesses  = 256
	defaultMaxFileSizeMB = 1024
	defaultMaxOpenFiles  = 1024
	defaultUIDRangeStart = 2_000_000_000
	defaultUIDRangeSize  = 10_000
	defaultScratchMB     = 512
	defaultVolumeMB      = 1024
	defaultSnapshotMB    = 8192
)

// DefaultSettings returns the settings an empty table leaves.
func DefaultSettings() Settings {
	return Settings{
		ROPaths:          slices.Clone(DefaultROPaths),
		UIDRangeStart:    defaultUIDRangeStart,
		UIDRangeSize:     defaultUIDRangeSize,
		MaxProcesses:     defaultMaxProcesses,
		MaxFileSizeMB:    defaultMaxFileSizeMB,
		MaxOpenFiles:     defaultMaxOpenFiles,
		ToolsDir:         "bin/sandbox",
		TmpSizeMB:        defaultScratchMB,
		HomeSizeMB:       defaultScratchMB,
		WorkspaceSizeMB:  defaultScratchMB,
		VolumeCapacityMB: defaultVolumeMB,
		SnapshotSizeMB:   defaultSnapshotMB,
		UnenforcedLimits: []string{},
		DNSServers:       []string{},
		UpstreamCAFiles:  []string{},
	}
}

// DefaultROPaths are the host paths every sandbox sees, read-only:
// programs and libraries, CA certificates for TLS, what name resolution
// needs when the network is on, and the browser's settings. Missing ones
// are skipped.
var DefaultROPaths = []string{
	"/usr", "/bin", "/sbin", "/lib", "/lib64",
	"/etc/alternatives", "/etc/ssl", "/etc/ca-certificates", "/etc/resolv.conf", "/etc/hosts",
	"/etc/nsswitch.conf", "/etc/passwd", "/etc/group", "/etc/localtime",
	// Debian's chromium wrapper sources /etc/chromium.d and fails without it.
	"/etc/chromium.d", "/etc/chromium", "/etc/fonts",
}

// UnenforceableLimits are the limits that need a mechanism a host may
// lack: cgroups for memory, processes and cpu, loop devices (root) for
// volume_capacity. They are the values unenforced_limits accepts.
var UnenforceableLimits = []string{providers.LimitMemory, providers.LimitProcesses, providers.LimitCPU, providers.LimitVolumeCapacity}

// MinVolumeCapacityMB is the smallest volume (and snapshot image) the
// provider makes: an ext4 file system with its journal needs a few MiB.
const MinVolumeCapacityMB = 16

// ParseSettings decodes cfg.Settings over DefaultSettings, resolves
// relative paths against cfg.BaseDir (the working directory when it is
// ""), puts state_dir in cfg.DataDir when unset, and checks every value.
// Every problem comes back at once in a *providers.SettingsError, each
// naming its key.
func ParseSettings(cfg providers.Config) (Settings, error) {
	s := DefaultSettings()
	// Values of the wrong type keep their defaults, so the checks below
	// still see every other problem.
	var e providers.SettingsError
	if err := providers.DecodeSettings(cfg.Settings, &s); err != nil {
		var de *providers.SettingsError
		if !errors.As(err, &de) {
			return Settings{}, err
		}
		e.Problems = append(e.Problems, de.Problems...)
	}
	resolve := func(key, p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		base := cfg.BaseDir
		if base == "" {
			wd, err := os.Getwd()
			if err != nil {
				e.Add(key, "%q is relative and the working directory is unknown: %v", p, err)
				return p
			}
			base = wd
		}
		return filepath.Join(base, p)
	}
	index := func(key string, i int) string { return key + "[" + strconv.Itoa(i) + "]" }

	if s.StateDir == "" {
		s.StateDir = cfg.DataDir
	}
	if s.StateDir == "" {
		e.Add("state_dir", "required: the host names no data folder to default to")
	}
	s.StateDir = resolve("state_dir", s.StateDir)
	for i, p := range s.ROPaths {
		switch {
		case !cleanAbs(p) || p == "/":
			e.Add(index("ro_paths", i), "%q must be an absolute, clean path other than /", p)
		case slices.ContainsFunc(reservedPaths, func(r string) bool { return overlaps(p, r) }):
			e.Add(index("ro_paths", i), "%q overlaps a path the sandbox provides itself (%s)", p, strings.Join(reservedPaths, ", "))
		}
	}
	// bubblewrap writes uid maps with printf's %d: a uid above the largest
	// int32 becomes negative and the kernel refuses the map.
	switch {
	case s.UIDRangeSize < 1:
		e.Add("uid_range_size", "must be at least 1")
	case s.UIDRangeStart < 1000:
		e.Add("uid_range_start", "must be at least 1000, above system and login accounts")
	case int64(s.UIDRangeStart)+int64(s.UIDRangeSize)-1 > math.MaxInt32:
		e.Problems = append(e.Problems, providers.SettingProblem{Key: "uid_range_size",
			Message: "uid_range_start + uid_range_size: the range must end at or below " + strconv.Itoa(math.MaxInt32)})
	}
	atLeast := func(key string, v, lowest int) {
		if v < lowest {
			e.Add(key, "must be at least %d, not %d", lowest, v)
		}
	}
	atLeast("max_processes", s.MaxProcesses, 1)
	atLeast("max_file_size_mb", s.MaxFileSizeMB, 1)
	atLeast("max_cpu_seconds", s.MaxCPUSeconds, 0)
	atLeast("max_address_space_mb", s.MaxAddressSpaceMB, 0)
	atLeast("max_open_files", s.MaxOpenFiles, 16)
	s.ToolsDir = resolve("tools_dir", s.ToolsDir)
	if s.BwrapPath != "" && !filepath.IsAbs(s.BwrapPath) {
		e.Add("bwrap_path", "%q is not an absolute path (leave it empty to look bwrap up in PATH)", s.BwrapPath)
	}
	atLeast("tmp_size_mb", s.TmpSizeMB, 1)
	atLeast("home_size_mb", s.HomeSizeMB, 1)
	atLeast("workspace_size_mb", s.WorkspaceSizeMB, 1)
	atLeast("volume_capacity_mb", s.VolumeCapacityMB, MinVolumeCapacityMB)
	atLeast("snapshot_size_mb", s.SnapshotSizeMB, MinVolumeCapacityMB)
	for i, v := range s.UnenforcedLimits {
		if !slices.Contains(UnenforceableLimits, v) {
			quoted := make([]string, len(UnenforceableLimits))
			for j, l := range UnenforceableLimits {
				quoted[j] = strconv.Quote(l)
			}
			e.Add(index("unenforced_limits", i), "%q is not one of %s", v, strings.Join(quoted, ", "))
		}
	}
	for i, d := range s.DNSServers {
		if _, err := egress.ParseDNSServer(d); err != nil {
			e.Add(index("dns_servers", i), "%v", err)
		}
	}
	for i, f := range s.UpstreamCAFiles {
		s.UpstreamCAFiles[i] = resolve(index("upstream_ca_files", i), f)
		if b, err := os.ReadFile(s.UpstreamCAFiles[i]); err != nil {
			e.Add(index("upstream_ca_files", i), "%v", err)
		} else if !x509.NewCertPool().AppendCertsFromPEM(b) {
			e.Add(index("upstream_ca_files", i), "%s holds no PEM certificate", f)
		}
	}
	if err := e.Err(); err != nil {
		return Settings{}, err
	}
	return s, nil
}
