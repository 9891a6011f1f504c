// Package providertest is an in-memory providers.Provider for tests of code
// that uses providers: sandboxes are records, files are byte slices, and
// Exec runs a few built-in commands (or ones a test registers) instead of
// programs. It passes the conformance suite's core cases, through the
// plugin boundary too (see providers/plugin/plugintest), so code tested
// against it sees what a real provider would answer.
//
// Every call is recorded (Calls, Count), and any method can be made to
// fail (Fail, FailOnce), so a test can check what its code asked for and
// how it copes with each error code.
//
// Built-in commands (argv[0], or the first word of a shell line):
//
//	true, false       exit 0, exit 1
//	echo ARGS...      prints ARGS joined by spaces and a newline
//	cat               copies stdin to stdout as it arrives
//	stderr ARGS...    prints ARGS to stderr
//	exit N            exits with status N
//	oom               ends as a command killed for memory
//	environ           prints the provider process's environment, one per line
//	secret NAME       prints the Configure secret NAME
//	pid               prints the provider process's id
//	log ARGS...       logs ARGS with slog's default logger
//	block             prints "started", then waits for the exec's timeout
//	                  (reported as timed out) or its cancellation
//	wait-cancelled    blocks until a block command has seen its
//	                  cancellation, then prints "cancelled"
//
// Anything else exits 127 with "command not found" unless Command
// registered it.
//
// Settings (JSON): {"name": "...", "fail": {"Method": "Code"}} where Method
// is an interface method name and Code a providers.Code name, or "plain"
// for an error without a code: failures for a provider that runs as a
// plugin subprocess, where a test cannot call Fail.
package providertest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/plugin"
)

// Settings is the provider's configuration.
type Settings struct {
	Name string            `json:"name"`
	Fail map[string]string `json:"fail"`
}

// Call is one recorded call: the method's name and what it was about (a
// sandbox id, a name for Create, a slug, a path after the id, or "").
type Call struct {
	Method string
	Target string
}

// CommandFunc runs a command a test registered with Command. argv is the
// request's Argv, or its Shell line split into words; output goes to
// req.Stdout and req.Stderr (never nil here).
type CommandFunc func(ctx context.Context, sandboxID string, argv []string, req providers.ExecRequest) (providers.ExecResult, error)

// Provider is the in-memory provider. The zero value is not usable; call New.
type Provider struct {
	// log is made in New, before plugin.Serve sets up logging, as a real
	// provider's is.
	log       *slog.Logger
	mu        sync.Mutex
	caps      providers.Capabilities
	calls     []Call
	injected  map[string]injection
	commands  map[string]CommandFunc
	settings  Settings
	secrets   map[string]string
	defaults  providers.SandboxDefaults
	nextID    int
	sandboxes map[string]*sandbox
	snapshots map[string]providers.Snapshot
	volumes   map[string]providers.Volume
	// cancelled is closed when the first block command sees its context end.
	cancelled     chan struct{}
	cancelledOnce sync.Once
}

type sandbox struct {
	info  providers.Sandbox
	files map[string]*file
}

type file struct {
	data    []byte
	mode    uint32
	modTime time.Time
}

var _ providers.Provider = (*Provider)(nil)

// injection is a failure set with Fail or FailOnce.
type injection struct {
	err  error
	once bool
}

// New returns an empty provider named "test" that claims every capability
// (SetCapabilities takes some away).
func New() *Provider {
	return &Provider{
		caps: providers.Capabilities{
			Snapshots:         true,
			Volumes:           true,
			NamedSandboxes:    true,
			ListByLabels:      true,
			ExecStreaming:     true,
			FileAPI:           true,
			HostScopedSecrets: true,
			ListSnapshots:     true,
			NetworkModes:      []providers.NetworkMode{providers.NetworkNone, providers.NetworkAll, providers.NetworkAllowlist},
			MaxLifetime:       time.Hour,
			Regions:           []string{"local"},
			Limits:            providers.Limits{Cgroups: "v1", Volumes: "ext4-image", Enforced: []string{providers.LimitMemory}},
		},
		injected:  map[string]injection{},
		commands:  map[string]CommandFunc{},
		log:       plugin.Logger("provider", "test"),
		settings:  Settings{Name: "test"},
		sandboxes: map[string]*sandbox{},
		snapshots: map[string]providers.Snapshot{},
		volumes:   map[string]providers.Volume{},
		cancelled: make(chan struct{}),
	}
}

