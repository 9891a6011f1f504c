// Package deno is the sandbox provider for Deno Sandbox
// (shared/contracts/deno-sandbox-api.md). It runs as the plugin
// sandstep-provider-deno.
//
// Deno has two planes: the console REST API (volumes, snapshots, listing
// sandboxes) and a regional API where each sandbox is a WebSocket speaking
// JSON-RPC (spawn, streams, files) plus REST for kill and extend. The
// provider maps the interface onto them:
//
//   - Create opens the create socket with the config header. Sandboxes get
//     a duration (stop_at_ms), never "session" mode, so that the socket can
//     drop and any later process, such as the next Lambda invocation,
//     reconnects by id. Deno's cap is 30 minutes a time: a call into a
//     sandbox whose asked-for lifetime goes further extends it as the end
//     nears. Deno runs 5 sandboxes per organisation and attaches a volume to
//     one sandbox at a time: a create refused for either waits and retries
//     within create_timeout (the old sandbox's volume detaches a moment
//     after its kill).
//   - Snapshots are Deno's: a bootable volume from builtin:debian-13, the
//     setup run in a sandbox booted from it, the sandbox killed, the volume
//     snapshotted once detached, and the snapshot polled until bootable.
//     The slug is the snapshot's; the build volume's is derived from it.
//   - Volumes are Deno's; a Mount is a config volume at its path.
//   - A Secret with hosts is a Deno secret: the sandbox sees a placeholder
//     that Deno's egress swaps for the value in requests to those hosts.
//
// Deno keeps no labels on volumes and snapshots: their labels live in this
// process only (the host's ledger knows what it made). Sandbox labels are
// Deno's own (at most 5), the name one of them.
package deno

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandstep/sandstep/internal/service/version"
	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/plugin"
)

// LabelName carries a sandbox's name among Deno's labels.
const LabelName = "sandstep.name"

// maxStop is the longest Deno lets a sandbox live before it is extended.
const maxStop = 30 * time.Minute

// sandboxIDRE is the SDK's SANDBOX_ID_REGEXP: what Deno's ids look like,
// and all that can be put in a URL path.
var sandboxIDRE = regexp.MustCompile(`^sbx_([a-z]{3})_[0-9a-hjkmnp-z]{20}$`)

// Provider is the Deno provider. It is safe for concurrent use.
type Provider struct {
	// Deno keeps no labels on snapshots (nor metadata of any kind), so
	// no process but the one that built a snapshot could tell whose it is:
	// the host never collects Deno's old dependency snapshots.
	providers.UnsupportedListSnapshots

	log *slog.Logger
	hc  *http.Client

	// now is the clock that decides when a sandbox is extended.
	now func() time.Time
	// buildStale is how long a snapshot's build volume may be without a
	// builder sandbox before its build counts as abandoned.
	buildStale time.Duration

	mu       sync.Mutex
	cfg      *configured
	conns    map[string]*rpcConn
	records  map[string]*record
	naming   map[string]*nameLock // names being created
	names    map[string]string    // Deno slug -> ours, where they differ
	volumes  map[string]map[string]string
	snaps    map[string]map[string]string
	building map[string]*flight
	// detaching holds the volumes of sandboxes this process killed, until
	// when Deno may still hold them attached (it detaches a moment after
	// the kill).
	detaching map[string]time.Time
}

type configured struct {
	s        Settings
	defaults providers.SandboxDefaults
	c        *client
}

// record is what this process knows of a sandbox that Deno does not say.
type record struct {
	until     time.Time // the lifetime asked for
	stopAt    time.Time // Deno's current end
	snapshot  string
	mounts    []providers.Mount
	createdAt time.Time
	// ports are the exposed ports' public URLs. Deno does not list them,
	// so only this process knows them: a Get elsewhere answers none.
	ports map[int]string
}

type flight struct {
	done chan struct{}
	snap providers.Snapshot
	err  error
}

var _ providers.Provider = (*Provider)(nil)

