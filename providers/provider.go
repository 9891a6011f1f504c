// Package providers defines the SandboxProvider interface that every sandbox
// backend implements, the types it speaks, and the typed errors that cross the
// plugin boundary as codes.
//
// The shape follows Nomad's task-driver plugins: one Go interface, a
// Capabilities struct that says what a backend can do, and ErrUnsupported for
// the rest, which a backend gets by embedding the Unsupported types
// (unsupported.go). Each backend owns its settings (settings.go). Backends run as hashicorp/go-plugin subprocesses speaking the gRPC
// protocol in providers/proto; the host never links a backend in directly, so
// a crashing or hanging backend cannot take the host down with it.
package providers

import (
	"context"
	"io"
	"log/slog"
	"time"
)

// APIVersion is the plugin protocol version. go-plugin negotiates it in the
// handshake: a plugin built for another version is refused with a clear error
// instead of failing on the first RPC.
const APIVersion = 1

// Standard label keys. The host labels every sandbox it creates so that the
// reaper can list a provider's sandboxes and match them with the ledger.
const (
	LabelOwner   = "sandstep.owner" // always "sandstep"
	LabelTenant  = "sandstep.tenant"
	LabelJob     = "sandstep.job"
	LabelSession = "sandstep.session"
	// LabelDeployment names the deployment (the stack) that created a
	// sandbox, volume or snapshot. Two deployments sharing a provider
	// account each reap and collect only what carries their own id.
	LabelDeployment = "sandstep.deployment"
)

// Provider is a sandbox backend. Every method takes a context whose deadline
// and cancellation the implementation honours.
//
// Methods for a capability the backend lacks return an error with code
// Unsupported. Identifiers are the provider's own; names are the caller's
// (a job or session id) and are unique among live sandboxes.
type Provider interface {
	// Configure passes the provider its own settings (the
	// [provider.<name>] table as JSON, which the provider decodes and
	// checks itself) and the secrets it needs, resolved by the host. It is
	// called once, right after the plugin starts and before any other
	// call. Bad settings are an InvalidArgument error, a *SettingsError
	// naming every bad key (see DecodeSettings).
	Configure(ctx context.Context, cfg Config) error

	// Info describes the provider and what it can do.
	Info(ctx context.Context) (Info, error)

	// Create starts a sandbox and returns once it accepts Exec. A spec with a
	// Name that a live sandbox already has fails with AlreadyExists, so a
	// retried create does not start a second sandbox.
	Create(ctx context.Context, spec CreateSpec) (Sandbox, error)
	// Get returns a sandbox by id; NotFound once it is gone.
	Get(ctx context.Context, id string) (Sandbox, error)
	// List returns the live sandboxes carrying all of the given labels.
	List(ctx context.Context, f ListFilter) ([]Sandbox, error)
	// Terminate stops a sandbox and releases what it holds (volumes survive).
	// It is idempotent: terminating an unknown or gone sandbox succeeds.
	Terminate(ctx context.Context, id string) error

	// Exec runs a command in a sandbox. Output is written to req.Stdout and
	// req.Stderr as it arrives. Every exec has a timeout (req.Timeout, or the
	// provider's default when zero); at the deadline the whole process tree
	// is killed and the result says TimedOut. A non-zero exit is a result,
	// not an error; errors are for the sandbox or the transport.
	Exec(ctx context.Context, id string, req ExecRequest) (ExecResult, error)

	// WriteFile writes r to path, creating parent directories. Binary-safe
	// and streamed: any size the sandbox's disk allows.
	WriteFile(ctx context.Context, id string, f WriteFileRequest) error
	// ReadFile streams up to limit bytes (all when limit <= 0) from offset
	// into w and returns the number of bytes written. A missing file is
	// NotFound.
	ReadFile(ctx context.Context, id string, f ReadFileRequest, w io.Writer) (int64, error)
	// ListFiles lists the entries of a directory.
	ListFiles(ctx context.Context, id string, path string) ([]FileInfo, error)

	// EnsureSnapshot builds the snapshot named spec.Slug unless it exists.
	// Concurrent calls for one slug build it once.
	EnsureSnapshot(ctx context.Context, spec SnapshotSpec) (Snapshot, error)
	// GetSnapshot returns a snapshot by slug; NotFound when absent.
	GetSnapshot(ctx context.Context, slug string) (Snapshot, error)
	// DeleteSnapshot is idempotent.
	DeleteSnapshot(ctx context.Context, slug string) error
	// ListSnapshots returns the snapshots carrying all of the given labels
	// (all when labels is empty), each with the labels it was built with.
	ListSnapshots(ctx context.Context, labels map[string]string) ([]Snapshot, error)

	// CreateVolume creates a volume, or returns the existing one with the
	// same slug (idempotent).
	CreateVolume(ctx context.Context, spec VolumeSpec) (Volume, error)
	// GetVolume returns a volume by slug; NotFound when absent.
	GetVolume(ctx context.Context, slug string) (Volume, error)
	// DeleteVolume is idempotent. Deleting a volume mounted by a live
	// sandbox fails with FailedPrecondition.
	DeleteVolume(ctx context.Context, slug string) error
	// ListVolumes returns the volumes carrying all of the given labels.
	ListVolumes(ctx context.Context, labels map[string]string) ([]Volume, error)
}