var codesByName = func() map[string]providers.Code {
	m := map[string]providers.Code{}
	for c := providers.Unknown; c <= providers.Internal; c++ {
		m[c.String()] = c
	}
	return m
}()

// SetCapabilities replaces what Info claims. Create refuses network modes
// and lifetimes beyond them, as a real provider would.
func (p *Provider) SetCapabilities(c providers.Capabilities) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.caps = c
}

// Fail makes every call of method (an interface method name, such as
// "Create") return err until Fail(method, nil) clears it.
func (p *Provider) Fail(method string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		delete(p.injected, method)
		return
	}
	p.injected[method] = injection{err: err}
}

// FailOnce makes the next call of method return err.
func (p *Provider) FailOnce(method string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.injected[method] = injection{err: err, once: true}
}

// Command registers fn as the command name, ahead of a built-in one.
func (p *Provider) Command(name string, fn CommandFunc) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.commands[name] = fn
}

// Calls returns every call so far, in order.
func (p *Provider) Calls() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// Count returns how many times method was called.
func (p *Provider) Count(method string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.calls {
		if c.Method == method {
			n++
		}
	}
	return n
}

// enter records a call and returns the failure injected for it, if any.
func (p *Provider) enter(method, target string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, Call{Method: method, Target: target})
	if in, ok := p.injected[method]; ok {
		if in.once {
			delete(p.injected, method)
		}
		return in.err
	}
	name, ok := p.settings.Fail[method]
	if !ok {
		return nil
	}
	if name == "plain" {
		return fmt.Errorf("injected plain failure in %s", method)
	}
	return providers.Errorf(codesByName[name], strings.ToLower(method), "injected %s failure", name)
}

