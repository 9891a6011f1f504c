// Package local is the sandbox provider that runs sandboxes on this machine
// with bubblewrap (Debian package "bubblewrap").
//
// A sandbox is a long-lived bwrap process with its own user, mount, pid, ipc,
// uts and network namespace, and no way
// to make further user namespaces. Only the configured system directories
// are visible, read-only; /tmp, /home/sandbox and (when no volume is mounted
// there) /workspace are tmpfs mounts of bounded size, volumes are mounted at
// their mount paths, a snapshot read-only at SnapshotPath. When the plugin
// runs as root each sandbox runs as its own host uid from a configured
// range: RLIMIT_NPROC is not enforced for host uid 0, not even inside a user
// namespace, and a sandbox's files and processes then belong to it alone.
// Commands see uid 1000.
//
// Resources are the kernel's to enforce: each sandbox has control groups of
// its own (cgroup.go) capping its memory, tasks and CPU; its scratch is
// tmpfs charged to its memory; as root, volumes, snapshots and the agent
// with the tools are ext4 images (images.go), so that a volume holds its
// capacity and nothing shows a sandbox where state_dir is. A host lacking a
// mechanism is refused at Configure unless unenforced_limits lets the limit
// go (limits.go).
//
// PID 1 inside is the provider binary itself in agent mode (see
// RunSandboxRole), so that the sandbox ends whenever the agent does and
// signals from inside cannot reach it. It listens on a unix socket that the
// plugin created and passed in, runs commands under a per-exec subreaper
// shim, with the rlimits from the settings, and does file operations as the
// sandbox user inside the sandbox's mount namespace, so a symlink made in
// the sandbox can never lead to a host file. The agent ends the sandbox at
// its deadline and after its idle timeout even when no plugin runs; the
// plugin's reaper terminates what outlives its deadline and cleans up after
// dead sandboxes.
//
// All state lives under state_dir, one JSON record per sandbox, so a
// restarted plugin knows the live sandboxes again and cleans up dead ones;
// several plugin processes may share one state_dir.
//
// Every sandbox has a network namespace of its own; with network it leaves
// only through the plugin's egress proxy (see network.go), which enforces
// the policy on resolved addresses and puts host-scoped secrets into the
// headers of requests to their hosts: commands see placeholders.
//
// Not enforced: Resources.DiskMB (scratch sizes are the settings').
// Priority, Preemptible, Flavor and Region are ignored.
package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandstep/sandstep/internal/service/logging"
	"github.com/sandstep/sandstep/internal/service/version"
	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/egress"
)

// Paths inside every sandbox.
const (
	// SnapshotPath is where a snapshot's tree is mounted, read-only, and
	// where its setup commands build it. Snapshot env (PATH, NODE_PATH...)
	// points here.
	SnapshotPath = "/opt/sandstep/snapshot"
	// ToolsPath is where tools_dir is mounted read-only in every sandbox:
	// sandstep's own in-sandbox programs (the crawler) arrive there without
	// a copy.
	ToolsPath = "/opt/sandstep/tools"
	// PythonPath is where sandstep's Python client is, when tools_dir has
	// it (python/): a link into ToolsPath.
	PythonPath = "/opt/sandstep/python"
	agentPath  = "/.sandstep/agent"
	homePath   = "/home/sandbox"
	workPath   = "/workspace"
	// sandboxUID is the uid (and gid) commands see inside; on the host they
	// run as the sandbox's own uid.
	sandboxUID = 1000
)

// Defaults of sandboxes whose spec and the host's defaults leave a field
// zero.
const (
	defaultLifetime        = time.Hour
	defaultExecTimeout     = 10 * time.Minute
	defaultSnapshotTimeout = 15 * time.Minute
	reapInterval           = 10 * time.Second
	// shmSize bounds /dev/shm, as Docker's default does.
	shmSize = 64 << 20
)

