package local

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandstep/sandstep/providers"
)

// startGrace is how long a record without a process counts as a sandbox
// being started (by this or another plugin process) rather than a leftover.
const (
	startGrace   = 2 * time.Minute
	startTimeout = 30 * time.Second
)

// sandboxRecord is the JSON state file of one sandbox. It holds no secrets.
type sandboxRecord struct {
	ID          string                `json:"id"`
	Name        string                `json:"name,omitempty"`
	Labels      map[string]string     `json:"labels,omitempty"`
	UID         int                   `json:"uid"`
	Snapshot    string                `json:"snapshot,omitempty"`
	SnapshotID  string                `json:"snapshot_id,omitempty"`
	Mounts      []providers.Mount     `json:"mounts,omitempty"`
	Network     providers.NetworkMode `json:"network"`
	CreatedAt   time.Time             `json:"created_at"`
	ExpiresAt   time.Time             `json:"expires_at"`
	IdleTimeout time.Duration         `json:"idle_timeout,omitempty"`
	// Ports are the exposed ports, PortURLs their sockets (ports.go).
	Ports    []int          `json:"ports,omitempty"`
	PortURLs map[int]string `json:"port_urls,omitempty"`
	// BuildDir is the tree of a snapshot being built, a host directory or
	// an ext4 image (.img), mounted writable at SnapshotPath (builder
	// sandboxes only).
	BuildDir string `json:"build_dir,omitempty"`
	// MemoryMB and CPUs are the sandbox's resources; Cgroup its control
	// groups (nil where none are enforced).
	MemoryMB int            `json:"memory_mb,omitempty"`
	CPUs     float64        `json:"cpus,omitempty"`
	Cgroup   *sandboxCgroup `json:"cgroup,omitempty"`

	// The outer bwrap process and the sandbox's pid 1, each with its start
	// time so that a reused pid is not taken for the sandbox.
	BwrapPID   int    `json:"bwrap_pid,omitempty"`
	BwrapStart uint64 `json:"bwrap_start,omitempty"`
	InitPID    int    `json:"init_pid,omitempty"`
	InitStart  uint64 `json:"init_start,omitempty"`
}

// starting reports whether the record was written for a sandbox whose
// process is still being started.
func (r sandboxRecord) starting() bool {
	return r.InitPID == 0 && time.Since(r.CreatedAt) < startGrace
}

// alive reports whether the sandbox runs, or is being started.
func (r sandboxRecord) alive() bool {
	if r.InitPID == 0 {
		return r.starting()
	}
	return processAlive(r.InitPID, r.InitStart)
}

func (r sandboxRecord) public() providers.Sandbox {
	return providers.Sandbox{
		ID:        r.ID,
		Name:      r.Name,
		Labels:    copyMap(r.Labels),
		State:     providers.StateRunning,
		Snapshot:  r.Snapshot,
		Mounts:    append([]providers.Mount(nil), r.Mounts...),
		CreatedAt: r.CreatedAt,
		ExpiresAt: r.ExpiresAt,
		PortURLs:  maps.Clone(r.PortURLs),
	}
}

// sandbox is a sandbox this process knows. exited is closed when the bwrap
// process ends; it is nil for sandboxes another process started.
type sandbox struct {
	rec    sandboxRecord
	exited chan struct{}
}

// isID reports whether id is a sandbox id: "sbx-" and 16 lowercase hex
// digits. Checked by hand rather than with a regexp compiled at package
// init, which the agent, the same package, would pay at every sandbox
// start.
func isID(id string) bool {
	digits, ok := strings.CutPrefix(id, "sbx-")
	if !ok || len(digits) != 16 {
		return false
	}
	for _, c := range []byte(digits) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func newID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return "sbx-" + hex.EncodeToString(b[:])
}

func (s settings) sandboxDir(id string) string { return filepath.Join(s.stateDir, "sandboxes", id) }
func (s settings) recordPath(id string) string {
	return filepath.Join(s.stateDir, "sandboxes", id+".json")
}