func (p *Provider) Configure(ctx context.Context, cfg providers.Config) error {
	if err := p.enter("Configure", ""); err != nil {
		return err
	}
	s := Settings{Name: "test"}
	if err := providers.DecodeSettings(cfg.Settings, &s); err != nil {
		return providers.Wrap(providers.InvalidArgument, "configure", err)
	}
	var bad providers.SettingsError
	for _, m := range slices.Sorted(maps.Keys(s.Fail)) {
		if _, ok := codesByName[s.Fail[m]]; !ok && s.Fail[m] != "plain" {
			bad.Add("fail."+m, "unknown code %q", s.Fail[m])
		}
	}
	if err := bad.Err(); err != nil {
		return providers.Wrap(providers.InvalidArgument, "configure", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.settings, p.secrets, p.defaults = s, cfg.Secrets, cfg.Defaults
	p.log.Info("configured", "name", s.Name, "took", 1500*time.Microsecond)
	return nil
}

func (p *Provider) Info(ctx context.Context) (providers.Info, error) {
	if err := p.enter("Info", ""); err != nil {
		return providers.Info{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return providers.Info{Name: p.settings.Name, Version: "0.0.0-test", APIVersion: providers.APIVersion, Capabilities: p.caps}, nil
}

func (p *Provider) Create(ctx context.Context, spec providers.CreateSpec) (providers.Sandbox, error) {
	if err := p.enter("Create", spec.Name); err != nil {
		return providers.Sandbox{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch mode := spec.Network.Mode; {
	case mode != "" && mode != providers.NetworkNone && mode != providers.NetworkAll && mode != providers.NetworkAllowlist:
		return providers.Sandbox{}, providers.Errorf(providers.InvalidArgument, "create", "unknown network mode %q", mode)
	case mode != "" && !p.caps.Supports(mode):
		return providers.Sandbox{}, providers.Errorf(providers.Unsupported, "create", "network mode %q is not supported", mode)
	}
	if m := p.caps.MaxLifetime; m > 0 && spec.Lifetime > m {
		return providers.Sandbox{}, providers.Errorf(providers.InvalidArgument, "create", "lifetime %s is above the maximum %s", spec.Lifetime, m)
	}
	if spec.Name != "" {
		for _, sb := range p.sandboxes {
			if sb.info.Name == spec.Name {
				return providers.Sandbox{}, providers.Errorf(providers.AlreadyExists, "create", "a sandbox named %q exists: %s", spec.Name, sb.info.ID)
			}
		}
	}
	if _, ok := p.snapshots[spec.Snapshot]; spec.Snapshot != "" && !ok {
		return providers.Sandbox{}, providers.Errorf(providers.NotFound, "create", "snapshot %q not found", spec.Snapshot)
	}
	for _, m := range spec.Mounts {
		if _, ok := p.volumes[m.Volume]; !ok {
			return providers.Sandbox{}, providers.Errorf(providers.NotFound, "create", "volume %q not found", m.Volume)
		}
	}
	p.nextID++
	now := time.Now()
	lifetime := spec.Lifetime
	if lifetime == 0 {
		lifetime = p.defaults.Lifetime
	}
	info := providers.Sandbox{
		ID:        "sb-" + strconv.Itoa(p.nextID),
		Name:      spec.Name,
		Labels:    maps.Clone(spec.Labels),
		State:     providers.StateRunning,
		Snapshot:  spec.Snapshot,
		Mounts:    slices.Clone(spec.Mounts),
		CreatedAt: now,
		// No network here: the usage echoes the defaults' allow_private
		// and the spec's secrets, so that a round trip sees both arrive.
		Network: providers.NetworkUsage{Hosts: slices.Clone(p.defaults.AllowPrivate), Denied: int64(len(spec.Secrets)), BytesOut: 1 << 40},
	}
	if lifetime > 0 {
		info.ExpiresAt = now.Add(lifetime)
	}
	p.sandboxes[info.ID] = &sandbox{info: info, files: map[string]*file{}}
	return info, nil
}

// sandbox returns a live sandbox; p.mu must be held.
func (p *Provider) sandbox(op, id string) (*sandbox, error) {
	sb, ok := p.sandboxes[id]
	if !ok {
		return nil, providers.Errorf(providers.NotFound, op, "sandbox %q not found", id)
	}
	return sb, nil
}

func (p *Provider) Get(ctx context.Context, id string) (providers.Sandbox, error) {
	if err := p.enter("Get", id); err != nil {
		return providers.Sandbox{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	sb, err := p.sandbox("get", id)
	if err != nil {
		return providers.Sandbox{}, err
	}
	return sb.info, nil
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

func (p *Provider) List(ctx context.Context, f providers.ListFilter) ([]providers.Sandbox, error) {
	if err := p.enter("List", f.Name); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []providers.Sandbox
	for _, sb := range p.sandboxes {
		if hasLabels(sb.info.Labels, f.Labels) && (f.Name == "" || f.Name == sb.info.Name) {
			out = append(out, sb.info)
		}
	}
	slices.SortFunc(out, func(a, b providers.Sandbox) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func (p *Provider) Terminate(ctx context.Context, id string) error {
	if err := p.enter("Terminate", id); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.sandboxes, id)
	return nil
}

func (p *Provider) Exec(ctx context.Context, id string, req providers.ExecRequest) (providers.ExecResult, error) {
	if err := p.enter("Exec", id); err != nil {
		return providers.ExecResult{}, err
	}
	argv := req.Argv
	if req.Shell != "" {
		argv = strings.Fields(req.Shell)
	}
	if len(argv) == 0 {
		return providers.ExecResult{}, providers.Errorf(providers.InvalidArgument, "exec", "no command")
	}
	p.mu.Lock()
	_, err := p.sandbox("exec", id)
	timeout := req.Timeout
	if timeout == 0 {
		timeout = p.defaults.ExecTimeout
	}
	secrets := p.secrets
	command := p.commands[argv[0]]
	p.mu.Unlock()
	if err != nil {
		return providers.ExecResult{}, err
	}
	if timeout == 0 {
		timeout = time.Minute
	}
	stdout, stderr := orDiscard(req.Stdout), orDiscard(req.Stderr)
	start := time.Now()
	if command != nil {
		req.Stdout, req.Stderr = stdout, stderr
		return command(ctx, id, argv, req)
	}
	res := providers.ExecResult{}
	switch argv[0] {
	case "true":
	case "false":
		res.ExitCode = 1
	case "echo":
		_, err = fmt.Fprintln(stdout, strings.Join(argv[1:], " "))
	case "stderr":
		_, err = fmt.Fprintln(stderr, strings.Join(argv[1:], " "))
	case "cat":
		if req.Stdin != nil {
			_, err = io.Copy(stdout, req.Stdin)
		}
	case "exit":
		if len(argv) > 1 {
			res.ExitCode, err = strconv.Atoi(argv[1])
		}
	case "environ":
		_, err = fmt.Fprintln(stdout, strings.Join(os.Environ(), "\n"))
	case "secret":
		if len(argv) > 1 {
			_, err = fmt.Fprintln(stdout, secrets[argv[1]])
		}
	case "pid":
		_, err = fmt.Fprintln(stdout, os.Getpid())
	case "oom":
		res = providers.ExecResult{ExitCode: 137, Signal: "SIGKILL", OOM: true}
	case "log":
		slog.Info(strings.Join(argv[1:], " "), "sandbox", id)
	case "block":
		if _, err = fmt.Fprintln(stdout, "started"); err != nil {
			break
		}
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-t.C:
			res = providers.ExecResult{ExitCode: -1, Signal: "SIGKILL", TimedOut: true}
		case <-ctx.Done():
			p.cancelledOnce.Do(func() { close(p.cancelled) })
			return providers.ExecResult{}, providers.Wrap(providers.DeadlineExceeded, "exec", ctx.Err())
		}
	case "wait-cancelled":
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-p.cancelled:
			_, err = fmt.Fprintln(stdout, "cancelled")
		case <-t.C:
			res = providers.ExecResult{ExitCode: -1, Signal: "SIGKILL", TimedOut: true}
		case <-ctx.Done():
			return providers.ExecResult{}, providers.Wrap(providers.DeadlineExceeded, "exec", ctx.Err())
		}
	default:
		res.ExitCode = 127
		_, err = fmt.Fprintf(stderr, "%s: command not found\n", argv[0])
	}
	if err != nil {
		return providers.ExecResult{}, providers.Wrap(providers.Internal, "exec", err)
	}
	res.Duration = time.Since(start)
	return res, nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// checkPath refuses a path that is not absolute or that climbs with "..":
// one that would walk out of place is refused, never resolved.
func checkPath(op, p string) error {
	if !path.IsAbs(p) {
		return providers.Errorf(providers.InvalidArgument, op, "path %q is not absolute", p)
	}
	if slices.Contains(strings.Split(p, "/"), "..") {
		return providers.Errorf(providers.InvalidArgument, op, "path %q climbs with ..", p)
	}
	return nil
}

// checkSlug refuses a slug that could not be a file name.
func checkSlug(op, slug string) error {
	if slug == "" || slug == "." || slug == ".." || strings.ContainsAny(slug, "/\\\x00") {
		return providers.Errorf(providers.InvalidArgument, op, "slug %q is not a name", slug)
	}
	return nil
}

// isDir reports whether dir is "/" or a parent of a file; p.mu must be held.
func isDir(sb *sandbox, dir string) bool {
	if dir == "/" {
		return true
	}
	for name := range sb.files {
		if strings.HasPrefix(name, dir+"/") {
			return true
		}
	}
	return false
}

func (p *Provider) WriteFile(ctx context.Context, id string, f providers.WriteFileRequest) error {
	if err := p.enter("WriteFile", id+" "+f.Path); err != nil {
		return err
	}
	if err := checkPath("write file", f.Path); err != nil {
		return err
	}
	name := path.Clean(f.Path)
	var data []byte
	if f.Content != nil {
		var err error
		// Read whole before storing, so a failed upload leaves no file.
		if data, err = io.ReadAll(f.Content); err != nil {
			return providers.Wrap(providers.Unavailable, "write file", err)
		}
	}
	mode := f.Mode
	if mode == 0 {
		mode = 0o644
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	sb, err := p.sandbox("write file", id)
	if err != nil {
		return err
	}
	if isDir(sb, name) {
		return providers.Errorf(providers.FailedPrecondition, "write file", "%s is a directory", name)
	}
	sb.files[name] = &file{data: data, mode: mode, modTime: time.Now()}
	return nil
}

func (p *Provider) ReadFile(ctx context.Context, id string, f providers.ReadFileRequest, w io.Writer) (int64, error) {
	if err := p.enter("ReadFile", id+" "+f.Path); err != nil {
		return 0, err
	}
	if err := checkPath("read file", f.Path); err != nil {
		return 0, err
	}
	name := path.Clean(f.Path)
	if f.Offset < 0 {
		return 0, providers.Errorf(providers.InvalidArgument, "read file", "negative offset %d", f.Offset)
	}
	p.mu.Lock()
	sb, err := p.sandbox("read file", id)
	var fl *file
	dir := false
	if err == nil {
		fl = sb.files[name]
		dir = isDir(sb, name)
	}
	p.mu.Unlock()
	switch {
	case err != nil:
		return 0, err
	case dir:
		return 0, providers.Errorf(providers.FailedPrecondition, "read file", "%s is a directory", name)
	case fl == nil:
		return 0, providers.Errorf(providers.NotFound, "read file", "%s: no such file", name)
	}
	// Stored data is never modified in place, only replaced, so it can be
	// read without the lock.
	data := fl.data[min(f.Offset, int64(len(fl.data))):]
	if f.Limit > 0 && int64(len(data)) > f.Limit {
		data = data[:f.Limit]
	}
	n, err := io.Copy(w, bytes.NewReader(data))
	return n, err
}

func (p *Provider) ListFiles(ctx context.Context, id, dir string) ([]providers.FileInfo, error) {
	if err := p.enter("ListFiles", id+" "+dir); err != nil {
		return nil, err
	}
	if err := checkPath("list files", dir); err != nil {
		return nil, err
	}
	dir = path.Clean(dir)
	p.mu.Lock()
	defer p.mu.Unlock()
	sb, err := p.sandbox("list files", id)
	if err != nil {
		return nil, err
	}
	if _, ok := sb.files[dir]; ok {
		return nil, providers.Errorf(providers.FailedPrecondition, "list files", "%s is not a directory", dir)
	}
	if !isDir(sb, dir) {
		return nil, providers.Errorf(providers.NotFound, "list files", "%s: no such directory", dir)
	}
	entries := map[string]providers.FileInfo{}
	prefix := strings.TrimSuffix(dir, "/") + "/"
	for name, fl := range sb.files {
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		if child, _, deeper := strings.Cut(rest, "/"); deeper {
			entries[child] = providers.FileInfo{Name: child, Path: prefix + child, Mode: 0o755, IsDir: true}
		} else {
			entries[rest] = providers.FileInfo{Name: rest, Path: name, Size: int64(len(fl.data)), Mode: fl.mode, ModTime: fl.modTime}
		}
	}
	out := slices.Collect(maps.Values(entries))
	slices.SortFunc(out, func(a, b providers.FileInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (p *Provider) EnsureSnapshot(ctx context.Context, spec providers.SnapshotSpec) (providers.Snapshot, error) {
	if err := p.enter("EnsureSnapshot", spec.Slug); err != nil {
		return providers.Snapshot{}, err
	}
	if err := checkSlug("ensure snapshot", spec.Slug); err != nil {
		return providers.Snapshot{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.snapshots[spec.Slug]; ok {
		return s, nil
	}
	s := providers.Snapshot{Slug: spec.Slug, Labels: maps.Clone(spec.Labels), SizeBytes: int64(len(strings.Join(spec.Setup, ""))), CreatedAt: time.Now()}
	p.snapshots[spec.Slug] = s
	return s, nil
}

func (p *Provider) GetSnapshot(ctx context.Context, slug string) (providers.Snapshot, error) {
	if err := p.enter("GetSnapshot", slug); err != nil {
		return providers.Snapshot{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.snapshots[slug]
	if !ok {
		return providers.Snapshot{}, providers.Errorf(providers.NotFound, "get snapshot", "snapshot %q not found", slug)
	}
	return s, nil
}

func (p *Provider) DeleteSnapshot(ctx context.Context, slug string) error {
	if err := p.enter("DeleteSnapshot", slug); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.snapshots, slug)
	return nil
}

func (p *Provider) ListSnapshots(ctx context.Context, labels map[string]string) ([]providers.Snapshot, error) {
	if err := p.enter("ListSnapshots", ""); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []providers.Snapshot
	for _, s := range p.snapshots {
		if hasLabels(s.Labels, labels) {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b providers.Snapshot) int { return strings.Compare(a.Slug, b.Slug) })
	return out, nil
}

func (p *Provider) CreateVolume(ctx context.Context, spec providers.VolumeSpec) (providers.Volume, error) {
	if err := p.enter("CreateVolume", spec.Slug); err != nil {
		return providers.Volume{}, err
	}
	if err := checkSlug("create volume", spec.Slug); err != nil {
		return providers.Volume{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if v, ok := p.volumes[spec.Slug]; ok {
		return v, nil
	}
	v := providers.Volume{Slug: spec.Slug, Labels: maps.Clone(spec.Labels), CapacityMB: spec.CapacityMB, CreatedAt: time.Now()}
	p.volumes[spec.Slug] = v
	return v, nil
}

func (p *Provider) GetVolume(ctx context.Context, slug string) (providers.Volume, error) {
	if err := p.enter("GetVolume", slug); err != nil {
		return providers.Volume{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.volumes[slug]
	if !ok {
		return providers.Volume{}, providers.Errorf(providers.NotFound, "get volume", "volume %q not found", slug)
	}
	return v, nil
}

func (p *Provider) DeleteVolume(ctx context.Context, slug string) error {
	if err := p.enter("DeleteVolume", slug); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, sb := range p.sandboxes {
		for _, m := range sb.info.Mounts {
			if m.Volume == slug {
				return providers.Errorf(providers.FailedPrecondition, "delete volume", "volume %q is mounted by sandbox %s", slug, sb.info.ID)
			}
		}
	}
	delete(p.volumes, slug)
	return nil
}

func (p *Provider) ListVolumes(ctx context.Context, labels map[string]string) ([]providers.Volume, error) {
	if err := p.enter("ListVolumes", ""); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []providers.Volume
	for _, v := range p.volumes {
		if hasLabels(v.Labels, labels) {
			out = append(out, v)
		}
	}
	slices.SortFunc(out, func(a, b providers.Volume) int { return strings.Compare(a.Slug, b.Slug) })
	return out, nil
}