// Config is what Configure receives.
type Config struct {
	// Settings is the provider's own table from config.toml, as JSON, as
	// it was written: defaults and checks are the provider's.
	Settings []byte
	// BaseDir is the absolute folder that relative paths in Settings are
	// relative to (the config file's); "" means the plugin's working
	// directory.
	BaseDir string
	// DataDir is an absolute folder that is the provider's own, for state
	// its settings put nowhere else; "" when the host has none.
	DataDir string
	// Secrets maps a secret's name (as the provider's settings call it, for
	// example "api_key") to its value. Never logged.
	Secrets map[string]string
	// Defaults apply to every Create whose spec leaves a field zero.
	Defaults SandboxDefaults
}

// SandboxDefaults come from the [sandbox] table of config.toml.
type SandboxDefaults struct {
	Lifetime    time.Duration
	IdleTimeout time.Duration
	ExecTimeout time.Duration
	MemoryMB    int
	Network     NetworkPolicy
	// AllowPrivate lists the addresses in never-public ranges (loopback,
	// link-local, RFC 1918, CGNAT, unique-local) and of the host itself
	// that sandboxes with network may reach all the same: "IP", "IP:port",
	// "CIDR" or "CIDR:port" ([sandbox] allow_private). Everything else of
	// that kind is denied.
	AllowPrivate []string
}

// Info describes a provider.
type Info struct {
	Name         string
	Version      string
	APIVersion   int
	Capabilities Capabilities
}

// Capabilities says what a provider supports. The conformance suite tests
// every capability a provider claims and skips the ones it does not.
type Capabilities struct {
	Snapshots      bool // EnsureSnapshot, GetSnapshot, DeleteSnapshot; CreateSpec.Snapshot
	Volumes        bool // volume methods; CreateSpec.Mounts
	NamedSandboxes bool // CreateSpec.Name is enforced unique by the provider itself
	ListByLabels   bool // List filters by labels (otherwise the ledger is the truth)
	ExecStreaming  bool // Exec output arrives while the command runs
	FileAPI        bool // files move without going through Exec
	PublicURL      bool // sandboxes can expose a port at Sandbox.PublicURL
	// HostScopedSecrets: a Secret with Hosts never reaches the sandbox as
	// its value; the sandbox sees a placeholder, which the provider's way
	// out replaces with the value in requests to those hosts only. Without
	// it such a secret is a plain environment variable.
	HostScopedSecrets bool
	// ListSnapshots: ListSnapshots filters snapshots by labels (it needs
	// Snapshots). Without it the host never collects old snapshots.
	ListSnapshots bool
	// NetworkModes lists the NetworkPolicy modes the provider enforces.
	NetworkModes []NetworkMode
	// MaxLifetime is the longest lifetime a sandbox may ask for; 0 = no cap.
	MaxLifetime time.Duration
	Regions     []string
	// Limits says how the provider enforces resource limits.
	Limits Limits
}

// Limit names, as Limits.Enforced lists them.
const (
	LimitMemory         = "memory"          // Resources.MemoryMB; an exec killed for it reports OOM
	LimitProcesses      = "processes"       // a cap on the processes (and threads) of a sandbox
	LimitCPU            = "cpu"             // Resources.CPUs as a quota, else a fair share
	LimitScratch        = "scratch"         // writable scratch (/tmp and the like) has a size
	LimitVolumeCapacity = "volume_capacity" // VolumeSpec.CapacityMB: a writer past it gets ENOSPC
)