// lock serialises changes to sandboxes, volumes and snapshots, within this
// process and across plugin processes sharing state_dir.
func (p *Provider) lock(s settings) (unlock func(), err error) {
	p.stateMu.Lock()
	f, err := lockFile(context.Background(), filepath.Join(s.stateDir, "locks", "state.lock"))
	if err != nil {
		p.stateMu.Unlock()
		return nil, providers.Wrap(providers.Internal, "lock", err)
	}
	return func() {
		f.Close()
		p.stateMu.Unlock()
	}, nil
}

// scanRecords reads every sandbox record in state_dir.
func (p *Provider) scanRecords() ([]sandboxRecord, error) {
	s, err := p.ready()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(s.stateDir, "sandboxes")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var recs []sandboxRecord
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !isID(id) {
			continue
		}
		rec, err := readRecord(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // removed meanwhile
		}
		recs = append(recs, rec)
	}
	return recs, nil
}

func readRecord(path string) (sandboxRecord, error) {
	var rec sandboxRecord
	b, err := os.ReadFile(path)
	if err != nil {
		return rec, err
	}
	return rec, json.Unmarshal(b, &rec)
}

func writeJSONFile(path string, v any, mode os.FileMode) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := fmt.Sprintf("%s.tmp-%s", path, newID())
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

func (p *Provider) remember(sb *sandbox) {
	p.cacheMu.Lock()
	p.cache[sb.rec.ID] = sb
	p.cacheMu.Unlock()
}

func (p *Provider) forget(id string) {
	p.cacheMu.Lock()
	delete(p.cache, id)
	p.cacheMu.Unlock()
}

// lookup finds a sandbox by id, in memory or (when another process started
// it) on disk. It does not check that the sandbox is alive.
func (p *Provider) lookup(s settings, id string) (*sandbox, bool) {
	if !isID(id) {
		return nil, false
	}
	p.cacheMu.Lock()
	sb, ok := p.cache[id]
	p.cacheMu.Unlock()
	if ok {
		return sb, true
	}
	rec, err := readRecord(s.recordPath(id))
	if err != nil {
		return nil, false
	}
	sb = &sandbox{rec: rec}
	if rec.InitPID != 0 {
		p.remember(sb)
	}
	return sb, true
}

// live returns a running sandbox, or NotFound (cleaning up after a dead one).
func (p *Provider) live(op, id string) (settings, *sandbox, error) {
	s, err := p.ready()
	if err != nil {
		return s, nil, err
	}
	sb, ok := p.lookup(s, id)
	if !ok || sb.rec.InitPID == 0 {
		return s, nil, providers.Errorf(providers.NotFound, op, "sandbox %s not found", id)
	}
	if !sb.rec.alive() {
		p.cleanup(sb.rec)
		return s, nil, providers.Errorf(providers.NotFound, op, "sandbox %s has ended", id)
	}
	return s, sb, nil
}

// Create starts a sandbox and returns once its agent accepts requests.
func (p *Provider) Create(ctx context.Context, spec providers.CreateSpec) (providers.Sandbox, error) {
	rec, err := p.create(ctx, spec, "", nil)
	if err != nil {
		return providers.Sandbox{}, err
	}
	return rec.public(), nil
}

