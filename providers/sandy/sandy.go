// Package sandy is the sandbox provider for Sandy, a hosted sandbox service
// spoken to over HTTP (shared/contracts/sandy-api.md). It runs as the plugin
// sandstep-provider-sandy.
//
// Sandy offers create, status, a synchronous exec, text file writes, reads
// that may come back truncated, and terminate; no labels, names, snapshots,
// volumes or listing. The provider builds the rest of the interface on
// exec:
//
//   - Exec runs every command in the background inside the sandbox, with
//     its output going to files there, and polls those files by offset.
//     Output thus reaches the caller while the command runs, binary-safe
//     (it travels base64 encoded), and the provider enforces the timeout by
//     killing every process the command started: each carries an
//     environment variable naming the exec, so setsid does not hide it.
//   - Writes of text go through files/write; binary content and large
//     files are staged as base64 text through files/write and decoded into
//     a temporary file by exec, falling back to base64 in exec commands when
//     the staged text does not arrive whole; a rename makes the file appear
//     only once complete.
//   - Reads first learn the file's size by exec, which also brings back a
//     small file or range itself; a large text file is read through
//     files/read and checked against that size, and whatever comes back
//     short or unparsable is read in chunks through exec.
//   - Create waits until the sandbox answers status and runs a command
//     (Firecracker guests take a moment), and writes the sandbox's
//     environment and secrets to a file inside it that every exec sources.
//
// Names and labels exist only in this plugin's memory, so after a restart
// Get returns sandboxes without them; the host's ledger is the truth. Keep
// nothing secret in names or labels.
package sandy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"math"
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

// Provider is the Sandy provider. It is safe for concurrent use.
//
// Sandy has no snapshots, no volumes, and no labels or list of sandboxes
// (the host's ledger knows what exists): those groups are refused.
type Provider struct {
	providers.UnsupportedSnapshots
	providers.UnsupportedVolumes
	providers.UnsupportedList

	log       *slog.Logger
	transport *http.Transport

	mu      sync.Mutex
	cfg     *settings
	records map[string]*record
	gone    map[string]time.Time // sandboxes this process terminated, and when
}

// settings is one successful Configure.
type settings struct {
	s        Settings
	defaults providers.SandboxDefaults
	c        *client
}

// record is what Sandy does not keep for us.
type record struct {
	name      string
	labels    map[string]string
	expiresAt time.Time
	// ports are the asked exposed ports; Sandy's public URL serves only
	// sandyPublicPort of them.
	ports []int
}

// sandyPublicPort is the one port Sandy's public URL proxies (the runtime
// port, sandy-api.md section 10); other ports of CreateSpec.ExposePorts get
// no URL.
const sandyPublicPort = 5173

var _ providers.Provider = (*Provider)(nil)

// New returns an unconfigured provider.
func New() *Provider {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	// The plugin inherits no proxy settings from the host, and must not
	// pick any up by accident.
	t.Proxy = nil
	return &Provider{
		log:       plugin.Logger("provider", "sandy"),
		transport: t,
		records:   make(map[string]*record),
		gone:      make(map[string]time.Time),
	}
}