// Limits is how a provider enforces resource limits on its sandboxes. The
// zero value says nothing: a hosted backend enforces what it enforces.
type Limits struct {
	// Cgroups is the control group mechanism in use ("v2", "v1", or
	// "none"); "" when the provider does not run on cgroups of its own.
	Cgroups string
	// Volumes is how volume capacity is enforced ("ext4-image", or "none").
	Volumes string
	// Enforced lists the limits that hold (the Limit constants).
	Enforced []string
}

// Enforces reports whether limit is among the enforced ones.
func (l Limits) Enforces(limit string) bool {
	for _, e := range l.Enforced {
		if e == limit {
			return true
		}
	}
	return false
}

// Supports reports whether mode is one of the provider's network modes.
func (c Capabilities) Supports(mode NetworkMode) bool {
	for _, m := range c.NetworkModes {
		if m == mode {
			return true
		}
	}
	return false
}

// NetworkMode is how much network a sandbox gets.
type NetworkMode string

const (
	NetworkNone      NetworkMode = "none"      // no connection leaves the sandbox
	NetworkAll       NetworkMode = "all"       // public addresses, and allow_private
	NetworkAllowlist NetworkMode = "allowlist" // only to AllowHosts
)

// NetworkPolicy is a sandbox's network access. The zero value is "use the
// provider's default". Whatever the mode, never-public addresses (loopback,
// link-local and the metadata service, private ranges) are out of reach
// unless SandboxDefaults.AllowPrivate lists them.
type NetworkPolicy struct {
	Mode NetworkMode
	// AllowHosts are the hosts an allowlist admits: names, "*.domain" for
	// any subdomain of domain, or addresses, each optionally with ":port"
	// (no port: every port).
	AllowHosts []string
}

// CreateSpec describes a sandbox to create. Zero fields take the defaults.
type CreateSpec struct {
	// Name is the caller's idempotency key: a job or session id.
	Name   string
	Labels map[string]string
	// Snapshot is the slug of a snapshot to boot from ("" = base image).
	Snapshot string
	Mounts   []Mount
	Env      map[string]string
	Secrets  []Secret
	Network  NetworkPolicy
	// Lifetime is the hard limit after which the provider terminates the
	// sandbox on its own, even if the host is gone.
	Lifetime time.Duration
	// IdleTimeout terminates a sandbox that has run no exec or file call
	// for this long; 0 = never.
	IdleTimeout time.Duration
	Resources   Resources
	// Priority, Preemptible and Flavor are hints for hosted backends.
	Priority    int
	Preemptible bool
	Flavor      string
	Region      string
	// ExposePorts are ports inside the sandbox to make reachable from
	// outside it (Sandbox.PortURLs); ignored without PublicURL capability.
	ExposePorts []int
}

// Mount attaches a volume at Path inside the sandbox.
type Mount struct {
	Volume   string // volume slug
	Path     string // absolute path inside the sandbox; "/workspace" by default
	ReadOnly bool
}

// Secret is a value the sandbox may use. Where the provider supports host
// scoping (Capabilities.HostScopedSecrets, Hosts non-empty), the variable
// Name holds a placeholder and the value is only put into the headers of
// requests to those hosts; elsewhere the value is set as the environment
// variable Name. Hosts take the grammar of NetworkPolicy.AllowHosts.
type Secret struct {
	Name  string
	Value string
	Hosts []string
}

// Resources are requested limits; 0 = provider default.
type Resources struct {
	MemoryMB int
	CPUs     float64
	DiskMB   int
}

// SandboxState is a sandbox's lifecycle state.
type SandboxState string

const (
	StateRunning    SandboxState = "running"
	StateTerminated SandboxState = "terminated"
)

// Sandbox is a sandbox as the provider sees it.
type Sandbox struct {
	ID        string
	Name      string
	Labels    map[string]string
	State     SandboxState
	Snapshot  string
	Mounts    []Mount
	PublicURL string
	CreatedAt time.Time
	// ExpiresAt is when the provider will terminate it on its own.
	ExpiresAt time.Time
	// Network is what the sandbox sent and received so far, where the
	// provider counts it (Network.Measured; read it before Terminate).
	Network NetworkUsage
	// PortURLs says where each exposed port is reached: an http(s) URL the
	// provider serves publicly, or "unix://<path>" of a socket on the
	// provider's host that forwards into the sandbox's network, for the
	// host's API to proxy behind its own access token.
	PortURLs map[int]string
}