// create is Create, or with buildDir set, the creation of a snapshot's
// builder sandbox: buildDir is mounted writable at SnapshotPath and
// buildEnv, the snapshot's env, applies as it will in the snapshot's users.
func (p *Provider) create(ctx context.Context, spec providers.CreateSpec, buildDir string, buildEnv map[string]string) (sandboxRecord, error) {
	const op = "create"
	s, err := p.ready()
	if err != nil {
		return sandboxRecord{}, err
	}
	p.mu.Lock()
	defaults := p.defaults
	p.mu.Unlock()

	rec := sandboxRecord{
		ID:          newID(),
		Name:        spec.Name,
		Labels:      copyMap(spec.Labels),
		Snapshot:    spec.Snapshot,
		Network:     spec.Network.Mode,
		CreatedAt:   time.Now().UTC(),
		IdleTimeout: spec.IdleTimeout,
		BuildDir:    buildDir,
		Ports:       append([]int(nil), spec.ExposePorts...),
	}
	if err := checkPorts(rec.Ports); err != nil {
		return rec, err
	}
	rec.PortURLs = portURLs(s, rec)
	lifetime := spec.Lifetime
	if lifetime <= 0 {
		lifetime = defaults.Lifetime
	}
	if lifetime <= 0 {
		lifetime = defaultLifetime
	}
	rec.ExpiresAt = rec.CreatedAt.Add(lifetime)
	if rec.IdleTimeout <= 0 {
		rec.IdleTimeout = defaults.IdleTimeout
	}
	if len(spec.Name) > 256 {
		return rec, providers.Errorf(providers.InvalidArgument, op, "name longer than 256 bytes")
	}
	if rec.Mounts, err = normalizeMounts(spec.Mounts, s.roPaths); err != nil {
		return rec, err
	}
	if rec.MemoryMB, rec.CPUs, err = sandboxResources(spec.Resources, defaults); err != nil {
		return rec, err
	}
	for k, v := range spec.Env {
		if err := checkEnv(k, v); err != nil {
			return rec, err
		}
	}
	for _, sec := range spec.Secrets {
		if err := checkEnv(sec.Name, sec.Value); err != nil {
			// The value stays out of the message.
			return rec, providers.Errorf(providers.InvalidArgument, op, "secret %q: invalid name or value", sec.Name)
		}
	}
	nw, secrets, err := p.prepareNetwork(&rec, spec, defaults)
	if err != nil {
		return rec, err
	}

	unlock, err := p.lock(s)
	if err != nil {
		return rec, err
	}
	snapEnv, err := p.reserve(s, &rec)
	unlock()
	if err != nil {
		return rec, err
	}
	if buildDir != "" {
		snapEnv = buildEnv
	}

	env := baseEnv()
	env = mergeEnv(env, expandEnv(snapEnv, env))
	env = mergeEnv(env, spec.Env)
	env = mergeEnv(env, secrets)
	env = mergeEnv(env, nw.env)

	sb, err := p.start(ctx, s, rec, env, nw)
	if err != nil {
		p.cleanup(rec)
		return rec, err
	}
	p.log.Info("sandbox created", "sandbox_id", rec.ID, "name", rec.Name, "uid", rec.UID,
		"network", rec.Network, "snapshot", rec.Snapshot, "expires_at", rec.ExpiresAt)
	return sb.rec, nil
}

// reserve checks the spec against the live sandboxes, volumes and snapshots,
// picks a uid and writes the record, all under the state lock, so two
// creates cannot take one name, uid or volume. It returns the snapshot's env.
func (p *Provider) reserve(s settings, rec *sandboxRecord) (map[string]string, error) {
	const op = "create"
	recs, err := p.scanRecords()
	if err != nil {
		return nil, providers.Wrap(providers.Internal, op, err)
	}
	used := make(map[int]bool)
	for _, r := range recs {
		if !r.alive() {
			continue
		}
		used[r.UID] = true
		if rec.Name != "" && r.Name == rec.Name {
			return nil, providers.Errorf(providers.AlreadyExists, op, "a live sandbox named %q exists (%s)", rec.Name, r.ID)
		}
		for _, m := range rec.Mounts {
			for _, rm := range r.Mounts {
				if rm.Volume == m.Volume {
					return nil, providers.Errorf(providers.FailedPrecondition, op, "volume %q is mounted by live sandbox %s", m.Volume, r.ID)
				}
			}
		}
	}
	for _, m := range rec.Mounts {
		if _, err := readVolumeMeta(s, m.Volume); err != nil {
			return nil, providers.Errorf(providers.NotFound, op, "volume %q not found", m.Volume)
		}
	}
	var snapEnv map[string]string
	if rec.Snapshot != "" {
		meta, err := readSnapshotMeta(s, rec.Snapshot)
		if err != nil {
			return nil, providers.Errorf(providers.NotFound, op, "snapshot %q not found", rec.Snapshot)
		}
		snapEnv = meta.Env
		rec.SnapshotID = meta.ID
	}

	if s.isRoot {
		rec.UID = -1
		for i := 0; i < s.uidSize; i++ {
			uid := s.uidStart + (p.nextUID-s.uidStart+i)%s.uidSize
			if !used[uid] {
				rec.UID = uid
				p.nextUID = uid + 1
				break
			}
		}
		if rec.UID < 0 {
			return nil, providers.Errorf(providers.ResourceExhausted, op, "all %d sandbox uids are in use", s.uidSize)
		}
	} else {
		rec.UID = os.Getuid()
	}
	// Named before they exist, so that whoever cleans up after this
	// sandbox finds them.
	rec.Cgroup = s.cgroups.groupFor(rec.ID)
	if err := writeJSONFile(s.recordPath(rec.ID), rec, 0o600); err != nil {
		return nil, providers.Wrap(providers.Internal, op, err)
	}
	return snapEnv, nil
}