// Configure decodes the settings (ParseSettings) and takes the API key
// from the secret "api_key". It does not call Sandy.
func (p *Provider) Configure(_ context.Context, cfg providers.Config) error {
	const op = "configure"
	s, err := ParseSettings(cfg.Settings)
	if err != nil {
		return providers.Wrap(providers.InvalidArgument, op, err)
	}
	key := cfg.Secrets["api_key"]
	if key == "" {
		// The host resolves api_key_env into the secret api_key; without
		// either, the problem is the missing key in the table.
		var e providers.SettingsError
		e.Add("api_key_env", "the API key is missing: name the environment variable that holds it (api_key_env = \"SANDY_API_KEY\") and set that variable")
		return providers.Wrap(providers.InvalidArgument, op, &e)
	}
	c := &client{
		base:       s.BaseURL,
		key:        key,
		hc:         &http.Client{Transport: p.transport},
		retries:    s.MaxRetries,
		baseDelay:  s.RetryBaseDelay.D(),
		reqTimeout: s.RequestTimeout.D(),
		log:        p.log,
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cfg = &settings{s: s, defaults: cfg.Defaults, c: c}
	return nil
}

// Info describes the provider. Exec streaming is emulated by polling; the
// public URL proxies Sandy's runtime port 5173 only.
func (p *Provider) Info(context.Context) (providers.Info, error) {
	return providers.Info{
		Name:       "sandy",
		Version:    version.Version,
		APIVersion: providers.APIVersion,
		Capabilities: providers.Capabilities{
			ExecStreaming: true,
			FileAPI:       true,
			PublicURL:     true,
			NetworkModes:  []providers.NetworkMode{providers.NetworkAll},
		},
	}, nil
}

func (p *Provider) settings(op string) (*settings, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cfg == nil {
		return nil, providers.Errorf(providers.FailedPrecondition, op, "the provider is not configured")
	}
	return p.cfg, nil
}

// validID accepts what Sandy's ids look like (12 hex characters, or sb_...)
// and keeps anything that could walk out of place in a URL out.
var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)

func checkID(op, id string) error {
	if !validID.MatchString(id) {
		return providers.Errorf(providers.InvalidArgument, op, "%q is not a Sandy sandbox id", id)
	}
	return nil
}

// sandboxCall prepares a call into a sandbox: configured, a well-formed id,
// and not one this process terminated (Sandy may still show it for a
// while; calls into it would fail anyway).
func (p *Provider) sandboxCall(op, id string) (*settings, error) {
	cfg, err := p.settings(op)
	if err != nil {
		return nil, err
	}
	if err := checkID(op, id); err != nil {
		return nil, err
	}
	p.mu.Lock()
	_, gone := p.gone[id]
	p.mu.Unlock()
	if gone {
		return nil, providers.Errorf(providers.NotFound, op, "sandbox %s was terminated", id)
	}
	return cfg, nil
}

// Create asks Sandy for a sandbox and returns it once it runs commands.
func (p *Provider) Create(ctx context.Context, spec providers.CreateSpec) (providers.Sandbox, error) {
	const op = "create"
	cfg, err := p.settings(op)
	if err != nil {
		return providers.Sandbox{}, err
	}
	network := spec.Network
	if network.Mode == "" {
		network = cfg.defaults.Network
	}
	switch network.Mode {
	case "", providers.NetworkAll:
	case providers.NetworkNone, providers.NetworkAllowlist:
		return providers.Sandbox{}, providers.Errorf(providers.Unsupported, op, "Sandy cannot restrict a sandbox's network (mode %q); only %q is available", network.Mode, providers.NetworkAll)
	default:
		return providers.Sandbox{}, providers.Errorf(providers.InvalidArgument, op, "unknown network mode %q", network.Mode)
	}
	switch {
	case spec.Snapshot != "":
		return providers.Sandbox{}, providers.Errorf(providers.Unsupported, op, "Sandy has no snapshots")
	case len(spec.Mounts) > 0:
		return providers.Sandbox{}, providers.Errorf(providers.Unsupported, op, "Sandy has no volumes")
	}
	envFile, err := sandboxEnv(spec)
	if err != nil {
		return providers.Sandbox{}, providers.Wrap(providers.InvalidArgument, op, err)
	}
	lifetime := spec.Lifetime
	if lifetime <= 0 {
		lifetime = cfg.defaults.Lifetime
	}
	priority := spec.Priority
	if priority == 0 {
		priority = cfg.s.Priority
	}
	flavor := spec.Flavor
	if flavor == "" {
		flavor = cfg.s.Flavor
	}
	body := map[string]any{
		"priority":    priority,
		"preemptable": spec.Preemptible || cfg.s.Preemptable,
	}
	if flavor != "" {
		body["flavor"] = flavor
	}
	if cfg.s.Upstream != "" {
		body["upstream"] = cfg.s.Upstream
	}
	if len(spec.ExposePorts) > 0 {
		body["expose_ports"] = spec.ExposePorts
	}
	if lifetime > 0 {
		// Sandy's own expiry is authoritative; whether it honours the asked
		// lifetime shows in timeoutAt.
		body["ttl_seconds"] = int64(math.Ceil(lifetime.Seconds()))
	}
	a, err := cfg.c.do(ctx, call{op: op, method: http.MethodPost, path: "/api/sandboxes", body: body, timeout: cfg.s.CreateTimeout.D()})
	if err != nil {
		return providers.Sandbox{}, err
	}
	info, err := parseSandbox(a.body)
	if err != nil {
		return providers.Sandbox{}, providers.Wrap(providers.Internal, op, err)
	}
	if !validID.MatchString(info.ID) {
		return providers.Sandbox{}, providers.Errorf(providers.Internal, op, "Sandy's create answer carries no usable sandbox id: %s", clip(string(a.body)))
	}
	if err := p.warmup(ctx, cfg, info.ID, envFile); err != nil {
		p.abandon(ctx, cfg, info.ID)
		return providers.Sandbox{}, err
	}
	rec := &record{name: spec.Name, labels: maps.Clone(spec.Labels), expiresAt: info.TimeoutAt, ports: slices.Clone(spec.ExposePorts)}
	p.mu.Lock()
	p.prune(time.Now())
	p.records[info.ID] = rec
	p.mu.Unlock()
	p.log.Info("sandbox created", "id", info.ID, "priority", priority, "expires", info.TimeoutAt)
	return p.sandbox(info, rec, providers.StateRunning), nil
}