// New returns an unconfigured provider.
func New() *Provider {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil // the plugin must not pick up a proxy by accident
	t.MaxIdleConnsPerHost = 32
	return &Provider{
		log:       plugin.Logger("provider", "deno"),
		now:       time.Now,
		hc:        &http.Client{Transport: t},
		conns:     map[string]*rpcConn{},
		records:   map[string]*record{},
		naming:    map[string]*nameLock{},
		names:     map[string]string{},
		volumes:   map[string]map[string]string{},
		snaps:     map[string]map[string]string{},
		building:  map[string]*flight{},
		detaching: map[string]time.Time{},
	}
}

// Configure decodes the settings and takes the token from the secret
// "token" (token_env). It does not call Deno.
func (p *Provider) Configure(_ context.Context, cfg providers.Config) error {
	const op = "configure"
	s, err := ParseSettings(cfg.Settings)
	if err != nil {
		return providers.Wrap(providers.InvalidArgument, op, err)
	}
	token := cfg.Secrets["token"]
	var e providers.SettingsError
	switch {
	case token == "":
		e.Add("token_env", "the token is missing: name the environment variable that holds it (token_env = \"DENO_DEPLOY_TOKEN\") and set that variable")
	case !strings.HasPrefix(token, "ddo_") && s.Org == "":
		e.Add("org", "required with a personal token (one not starting with ddo_): the organisation's slug")
	}
	if err := e.Err(); err != nil {
		return providers.Wrap(providers.InvalidArgument, op, err)
	}
	c := &client{console: s.ConsoleURL, sandbox: s.sandboxOrigin(), token: token, org: s.Org, hc: p.hc, timeout: s.RequestTimeout.D()}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cfg = &configured{s: s, defaults: cfg.Defaults, c: c}
	return nil
}

// Info describes the provider.
func (p *Provider) Info(context.Context) (providers.Info, error) {
	return providers.Info{
		Name:       "deno",
		Version:    version.Version,
		APIVersion: providers.APIVersion,
		Capabilities: providers.Capabilities{
			Snapshots:         true,
			Volumes:           true,
			NamedSandboxes:    true,
			ListByLabels:      true,
			ExecStreaming:     true,
			FileAPI:           true,
			HostScopedSecrets: true,
			// Exposed ports get Deno's own URL (exposeHttp), which has
			// no auth in front of it.
			PublicURL:    true,
			NetworkModes: []providers.NetworkMode{providers.NetworkNone, providers.NetworkAll, providers.NetworkAllowlist},
			Regions:      slices.Clone(regions),
		},
	}, nil
}

func (p *Provider) settings(op string) (*configured, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cfg == nil {
		return nil, providers.Errorf(providers.FailedPrecondition, op, "the provider is not configured")
	}
	return p.cfg, nil
}

// sandboxConfig is the x-deno-sandbox-config header.
type sandboxConfig struct {
	StopAtMs int64                   `json:"stop_at_ms,omitempty"` // 0: session mode
	MemoryMB int                     `json:"memory_mb"`
	Labels   map[string]string       `json:"labels,omitempty"`
	Root     *volumeRef              `json:"root,omitempty"`
	Volumes  []mountRef              `json:"volumes"`
	AllowNet []string                `json:"allow_net,omitempty"`
	Secrets  map[string]secretConfig `json:"secrets,omitempty"`
	// denyAll sends allow_net: [] (omitempty would drop it).
	denyAll bool
}

type volumeRef struct {
	Volume string `json:"volume"`
}

type mountRef struct {
	Volume string `json:"volume"`
	Path   string `json:"path"`
}

type secretConfig struct {
	Hosts []string `json:"hosts"`
	Value string   `json:"value"`
}