// baseEnv is every sandbox's environment before the snapshot's and the
// request's. PATH ends with the tools mount, so that what tools_dir holds
// (Deno among them, which the session runners look for) runs by name.
func baseEnv() []string {
	return []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:" + ToolsPath,
		"HOME=" + homePath,
		"LANG=C.UTF-8",
		"USER=sandbox",
	}
}

// expandEnv expands $VAR references in a snapshot's env against the base
// env, so that a snapshot can say PATH=/opt/sandstep/snapshot/bin:$PATH.
func expandEnv(vars map[string]string, base []string) map[string]string {
	if len(vars) == 0 {
		return nil
	}
	lookup := make(map[string]string, len(base))
	for _, kv := range base {
		k, v, _ := strings.Cut(kv, "=")
		lookup[k] = v
	}
	out := make(map[string]string, len(vars))
	for k, v := range vars {
		out[k] = os.Expand(v, func(name string) string { return lookup[name] })
	}
	return out
}

func checkEnv(k, v string) error {
	if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
		return providers.Errorf(providers.InvalidArgument, "create", "invalid environment variable %q", k)
	}
	return nil
}

// validSlug is ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$, by hand (see isID; the
// bounded repetition compiles into a large program).
func validSlug(slug string) bool {
	if len(slug) == 0 || len(slug) > 128 {
		return false
	}
	for i, c := range []byte(slug) {
		alnum := 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}

func checkSlug(op, kind, slug string) error {
	if !validSlug(slug) {
		return providers.Errorf(providers.InvalidArgument, op, "%s slug %q: use 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit", kind, slug)
	}
	return nil
}

// normalizeMounts fills default paths and rejects mounts that would cover
// the sandbox's own directories or each other.
func normalizeMounts(mounts []providers.Mount, roPaths []string) ([]providers.Mount, error) {
	const op = "create"
	out := make([]providers.Mount, 0, len(mounts))
	for _, m := range mounts {
		if m.Path == "" {
			m.Path = workPath
		}
		if err := checkSlug(op, "volume", m.Volume); err != nil {
			return nil, err
		}
		if !cleanAbs(m.Path) || m.Path == "/" {
			return nil, providers.Errorf(providers.InvalidArgument, op, "mount path %q must be an absolute, clean path other than /", m.Path)
		}
		for _, r := range append(append([]string(nil), reservedPaths...), roPaths...) {
			if overlaps(m.Path, r) {
				return nil, providers.Errorf(providers.InvalidArgument, op, "mount path %s overlaps %s", m.Path, r)
			}
		}
		for _, o := range out {
			if overlaps(m.Path, o.Path) || m.Volume == o.Volume {
				return nil, providers.Errorf(providers.InvalidArgument, op, "mounts %s (%s) and %s (%s) collide", o.Path, o.Volume, m.Path, m.Volume)
			}
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// start gives the sandbox its cgroups and mounts and starts bwrap with the
// agent.
func (p *Provider) start(ctx context.Context, s settings, rec sandboxRecord, env []string, nw *sandboxNet) (*sandbox, error) {
	const op = "create"
	log := p.log.With("sandbox_id", rec.ID)
	dir := s.sandboxDir(rec.ID)
	uid := rec.UID
	if err := os.Mkdir(dir, 0o711); err != nil {
		return nil, providers.Wrap(providers.Internal, op, err)
	}
	if err := s.cgroups.create(rec.Cgroup, cgroupLimits{memoryBytes: int64(rec.MemoryMB) << 20, tasks: s.maxTasks, cpus: rec.CPUs}); err != nil {
		return nil, providers.Wrap(providers.Internal, op, err)
	}

	st := newStager(s.stage, rec.ID)
	// Once bwrap has made its own mount namespace (it has when it says it
	// is ready), or when it never starts.
	defer func() {
		if err := st.release(); err != nil {
			log.Warn("releasing staged directories", "err", err)
		}
	}()
	// --unshare-all includes the network: whatever its policy, a sandbox
	// has only a loopback of its own, and leaves through the egress proxy.
	args := []string{"--unshare-all"}
	args = append(args, "--unshare-user", "--disable-userns", "--as-pid-1",
		"--uid", fmt.Sprint(sandboxUID), "--gid", fmt.Sprint(sandboxUID),
		"--hostname", rec.ID, "--info-fd", fmt.Sprint(fdInfo))
	if st.ns != nil {
		args = append(args, s.roStaged...)
		st.roGroups = s.roGroups
	} else {
		args = append(args, s.roArgs...)
	}
	bundle, err := nw.bundleFile()
	if err != nil {
		return nil, providers.Wrap(providers.Internal, op, fmt.Errorf("CA bundle: %w", err))
	}
	if bundle != nil {
		defer bundle.Close()
		args = append(args, "--ro-bind-data", fmt.Sprint(fdBundle), nw.bundlePath)
	}
	// /dev is a tmpfs the sandbox could fill RAM through: it is read-only,
	// and shared memory gets a tmpfs of bounded size (devArgs). The
	// scratch directories are tmpfs mounts of bounded size too, private to
	// the sandbox; what they hold counts against its memory.
	args = append(args, "--proc", "/proc")
	args = append(args, devArgs(st.ns != nil)...)
	args = append(args, "--size", fmt.Sprint(s.tmpSize), "--perms", "1777", "--tmpfs", "/tmp",
		"--size", fmt.Sprint(s.homeSize), "--perms", "0755", "--tmpfs", homePath)
	workMounted := false
	for _, m := range rec.Mounts {
		workMounted = workMounted || m.Path == workPath
	}
	if !workMounted {
		args = append(args, "--size", fmt.Sprint(s.workSize), "--perms", "0755", "--tmpfs", workPath)
	}
	switch {
	case rec.BuildDir != "":
		src, err := p.stageBuild(s, st, rec)
		if err != nil {
			return nil, providers.Wrap(providers.Internal, op, fmt.Errorf("snapshot build: %w", err))
		}
		args = append(args, "--bind", src, SnapshotPath)
	case rec.Snapshot != "":
		src, err := p.stageSnapshot(s, st, rec)
		if err != nil {
			return nil, err
		}
		args = append(args, "--ro-bind", src, SnapshotPath)
	}
	agent, tools, err := p.systemFiles(ctx, s, st)
	if err != nil {
		return nil, providers.Wrap(providers.Internal, op, err)
	}
	if tools != "" {
		args = append(args, "--ro-bind", tools, ToolsPath)
		// sandstep's Python client (tools_dir/python) is importable from
		// /opt/sandstep/python, as agents' code expects it.
		if fi, err := os.Stat(filepath.Join(s.toolsDir, "python")); s.toolsDir != "" && err == nil && fi.IsDir() {
			args = append(args, "--symlink", ToolsPath+"/python", PythonPath)
		}
	}
	for i, m := range rec.Mounts {
		src, err := p.stageVolume(ctx, s, st, m, fmt.Sprintf("volume%d", i), uid)
		if err != nil {
			return nil, err
		}
		bind := "--bind"
		if m.ReadOnly {
			bind = "--ro-bind"
		}
		args = append(args, bind, src, m.Path)
	}
	args = append(args, "--ro-bind", agent, agentPath, "--remount-ro", "/", "--", agentPath, roleAgent)

	ln, err := listenUnix(filepath.Join(dir, "agent.sock"))
	if err != nil {
		return nil, providers.Wrap(providers.Internal, op, fmt.Errorf("agent socket: %w", err))
	}
	lnFile, err := ln.File()
	ln.Close()
	if err != nil {
		return nil, providers.Wrap(providers.Internal, op, err)
	}
	var toClose []*os.File
	defer func() {
		for _, f := range toClose {
			f.Close()
		}
	}()
	toClose = append(toClose, lnFile)
	pipe := func() (*os.File, *os.File) {
		r, w, perr := os.Pipe()
		if perr != nil {
			err = perr
			return nil, nil
		}
		toClose = append(toClose, r, w)
		return r, w
	}
	infoR, infoW := pipe()
	readyR, readyW := pipe()
	cfgR, cfgW := pipe()
	errR, errW := pipe()
	if err != nil {
		return nil, providers.Wrap(providers.ResourceExhausted, op, err)
	}

	var groups *os.File
	// On cgroup v2, bwrap must start inside the group (below).
	if !p.noExecGroups && (rec.Cgroup == nil || rec.Cgroup.Version != 2 || s.cgroups.cloneInto) {
		if groups, err = rec.Cgroup.openExecDir(uid, s.isRoot); err != nil {
			return nil, providers.Wrap(providers.Internal, op, err)
		}
	}
	if groups != nil {
		toClose = append(toClose, groups)
	}

	limits := s.limits
	cfg := agentConfig{
		ID:          rec.ID,
		Env:         env,
		Deadline:    rec.ExpiresAt,
		IdleTimeout: rec.IdleTimeout,
		Workdir:     workPath,
		Limits:      limits,
		MaxFileSize: s.maxFileSize,
		ExecTimeout: p.execTimeout(0),
		EgressPort:  nw.port(),
	}
	if groups != nil {
		cfg.ExecGroups = rec.Cgroup.Version
	}
	// The agent reads its config first thing: written now, it is waiting
	// in the pipe, unless it is larger than a pipe holds without a reader
	// (64 KiB on Linux; the env can be large).
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return nil, providers.Wrap(providers.Internal, op, err)
	}
	cfgSent := false
	if len(cfgJSON) <= 32<<10 {
		if _, err := cfgW.Write(cfgJSON); err != nil {
			return nil, providers.Wrap(providers.Internal, op, err)
		}
		cfgW.Close()
		cfgSent = true
	}
	// Not the request's ctx: the sandbox outlives the call that made it.
	cmd := exec.Command(s.bwrap, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + homePath}
	cmd.Stderr = errW
	// Each at its fd* number; a nil entry leaves its number closed.
	cmd.ExtraFiles = []*os.File{infoW, readyW, lnFile, cfgR, bundle, groups}
	// bwrap starts inside the sandbox's groups where it can (on v1 always,
	// see bornInto); elsewhere it is moved in once it reports the pid of
	// the sandbox's pid 1, before that runs anything of the sandbox's.
	var born *sandboxCgroup
	bornInside := false
	switch {
	case rec.Cgroup == nil:
	case rec.Cgroup.Version == 1:
		born, bornInside = rec.Cgroup, true
	case groups != nil:
		// Started inside its group, the sandbox's cgroup namespace has the
		// group for its root, as moving processes into the agent's exec
		// groups requires (cgroup v2 checks both ends against it).
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(groups.Fd())}
		bornInside = true
	}
	err = st.start(cmd, uid, born)
	if err != nil {
		return nil, providers.Wrap(providers.Internal, op, fmt.Errorf("starting bwrap: %w", err))
	}
	for _, f := range []*os.File{infoW, readyW, lnFile, cfgR, errW} {
		f.Close()
	}
	sb := &sandbox{rec: rec, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(sb.exited)
	}()
	if !cfgSent {
		go func() {
			_, _ = cfgW.Write(cfgJSON)
			cfgW.Close()
		}()
	}
	// The follower owns the read end: the agent's stderr reaches the
	// plugin's log for the sandbox's whole life, not only its start.
	toClose = slices.DeleteFunc(toClose, func(f *os.File) bool { return f == errR })
	stderr := &startupLog{}
	go stderr.follow(errR, log)

	type started struct {
		initPID int
		err     error
	}
	startedCh := make(chan started, 1)
	go func() {
		var info struct {
			ChildPID int `json:"child-pid"`
		}
		if err := json.NewDecoder(infoR).Decode(&info); err != nil || info.ChildPID <= 0 {
			startedCh <- started{err: errors.New("bwrap ended before starting the sandbox")}
			return
		}
		// Into the sandbox's cgroups, if not there yet, before the agent
		// starts anything.
		if err := confine(rec.Cgroup, bornInside, cmd.Process.Pid, info.ChildPID); err != nil {
			startedCh <- started{initPID: info.ChildPID, err: err}
			return
		}
		line, err := bufio.NewReader(readyR).ReadString('\n')
		if err != nil || line != "ready\n" {
			startedCh <- started{initPID: info.ChildPID, err: errors.New("the sandbox agent ended before it was ready")}
			return
		}
		startedCh <- started{initPID: info.ChildPID}
	}()

	abort := func(initPID int, err error) (*sandbox, error) {
		if initPID > 0 {
			_ = syscall.Kill(initPID, syscall.SIGKILL)
		}
		_ = cmd.Process.Kill()
		select {
		case <-sb.exited:
		case <-time.After(10 * time.Second):
		}
		if msg := stderr.text(); msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
		return nil, err
	}
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	var up started
	select {
	case up = <-startedCh:
	case <-ctx.Done():
		return abort(0, providers.Wrap(providers.DeadlineExceeded, op, ctx.Err()))
	case <-timer.C:
		return abort(0, providers.Errorf(providers.Unavailable, op, "the sandbox did not start within %s", startTimeout))
	}
	if up.err != nil {
		// Let bwrap finish writing why it failed.
		select {
		case <-sb.exited:
		case <-time.After(time.Second):
		}
		return abort(up.initPID, providers.Wrap(providers.Internal, op, up.err))
	}
	stderr.started()

	rec.BwrapPID = cmd.Process.Pid
	if ps, ok := readProcStat(rec.BwrapPID); ok {
		rec.BwrapStart = ps.start
	}
	rec.InitPID = up.initPID
	ps, ok := readProcStat(rec.InitPID)
	if !ok {
		return abort(rec.InitPID, providers.Errorf(providers.Internal, op, "the sandbox ended right after it started"))
	}
	rec.InitStart = ps.start
	if err := p.startEgress(ctx, s, rec.ID, nw); err != nil {
		return abort(rec.InitPID, providers.Wrap(providers.Internal, op, fmt.Errorf("the sandbox's way out: %w", err)))
	}
	if err := p.servePorts(s, rec); err != nil {
		return abort(rec.InitPID, providers.Wrap(providers.Internal, op, fmt.Errorf("the sandbox's exposed ports: %w", err)))
	}
	if err := writeJSONFile(s.recordPath(rec.ID), rec, 0o600); err != nil {
		return abort(rec.InitPID, providers.Wrap(providers.Internal, op, err))
	}
	sb.rec = rec
	p.remember(sb)
	return sb, nil
}

// startupLog keeps what bwrap and the agent write to stderr until the
// sandbox is up (for the error message if it does not come up) and passes
// every line on to the plugin's log.
type startupLog struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	running bool
}

func (l *startupLog) follow(r io.ReadCloser, log *slog.Logger) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		l.mu.Lock()
		if !l.running && l.buf.Len() < 8<<10 {
			l.buf.WriteString(line)
			l.buf.WriteByte('\n')
		}
		l.mu.Unlock()
		log.Info("sandbox stderr", "line", line)
	}
}