// abandon terminates a sandbox that Create will not hand out.
func (p *Provider) abandon(ctx context.Context, cfg *settings, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := p.terminate(ctx, cfg, id); err != nil {
		p.log.Warn("terminating a sandbox that never became ready failed; Sandy expires it eventually", "id", id, "error", err)
	}
}

// warmup waits until the sandbox answers status and runs a command, and
// writes its environment on the way: a Firecracker guest answers exec with
// "vsock handshake failed" or "agent not ready" for a moment after create.
func (p *Provider) warmup(ctx context.Context, cfg *settings, id, envFile string) error {
	const op = "create"
	var last error
	for attempt := 1; attempt <= cfg.s.WarmupAttempts; attempt++ {
		if attempt > 1 {
			base := cfg.s.RetryBaseDelay.D()
			wait := time.Duration(attempt-1)*base + randDuration(base)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("%s: waiting for sandbox %s to become ready: %w (last failure: %v)", op, id, ctx.Err(), last)
			case <-t.C:
			}
		}
		last = p.probe(ctx, cfg, id, envFile)
		if last == nil {
			return nil
		}
		if ctx.Err() != nil {
			return last
		}
		switch providers.CodeOf(last) {
		case providers.PermissionDenied, providers.InvalidArgument:
			return last
		}
		p.log.Debug("sandbox not ready yet", "id", id, "attempt", attempt, "error", last.Error())
	}
	return &providers.Error{Code: providers.Unavailable, Op: op, Message: fmt.Sprintf("sandbox %s did not become ready after %d attempts", id, cfg.s.WarmupAttempts), Err: last}
}

func (p *Provider) probe(ctx context.Context, cfg *settings, id, envFile string) error {
	const op = "create"
	a, err := cfg.c.do(ctx, call{op: op, method: http.MethodGet, path: sandboxPath(id)})
	if err != nil {
		return err
	}
	if info, err := parseSandbox(a.body); err != nil || info.ID == "" {
		return providers.Errorf(providers.Unavailable, op, "the status of sandbox %s does not name it yet", id)
	}
	out, err := cfg.c.exec(ctx, op, id, warmupScript, map[string]string{"SS_ENVFILE": envFile}, 30*time.Second, false)
	if err != nil {
		return err
	}
	if out.ExitCode != 0 {
		return providers.Errorf(providers.Unavailable, op, "preparing sandbox %s: exit %d: %s", id, out.ExitCode, clip(out.Stderr))
	}
	return nil
}