// Provider is the local bubblewrap provider. Create it with New and call
// Configure before anything else.
type Provider struct {
	log *slog.Logger

	// noExecGroups sends every exec through the shim, as on a host
	// without cgroups (tests of that path set it).
	noExecGroups bool
	// agentBinary, when set, is the dedicated agent to use instead of
	// the one next to the plugin's binary (tests set it).
	agentBinary string

	mu         sync.Mutex // guards the configuration below
	configured bool
	s          settings
	defaults   providers.SandboxDefaults

	// stateMu serialises changes to the set of sandboxes, volumes and
	// snapshots within this process; the flock on locks/state.lock does so
	// across processes sharing one state_dir (see lock).
	stateMu sync.Mutex
	nextUID int // guarded by stateMu

	cacheMu sync.Mutex
	cache   map[string]*sandbox

	flightMu sync.Mutex
	flights  map[string]*flight
	// builds counts snapshot builds this process ran.
	builds atomic.Int64

	stageOnce sync.Once
	stage     *stageNS
	stageErr  error

	// Images this process mounted in its staging namespace (as root).
	shared sharedImages
	sys    sysImage

	reapOnce sync.Once
	stop     chan struct{}
	stopOnce sync.Once

	// egress is the proxy every sandbox with network leaves through
	// (guarded by mu); serving holds the sandboxes this process serves.
	egress   *egress.Proxy
	egressMu sync.Mutex
	serving  map[string]*egressServer
	// ports holds the sandboxes whose exposed ports this process serves
	// (guarded by egressMu).
	ports map[string]*portServer
}

// settings are what Configure derives from Settings.
type settings struct {
	stateDir string
	roArgs   []string // bwrap arguments that recreate ro_paths
	// roStaged and roGroups recreate them through prepared trees, where
	// there is a staging namespace (rotree.go).
	roStaged    []string
	roGroups    []roGroup
	roPaths     []string
	uidStart    int
	uidSize     int
	limits      rlimits
	maxFileSize int64
	bwrap       string
	agentBin    string   // host path of the agent binary bound into sandboxes
	toolsDir    string   // host folder bound read-only at ToolsPath ("" = none)
	isRoot      bool     // sandboxes get uids of their own
	stage       *stageNS // as root: where bwrap is started from

	// maxTasks caps a sandbox's tasks (its pids cgroup): max_processes
	// for the commands and agentTasks for the agent and supervisors.
	maxTasks int
	// Sizes of the scratch tmpfs mounts, in bytes.
	tmpSize, homeSize, workSize int64
	volumeCapacityMB            int
	snapshotSizeMB              int
	unenforced                  []string

	// Found at Configure (enforceLimits).
	cgroups    cgroupHost
	images     bool   // volumes, snapshots, agent and tools are ext4 images
	mkfs       string // mkfs.ext4, when images
	limitsInfo providers.Limits
}

// New returns an unconfigured provider.
func New() *Provider {
	return &Provider{
		log:     logging.Default("provider", "local"),
		cache:   make(map[string]*sandbox),
		flights: make(map[string]*flight),
		stop:    make(chan struct{}),
		serving: make(map[string]*egressServer),
	}
}

var _ providers.Provider = (*Provider)(nil)

// Close stops the background reaper, the staging thread and the egress
// proxies this process runs. Sandboxes keep running: they belong to
// state_dir, not to this process, and the next plugin process serves their
// ways out again.
func (p *Provider) Close() error {
	p.stopOnce.Do(func() {
		close(p.stop)
		p.mu.Lock()
		s, configured := p.s, p.configured
		p.configured = false
		p.mu.Unlock()
		if configured {
			// Another plugin process takes the sandboxes' ways out over
			// from the agents, which keep their listeners.
			p.stopAllEgress(s)
		}
		if p.stage != nil {
			p.stage.close()
		}
	})
	return nil
}

// Info describes the provider; what it enforces is known once configured.
func (p *Provider) Info(ctx context.Context) (providers.Info, error) {
	p.mu.Lock()
	limits := p.s.limitsInfo
	p.mu.Unlock()
	return providers.Info{
		Name:       "local",
		Version:    version.Version,
		APIVersion: providers.APIVersion,
		Capabilities: providers.Capabilities{
			Snapshots:         true,
			Volumes:           true,
			NamedSandboxes:    true,
			ListByLabels:      true,
			ExecStreaming:     true,
			FileAPI:           true,
			PublicURL:         false,
			HostScopedSecrets: true,
			ListSnapshots:     true,
			NetworkModes:      []providers.NetworkMode{providers.NetworkNone, providers.NetworkAll, providers.NetworkAllowlist},
			Limits:            limits,
		},
	}, nil
}