func (l *startupLog) started() {
	l.mu.Lock()
	l.running = true
	l.mu.Unlock()
}

func (l *startupLog) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.TrimSpace(l.buf.String())
}

// Get returns a live sandbox, with its network usage so far.
func (p *Provider) Get(ctx context.Context, id string) (providers.Sandbox, error) {
	s, sb, err := p.live("get", id)
	if err != nil {
		return providers.Sandbox{}, err
	}
	pub := sb.rec.public()
	pub.Network = p.networkUsage(s, id)
	return pub, nil
}

// List returns the live sandboxes matching the filter; it cleans up after
// dead ones on the way.
func (p *Provider) List(ctx context.Context, f providers.ListFilter) ([]providers.Sandbox, error) {
	recs, err := p.scanRecords()
	if err != nil {
		return nil, providers.Wrap(providers.CodeOf(err), "list", err)
	}
	var out []providers.Sandbox
	for _, rec := range recs {
		if rec.InitPID == 0 {
			continue // being started
		}
		if !rec.alive() {
			p.cleanup(rec)
			continue
		}
		if f.Name != "" && rec.Name != f.Name || !hasLabels(rec.Labels, f.Labels) {
			continue
		}
		out = append(out, rec.public())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

// Terminate kills the sandbox's pid 1, which ends every process in it, and
// removes its private directories. Unknown ids succeed.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	s, err := p.ready()
	if err != nil {
		return err
	}
	sb, ok := p.lookup(s, id)
	if !ok {
		return nil
	}
	if sb.rec.InitPID == 0 && sb.rec.starting() {
		return providers.Errorf(providers.Unavailable, "terminate", "sandbox %s is still being created", id)
	}
	p.kill(ctx, sb)
	p.cleanup(sb.rec)
	p.log.Info("sandbox terminated", "sandbox_id", id)
	return nil
}

// kill ends the sandbox's processes and waits until they are gone.
func (p *Provider) kill(ctx context.Context, sb *sandbox) {
	rec := sb.rec
	if processAlive(rec.InitPID, rec.InitStart) {
		_ = unix.Kill(rec.InitPID, unix.SIGKILL)
	}
	if sb.exited != nil {
		select {
		case <-sb.exited:
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			p.log.Warn("bwrap did not exit after its sandbox was killed", "sandbox_id", rec.ID, "pid", rec.BwrapPID)
		}
		return
	}
	// Started by another process: poll. The pid namespace is gone once its
	// pid 1, the agent, is, and bwrap follows it.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil &&
		(processAlive(rec.InitPID, rec.InitStart) || processAlive(rec.BwrapPID, rec.BwrapStart)) {
		time.Sleep(5 * time.Millisecond)
	}
}

// cleanup removes what a dead sandbox leaves: its cgroups, its directory
// with its socket, and its record (last, so an interrupted cleanup is
// redone).
func (p *Provider) cleanup(rec sandboxRecord) {
	s, err := p.ready()
	if err != nil {
		return
	}
	p.cacheMu.Lock()
	sb := p.cache[rec.ID]
	p.cacheMu.Unlock()
	if sb != nil && sb.exited != nil {
		// bwrap follows its pid 1 within moments; reap it before the
		// sandbox counts as gone.
		select {
		case <-sb.exited:
		case <-time.After(5 * time.Second):
		}
	}
	p.forget(rec.ID)
	p.stopEgress(s, rec.ID)
	p.stopPorts(rec.ID)
	if err := rec.Cgroup.remove(); err != nil {
		p.log.Warn("removing the sandbox's cgroups", "sandbox_id", rec.ID, "err", err)
		return
	}
	if err := removeAll(s.sandboxDir(rec.ID)); err != nil {
		p.log.Warn("removing sandbox directory", "sandbox_id", rec.ID, "err", err)
		return
	}
	if err := os.Remove(s.recordPath(rec.ID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		p.log.Warn("removing sandbox record", "sandbox_id", rec.ID, "err", err)
	}
	// The last user of a deleted snapshot frees its tree.
	if rec.Snapshot != "" {
		if m, err := readSnapshotMeta(s, rec.Snapshot); err != nil || m.ID != rec.SnapshotID {
			p.collectTrees(s)
		}
	}
}

// listenUnix and dialUnix reach a socket through a directory descriptor
// when its path is longer than a sockaddr_un holds (108 bytes), as a deep
// state_dir makes it.
func listenUnix(path string) (*net.UnixListener, error) {
	var ln *net.UnixListener
	err := viaShortPath(path, func(p string) error {
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
		if err == nil {
			// The socket file must outlive this listener: the agent keeps a
			// copy of the descriptor and plugin restarts dial the path.
			l.SetUnlinkOnClose(false)
			ln = l
		}
		return err
	})
	return ln, err
}

func dialUnix(ctx context.Context, path string) (net.Conn, error) {
	var conn net.Conn
	err := viaShortPath(path, func(p string) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", p)
		conn = c
		return err
	})
	return conn, err
}

func viaShortPath(path string, f func(string) error) error {
	if len(path) < 100 {
		return f(path)
	}
	dfd, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	return f(fmt.Sprintf("/proc/self/fd/%d/%s", dfd, filepath.Base(path)))
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