// prune forgets records of sandboxes long expired and terminations long
// done. p.mu is held.
func (p *Provider) prune(now time.Time) {
	for id, r := range p.records {
		if !r.expiresAt.IsZero() && now.Sub(r.expiresAt) > time.Hour {
			delete(p.records, id)
		}
	}
	for id, at := range p.gone {
		if now.Sub(at) > 15*time.Minute {
			delete(p.gone, id)
		}
	}
}

func (p *Provider) sandbox(info sandboxInfo, rec *record, state providers.SandboxState) providers.Sandbox {
	sb := providers.Sandbox{
		ID:        info.ID,
		State:     state,
		PublicURL: info.URL,
		CreatedAt: info.CreatedAt,
		ExpiresAt: info.TimeoutAt,
	}
	if rec != nil {
		sb.Name = rec.name
		sb.Labels = maps.Clone(rec.labels)
		if info.URL != "" && slices.Contains(rec.ports, sandyPublicPort) {
			sb.PortURLs = map[int]string{sandyPublicPort: info.URL}
		}
	}
	return sb
}

// Get asks Sandy for the sandbox's status. One this process terminated and
// that Sandy still shows is reported as terminated.
func (p *Provider) Get(ctx context.Context, id string) (providers.Sandbox, error) {
	const op = "get"
	cfg, err := p.settings(op)
	if err != nil {
		return providers.Sandbox{}, err
	}
	if err := checkID(op, id); err != nil {
		return providers.Sandbox{}, err
	}
	a, err := cfg.c.do(ctx, call{op: op, method: http.MethodGet, path: sandboxPath(id)})
	if err != nil {
		if providers.IsNotFound(err) {
			p.mu.Lock()
			delete(p.records, id)
			delete(p.gone, id)
			p.mu.Unlock()
		}
		return providers.Sandbox{}, err
	}
	info, err := parseSandbox(a.body)
	if err != nil {
		return providers.Sandbox{}, providers.Wrap(providers.Internal, op, err)
	}
	info.ID = id
	p.mu.Lock()
	rec := p.records[id]
	_, gone := p.gone[id]
	p.mu.Unlock()
	state := providers.StateRunning
	if gone {
		state = providers.StateTerminated
	}
	return p.sandbox(info, rec, state), nil
}

// Terminate ends a sandbox; Sandy's 404 means it is gone already.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	const op = "terminate"
	cfg, err := p.settings(op)
	if err != nil {
		return err
	}
	if err := checkID(op, id); err != nil {
		return err
	}
	return p.terminate(ctx, cfg, id)
}

func (p *Provider) terminate(ctx context.Context, cfg *settings, id string) error {
	_, err := cfg.c.do(ctx, call{op: "terminate", method: http.MethodPost, path: sandboxPath(id, "terminate")})
	if err != nil && !providers.IsNotFound(err) {
		return err
	}
	p.mu.Lock()
	delete(p.records, id)
	p.gone[id] = time.Now()
	p.mu.Unlock()
	p.log.Info("sandbox terminated", "id", id)
	return nil
}

// envName is a variable name a POSIX shell can export. Names starting with
// __ss are the provider's own inside the sandbox.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func checkEnvName(name string) error {
	if !envName.MatchString(name) || strings.HasPrefix(name, "__ss") || name == execMarker {
		return fmt.Errorf("%q cannot be an environment variable name here", name)
	}
	return nil
}

// sandboxEnv renders the sandbox's environment and secrets as the shell
// file every exec sources. Secrets with hosts are set like the others:
// Sandy cannot scope them.
func sandboxEnv(spec providers.CreateSpec) (string, error) {
	vars := maps.Clone(spec.Env)
	if vars == nil {
		vars = map[string]string{}
	}
	for _, s := range spec.Secrets {
		vars[s.Name] = s.Value
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		if err := checkEnvName(k); err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(vars[k]))
	}
	return b.String(), nil
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}