// Configure decodes and checks the settings (ParseSettings), prepares
// state_dir, checks that bubblewrap can start a sandbox here, and takes over
// the sandboxes a previous plugin process left running.
func (p *Provider) Configure(ctx context.Context, cfg providers.Config) error {
	ls, err := ParseSettings(cfg)
	if err != nil {
		return providers.Wrap(providers.InvalidArgument, "configure", err)
	}
	s, err := resolveSettings(ls)
	if err != nil {
		return err
	}
	s.isRoot = os.Geteuid() == 0
	if err := prepareStateDir(s.stateDir); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return providers.Wrap(providers.Internal, "configure", err)
	}
	agentSrc := p.dedicatedAgent(exe)
	if agentSrc == "" {
		agentSrc = exe
	}
	if s.agentBin, err = installAgent(s.stateDir, agentSrc); err != nil {
		return providers.Wrap(providers.Internal, "configure", err)
	}
	if s.isRoot {
		p.stageOnce.Do(func() { p.stage, p.stageErr = newStageNS() })
		if p.stageErr != nil {
			return providers.Wrap(providers.FailedPrecondition, "configure", p.stageErr)
		}
		s.stage = p.stage
	}
	if err := p.enforceLimits(ctx, &s); err != nil {
		return err
	}
	err = p.probe(ctx, s)
	if errors.Is(err, errAgentMismatch) && agentSrc != exe {
		p.log.Warn("the agent next to the plugin is from another build; sandboxes run the plugin's own binary as their agent, which starts slower",
			"agent", agentSrc, "err", err)
		if s.agentBin, err = installAgent(s.stateDir, exe); err != nil {
			return providers.Wrap(providers.Internal, "configure", err)
		}
		err = p.probe(ctx, s)
	}
	if err != nil {
		return err
	}
	proxy, err := newEgressProxy(ls, p.log)
	if err != nil {
		return err
	}
	if _, err := egress.NewPolicy(providers.NetworkAll, nil, cfg.Defaults.AllowPrivate); err != nil {
		return providers.Errorf(providers.InvalidArgument, "configure", "sandbox defaults: %v", err)
	}

	p.mu.Lock()
	p.s = s
	p.egress = proxy
	p.defaults = cfg.Defaults
	p.configured = true
	p.mu.Unlock()
	p.stateMu.Lock()
	p.nextUID = s.uidStart
	p.stateMu.Unlock()

	p.reload()
	p.reapOnce.Do(func() { go p.reapLoop() })
	p.log.Info("configured", "state_dir", s.stateDir, "bwrap", s.bwrap, "root", s.isRoot,
		"cgroups", s.limitsInfo.Cgroups, "volumes", s.limitsInfo.Volumes, "enforced", s.limitsInfo.Enforced)
	return nil
}

// resolveSettings derives what the provider works with from checked
// settings.
func resolveSettings(ls Settings) (settings, error) {
	s := settings{
		stateDir: ls.StateDir,
		uidStart: ls.UIDRangeStart,
		uidSize:  ls.UIDRangeSize,
		limits: rlimits{
			NProc:  uint64(ls.MaxProcesses),
			FSize:  uint64(ls.MaxFileSizeMB) << 20,
			CPU:    uint64(ls.MaxCPUSeconds),
			AS:     uint64(ls.MaxAddressSpaceMB) << 20,
			NoFile: uint64(ls.MaxOpenFiles),
		},
	}
	s.maxFileSize = int64(s.limits.FSize)
	s.maxTasks = int(s.limits.NProc) + agentTasks
	s.tmpSize = int64(ls.TmpSizeMB) << 20
	s.homeSize = int64(ls.HomeSizeMB) << 20
	s.workSize = int64(ls.WorkspaceSizeMB) << 20
	s.volumeCapacityMB = ls.VolumeCapacityMB
	s.snapshotSizeMB = ls.SnapshotSizeMB
	s.unenforced = ls.UnenforcedLimits
	// A missing tools folder is no error: it only means nothing is mounted.
	if fi, err := os.Stat(ls.ToolsDir); ls.ToolsDir != "" && err == nil && fi.IsDir() {
		s.toolsDir = ls.ToolsDir
	}
	s.roPaths = slices.Sorted(slices.Values(ls.ROPaths))
	s.roArgs = roBindArgs(s.roPaths)
	s.roStaged, s.roGroups = roStagedArgs(s.roPaths)

	s.bwrap = ls.BwrapPath
	if s.bwrap == "" {
		s.bwrap = "bwrap"
	}
	var err error
	if s.bwrap, err = exec.LookPath(s.bwrap); err != nil {
		return settings{}, providers.Errorf(providers.FailedPrecondition, "configure",
			"bubblewrap is not installed (%v): install the Debian package \"bubblewrap\" (apt-get install bubblewrap) or set provider.local.bwrap_path", err)
	}
	return s, nil
}