// NetworkUsage is the traffic of one sandbox through its way out.
type NetworkUsage struct {
	// Measured: the provider counts the sandbox's traffic, so zero counts
	// are a measurement (nothing was sent), not a lack of one. Usage shows
	// bytes out only for measured sandboxes.
	Measured bool
	BytesOut int64 // sent by the sandbox to the network
	BytesIn  int64 // received from the network
	// Connections made and connections denied by the policy.
	Connections int64
	Denied      int64
	// Hosts contacted, as "host:port" in the names the sandbox used,
	// sorted; MoreHosts counts those beyond the list's cap.
	Hosts     []string
	MoreHosts int64
}

// LogValue renders the usage for structured logs, hosts counted, not
// listed.
func (u NetworkUsage) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Int64("bytes_out", u.BytesOut), slog.Int64("bytes_in", u.BytesIn),
		slog.Int64("connections", u.Connections), slog.Int64("denied", u.Denied),
		slog.Int64("hosts", int64(len(u.Hosts))+u.MoreHosts))
}

// ListFilter selects sandboxes; all conditions must hold.
type ListFilter struct {
	Labels map[string]string
	Name   string
}

// ExecRequest is one command. Exactly one of Argv and Shell is set.
type ExecRequest struct {
	Argv  []string
	Shell string // run as /bin/sh -c Shell
	Cwd   string // default: the sandbox's working directory (/workspace)
	Env   map[string]string
	// Stdin, if set, is copied to the command's standard input, then closed.
	Stdin io.Reader
	// Stdout and Stderr receive output as it arrives; nil discards.
	Stdout io.Writer
	Stderr io.Writer
	// Timeout bounds the whole command; 0 = the provider's default.
	Timeout time.Duration
}

// ExecResult is how a command ended.
type ExecResult struct {
	ExitCode int
	Signal   string // e.g. "SIGKILL" when killed by a signal
	TimedOut bool
	// OOM is set when the command was killed because the sandbox ran out
	// of memory (its memory limit): the kernel's OOM killer ended a
	// process of the command while it ran, and the command ended by
	// SIGKILL (or, as a shell reports a killed child, with status 137).
	OOM      bool
	Duration time.Duration
}

// WriteFileRequest writes Content to Path.
type WriteFileRequest struct {
	Path    string
	Mode    uint32 // permission bits; 0 = 0644
	Content io.Reader
}

// ReadFileRequest reads Path from Offset, at most Limit bytes (<= 0: to EOF).
type ReadFileRequest struct {
	Path   string
	Offset int64
	Limit  int64
}

// FileInfo is one directory entry.
type FileInfo struct {
	Name    string
	Path    string
	Size    int64
	Mode    uint32
	IsDir   bool
	ModTime time.Time
}

// SnapshotSpec describes the contents of a snapshot: commands run once, in a
// builder sandbox with network access, whose results later sandboxes boot
// from. The slug names the contents: same slug, same snapshot.
type SnapshotSpec struct {
	Slug string
	// Setup is run in order with /bin/sh -c; the first failure fails the
	// build and leaves no snapshot behind.
	Setup []string
	// Env is set while building and in every sandbox booted from it
	// (for example PATH or NODE_PATH into the snapshot's tree).
	Env     map[string]string
	Labels  map[string]string
	Timeout time.Duration
}

// Snapshot is a built snapshot.
type Snapshot struct {
	Slug      string
	Labels    map[string]string
	SizeBytes int64
	CreatedAt time.Time
}

// VolumeSpec describes a volume.
type VolumeSpec struct {
	Slug       string
	Labels     map[string]string
	CapacityMB int
	Region     string
}

// Volume is a persistent directory that outlives sandboxes.
type Volume struct {
	Slug   string
	Labels map[string]string
	// CapacityMB is the most the volume holds; 0 = not capped.
	CapacityMB int
	// SizeBytes is the space its files take.
	SizeBytes int64
	CreatedAt time.Time
}