func (c sandboxConfig) encode() ([]byte, error) {
	type plain sandboxConfig
	b, err := json.Marshal(plain(c))
	if err != nil || !c.denyAll {
		return b, err
	}
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	m["allow_net"] = []string{}
	return json.Marshal(m)
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Create starts a sandbox and returns once it runs commands.
func (p *Provider) Create(ctx context.Context, spec providers.CreateSpec) (providers.Sandbox, error) {
	const op = "create"
	cfg, err := p.settings(op)
	if err != nil {
		return providers.Sandbox{}, err
	}
	sc, env, rec, err := p.configFor(ctx, cfg, spec)
	if err != nil {
		return providers.Sandbox{}, err
	}
	if spec.Name != "" {
		unlock := p.lockName(spec.Name)
		defer unlock()
		live, err := p.list(ctx, cfg, op, map[string]string{LabelName: spec.Name})
		if err != nil {
			return providers.Sandbox{}, err
		}
		if len(live) > 0 {
			return providers.Sandbox{}, providers.Errorf(providers.AlreadyExists, op, "sandbox %s already has the name %q", live[0].ID, spec.Name)
		}
	}
	rc, err := p.openCreate(ctx, cfg, sc)
	if err != nil {
		return providers.Sandbox{}, err
	}
	if err := p.prepare(ctx, cfg, rc, env, spec.Snapshot != ""); err != nil {
		rc.close()
		p.abandon(ctx, cfg, rc.id)
		return providers.Sandbox{}, err
	}
	rec.stopAt = time.UnixMilli(sc.StopAtMs)
	if err := p.keepRecord(ctx, cfg, rc, rec); err != nil {
		rc.close()
		p.abandon(ctx, cfg, rc.id)
		return providers.Sandbox{}, err
	}
	p.mu.Lock()
	p.prune(time.Now())
	p.conns[rc.id] = rc
	p.records[rc.id] = rec
	p.mu.Unlock()
	ports, err := p.exposeAll(ctx, rc.id, spec.ExposePorts)
	if err != nil {
		// A sandbox without the ports it was asked for is not the one
		// asked for: end it rather than leave it running.
		p.abandon(ctx, cfg, rc.id)
		return providers.Sandbox{}, err
	}
	p.log.Info("sandbox created", "id", rc.id, "snapshot", spec.Snapshot, "mounts", len(spec.Mounts), "ports", len(ports), "expires", rec.until)
	return providers.Sandbox{
		ID: rc.id, Name: spec.Name, Labels: sc.Labels, State: providers.StateRunning, Snapshot: spec.Snapshot,
		Mounts: rec.mounts, CreatedAt: rec.createdAt, ExpiresAt: rec.until, PortURLs: ports,
	}, nil
}

// configFor turns a spec into Deno's config, the environment to set once
// connected, and the record to keep.
func (p *Provider) configFor(ctx context.Context, cfg *configured, spec providers.CreateSpec) (sandboxConfig, map[string]string, *record, error) {
	const op = "create"
	bad := func(format string, args ...any) (sandboxConfig, map[string]string, *record, error) {
		return sandboxConfig{}, nil, nil, providers.Errorf(providers.InvalidArgument, op, format, args...)
	}
	if spec.Region != "" && spec.Region != cfg.s.Region {
		return bad("region %q: this provider is configured for %q (volumes and snapshots exist only in \"ord\")", spec.Region, cfg.s.Region)
	}
	sc := sandboxConfig{Volumes: []mountRef{}}
	network := spec.Network
	if network.Mode == "" {
		network = cfg.defaults.Network
	}
	switch network.Mode {
	case "", providers.NetworkAll:
	case providers.NetworkNone:
		sc.denyAll = true
	case providers.NetworkAllowlist:
		if len(network.AllowHosts) == 0 {
			return bad("an allowlist needs at least one host")
		}
		sc.AllowNet = slices.Clone(network.AllowHosts)
	default:
		return bad("unknown network mode %q", network.Mode)
	}
	lifetime := spec.Lifetime
	if lifetime <= 0 {
		lifetime = cfg.defaults.Lifetime
	}
	if lifetime <= 0 {
		lifetime = maxStop
	}
	now := time.Now()
	sc.StopAtMs = now.Add(min(lifetime, maxStop)).UnixMilli()
	mem := spec.Resources.MemoryMB
	if mem == 0 {
		mem = cfg.defaults.MemoryMB
	}
	if mem == 0 {
		mem = cfg.s.MemoryMB
	}
	if mem > 4096 {
		return bad("memory %d MiB is more than Deno's 4096", mem)
	}
	// Deno's smallest sandbox has 768 MiB: asking for less gets that.
	sc.MemoryMB = max(mem, 768)
	labels := maps.Clone(spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	if spec.Name != "" {
		labels[LabelName] = spec.Name
	}
	if len(labels) > 5 {
		return bad("Deno keeps at most 5 labels on a sandbox, the name among them; this one has %d", len(labels))
	}
	for k, v := range labels {
		if k == "" || len(k) > 64 || len(v) > 128 {
			return bad("label %q: Deno takes keys of 1 to 64 bytes and values of at most 128", k)
		}
	}
	if len(labels) > 0 {
		sc.Labels = labels
	}
	env := maps.Clone(spec.Env)
	if env == nil {
		env = map[string]string{}
	}
	for _, s := range spec.Secrets {
		if !envNameRE.MatchString(s.Name) {
			return bad("secret name %q cannot be an environment variable", s.Name)
		}
		if len(s.Hosts) == 0 {
			env[s.Name] = s.Value
			continue
		}
		if sc.Secrets == nil {
			sc.Secrets = map[string]secretConfig{}
		}
		sc.Secrets[s.Name] = secretConfig{Hosts: slices.Clone(s.Hosts), Value: s.Value}
		delete(env, s.Name)
	}
	for k := range env {
		if !envNameRE.MatchString(k) {
			return bad("%q cannot be an environment variable name", k)
		}
	}
	seen := map[int]bool{}
	for _, port := range spec.ExposePorts {
		if port < 1 || port > 65535 || seen[port] {
			return bad("expose port %d: ports are from 1 to 65535, each once", port)
		}
		seen[port] = true
	}
	rec := &record{until: now.Add(lifetime), snapshot: spec.Snapshot, createdAt: now}
	if spec.Snapshot != "" {
		if err := p.checkSnapshot(ctx, cfg, spec.Snapshot); err != nil {
			return sandboxConfig{}, nil, nil, err
		}
		sc.Root = &volumeRef{Volume: denoSlug(spec.Snapshot)}
	}
	for _, m := range spec.Mounts {
		if m.Path == "" {
			m.Path = "/workspace"
		}
		if m.ReadOnly {
			return sandboxConfig{}, nil, nil, providers.Errorf(providers.Unsupported, op, "Deno mounts volumes read-write only (volume %q)", m.Volume)
		}
		if !strings.HasPrefix(m.Path, "/") || cleanPath(m.Path) != m.Path {
			return bad("mount path %q must be absolute and clean", m.Path)
		}
		sc.Volumes = append(sc.Volumes, mountRef{Volume: denoSlug(m.Volume), Path: m.Path})
		rec.mounts = append(rec.mounts, m)
	}
	return sc, env, rec, nil
}

// openCreate opens the create socket, waiting out Deno's refusals that
// pass: the organisation's sandbox limit (429) and a volume still attached
// to a sandbox that was just killed (409).
func (p *Provider) openCreate(ctx context.Context, cfg *configured, sc sandboxConfig) (*rpcConn, error) {
	const op = "create"
	body, err := sc.encode()
	if err != nil {
		return nil, providers.Wrap(providers.Internal, op, err)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.s.CreateTimeout.D())
	defer cancel()
	delay := 200 * time.Millisecond
	for {
		rc, err := dial(ctx, cfg.c, op, cfg.c.sandbox+"/api/v3/sandboxes/create", body)
		if err == nil {
			return rc, nil
		}
		switch {
		case isStatus(err, http.StatusTooManyRequests), isStatus(err, http.StatusConflict), providers.CodeOf(err) == providers.Unavailable:
		default:
			return nil, err
		}
		p.log.Debug("create refused for now; retrying", "error", err.Error())
		select {
		case <-ctx.Done():
			return nil, providers.Wrap(codeOfWait(err), op, fmt.Errorf("gave up after create_timeout %s: %w", cfg.s.CreateTimeout, err))
		case <-time.After(delay):
		}
		delay = min(delay*2, 3*time.Second)
	}
}

// codeOfWait is the code of a create that waited in vain.
func codeOfWait(err error) providers.Code {
	if isStatus(err, http.StatusConflict) {
		return providers.FailedPrecondition
	}
	return providers.ResourceExhausted
}

// prepare makes /workspace and sets the environment, as the SDK sets env
// after the socket opens; a snapshot's own environment comes from the file
// its build left, under the spec's.
func (p *Provider) prepare(ctx context.Context, cfg *configured, rc *rpcConn, env map[string]string, fromSnapshot bool) error {
	const op = "create"
	ctx, cancel := context.WithTimeout(ctx, cfg.s.RequestTimeout.D())
	defer cancel()
	if fromSnapshot {
		var text string
		if err := rc.call(ctx, op, "readTextFile", map[string]string{"path": envFile}, &text); err != nil && !providers.IsNotFound(err) {
			return err
		}
		var meta struct {
			Env map[string]string `json:"env"`
		}
		if text != "" {
			if err := json.Unmarshal([]byte(text), &meta); err != nil {
				return providers.Wrap(providers.Internal, op, fmt.Errorf("the snapshot's %s: %w", envFile, err))
			}
		}
		for k, v := range meta.Env {
			if _, set := env[k]; !set {
				env[k] = v
			}
		}
	}
	err := rc.call(ctx, op, "mkdir", map[string]any{"path": "/workspace", "options": map[string]any{"recursive": true}}, nil)
	if providers.CodeOf(err) == providers.PermissionDenied {
		// On Deno's VM / belongs to root; the user app has sudo.
		var res execResult
		res, err = p.run(ctx, rc, op, []string{"sh", "-c", `sudo mkdir -p /workspace && sudo chown "$(id -u):$(id -g)" /workspace`}, "/", nil, nil, nil, nil, cfg.s.RequestTimeout.D())
		if err == nil && res.ExitCode != 0 {
			err = providers.Errorf(providers.Unavailable, op, "making /workspace failed with exit %d", res.ExitCode)
		}
	}
	if err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if err := rc.call(ctx, op, "envSet", map[string]string{"key": k, "value": env[k]}, nil); err != nil {
			return err
		}
	}
	return nil
}

// abandon kills a sandbox Create will not hand out.
func (p *Provider) abandon(ctx context.Context, cfg *configured, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := p.kill(ctx, cfg, id); err != nil {
		p.log.Warn("killing a sandbox that never became ready failed; Deno stops it at its stop_at_ms", "id", id, "error", err)
	}
}

// lockName serialises creates of one name in this process; the lock goes
// once nobody holds or waits for it.
func (p *Provider) lockName(name string) func() {
	p.mu.Lock()
	m := p.naming[name]
	if m == nil {
		m = &nameLock{}
		p.naming[name] = m
	}
	m.users++
	p.mu.Unlock()
	m.Lock()
	return func() {
		m.Unlock()
		p.mu.Lock()
		if m.users--; m.users == 0 {
			delete(p.naming, name)
		}
		p.mu.Unlock()
	}
}

type nameLock struct {
	sync.Mutex
	users int // p.mu guards it
}

// prune forgets sandboxes past their asked-for end and sockets that
// closed; p.mu is held.
func (p *Provider) prune(now time.Time) {
	for id, r := range p.records {
		if now.Sub(r.until) > time.Hour {
			delete(p.records, id)
		}
	}
	for id, rc := range p.conns {
		if !rc.alive() {
			delete(p.conns, id)
		}
	}
	for v, until := range p.detaching {
		if now.After(until) {
			delete(p.detaching, v)
		}
	}
}