// reservedPaths are the sandbox's own mount points; ro_paths and volume
// mounts may not cover them.
var reservedPaths = []string{"/proc", "/dev", "/tmp", homePath, "/.sandstep", "/opt/sandstep"}

// overlaps reports whether one of a and b is the other or lies below it.
func overlaps(a, b string) bool {
	return a == b || strings.HasPrefix(a, b+"/") || strings.HasPrefix(b, a+"/")
}

// prepareStateDir creates state_dir's layout, private to the plugin's uid:
// sandboxes reach their directories only through bind mounts.
func prepareStateDir(dir string) error {
	for _, sub := range []string{"", "sandboxes", "volumes", "snapshots", "snapshots/trees", "bin", "images", "locks"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return providers.Wrap(providers.FailedPrecondition, "configure", fmt.Errorf("state_dir: %w", err))
		}
	}
	return nil
}

// installAgent puts this binary in state_dir for sandboxes to bind. A hard
// link costs nothing; a copy is made when linking is impossible or the
// original is not executable by others (sandbox uids must execute it). The name follows the binary's size and mtime, so
// plugin restarts reuse it and an upgraded plugin installs a new one.
func installAgent(stateDir, exe string) (string, error) {
	fi, err := os.Stat(exe)
	if err != nil {
		return "", fmt.Errorf("locating the provider binary: %w", err)
	}
	bin := filepath.Join(stateDir, "bin")
	name := fmt.Sprintf("agent-%x-%x", fi.Size(), fi.ModTime().UnixNano())
	dst := filepath.Join(bin, name)
	if _, err := os.Stat(dst); err != nil {
		tmp := fmt.Sprintf("%s.tmp-%d", dst, os.Getpid())
		os.Remove(tmp)
		if fi.Mode().Perm()&0o005 != 0o005 || os.Link(exe, tmp) != nil {
			if err := copyFile(exe, tmp, 0o755); err != nil {
				return "", fmt.Errorf("installing the agent binary: %w", err)
			}
		}
		if err := os.Rename(tmp, dst); err != nil {
			return "", fmt.Errorf("installing the agent binary: %w", err)
		}
	}
	// Earlier versions go. Sandboxes started with one keep it: their bind
	// mount holds the file even after it is removed here.
	entries, _ := os.ReadDir(bin)
	for _, e := range entries {
		if e.Name() != name && strings.HasPrefix(e.Name(), "agent-") {
			os.Remove(filepath.Join(bin, e.Name()))
		}
	}
	return dst, nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Chmod(mode); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// AgentBinary is the name of the dedicated agent binary
// (cmd/sandstep-local-agent), which the plugin looks for next to its own.
const AgentBinary = "sandstep-local-agent"

// dedicatedAgent returns the agent binary to bind into sandboxes instead of
// the plugin's own (exe), or "" when there is none. The plugin's binary can
// be the agent too (RunSandboxRole), but its gRPC and protobuf packages
// make its start 3-4 ms slower, at every sandbox start.
func (p *Provider) dedicatedAgent(exe string) string {
	path := p.agentBinary
	if path == "" {
		path = filepath.Join(filepath.Dir(exe), AgentBinary)
	}
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return ""
	}
	return path
}

// errAgentMismatch is a probe whose agent speaks another protocol than the
// plugin (see agentProtocol).
var errAgentMismatch = errors.New("the agent binary is from another build of the provider")

// probe starts one throw-away sandbox, so that a machine where user
// namespaces are disabled or the agent cannot run fails at Configure with
// bubblewrap's own words instead of at the first Create. It also checks
// that the agent speaks the plugin's protocol.
func (p *Provider) probe(ctx context.Context, s settings) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st := newStager(s.stage, "probe-"+newID())
	agent, _, err := p.systemFiles(ctx, s, st)
	if err != nil {
		return providers.Wrap(providers.FailedPrecondition, "configure", err)
	}
	args := []string{"--unshare-all", "--unshare-user", "--disable-userns", "--as-pid-1", "--uid", fmt.Sprint(sandboxUID), "--gid", fmt.Sprint(sandboxUID)}
	args = append(args, s.roArgs...)
	args = append(args, "--proc", "/proc", "--dev", "/dev", "--ro-bind", agent, agentPath, "--", agentPath, roleProbe)
	cmd := exec.CommandContext(ctx, s.bwrap, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = st.start(cmd, s.uidStart, nil)
	if err == nil {
		err = cmd.Wait()
	}
	if rerr := st.release(); err == nil {
		err = rerr
	}
	said := strings.TrimSpace(out.String())
	proto, ok := strings.CutPrefix(said, "ok ")
	if err != nil || !ok && said != "ok" {
		return providers.Errorf(providers.FailedPrecondition, "configure",
			"bubblewrap cannot start a sandbox here (%v): %s; unprivileged user namespaces must be enabled (user.max_user_namespaces > 0, and kernel.unprivileged_userns_clone=1 where that sysctl exists)",
			err, said)
	}
	if want := agentProtocol(); proto != want {
		// An agent of a build from before the check says only "ok".
		return providers.Wrap(providers.FailedPrecondition, "configure", fmt.Errorf("%w: it speaks %q, the plugin %q", errAgentMismatch, proto, want))
	}
	return nil
}

// ready returns the settings, or an error before Configure.
func (p *Provider) ready() (settings, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.configured {
		return settings{}, providers.Errorf(providers.FailedPrecondition, "", "the local provider is not configured")
	}
	return p.s, nil
}

// reapLoop terminates expired sandboxes and cleans up after dead ones. The
// agent ends a sandbox at its deadline or idle timeout by itself; this is
// the second line, and the one that frees disk space.
func (p *Provider) reapLoop() {
	t := time.NewTicker(reapInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.reap()
			if s, err := p.ready(); err == nil && s.stage != nil {
				p.pruneSharedImages(s.stage)
			}
		}
	}
}

func (p *Provider) reap() {
	if s, err := p.ready(); err == nil {
		p.flushUsage(s)
	}
	recs, err := p.scanRecords()
	if err != nil {
		p.log.Warn("reaper: listing sandboxes", "err", err)
		return
	}
	now := time.Now()
	for _, rec := range recs {
		switch {
		case !rec.alive():
			if !rec.starting() {
				p.cleanup(rec)
			}
		case now.After(rec.ExpiresAt.Add(5 * time.Second)):
			p.log.Info("reaper: terminating expired sandbox", "sandbox_id", rec.ID)
			if err := p.Terminate(context.Background(), rec.ID); err != nil {
				p.log.Warn("reaper: terminate", "sandbox_id", rec.ID, "err", err)
			}
		}
	}
}

// reload takes over the sandboxes recorded in state_dir: the live ones are
// known again, dead ones and half-built snapshots are cleaned up.
func (p *Provider) reload() {
	recs, err := p.scanRecords()
	if err != nil {
		p.log.Warn("reload: listing sandboxes", "err", err)
	}
	for _, rec := range recs {
		switch {
		case rec.alive():
			p.remember(&sandbox{rec: rec})
			if s, err := p.ready(); err == nil {
				p.resumeEgress(s, rec.ID)
				if err := p.servePorts(s, rec); err != nil {
					p.log.Warn("reload: the sandbox's exposed ports cannot be served", "sandbox_id", rec.ID, "err", err)
				}
			}
			p.log.Info("reload: sandbox is live", "sandbox_id", rec.ID, "name", rec.Name)
		case !rec.starting():
			p.cleanup(rec)
		}
	}
	if s, err := p.ready(); err == nil {
		if s.images {
			p.retireDirectorySnapshots(s)
		}
		p.cleanLeftovers(s)
	}
}
