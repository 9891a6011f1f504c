package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandstep/sandstep/providers"
)

// DefaultStartTimeout bounds a plugin's start and handshake when
// Options.StartTimeout is zero. A healthy plugin needs milliseconds; the
// margin is for a loaded machine or a cold disk.
const DefaultStartTimeout = 20 * time.Second

// Options say which plugin to run and what to hand it.
type Options struct {
	// Path is the plugin binary. When empty it is
	// Dir/sandstep-provider-<Name>.
	Path string
	Dir  string
	// Name is the provider's name, for messages and logs. When empty it is
	// taken from Path's file name.
	Name string

	// Settings, Secrets, Defaults, BaseDir and DataDir are passed to
	// Configure (as providers.Config) right after the plugin starts, and
	// again after every restart.
	Settings []byte
	Secrets  map[string]string
	Defaults providers.SandboxDefaults
	BaseDir  string
	DataDir  string

	// Logger receives the plugin's log lines and go-plugin's own, with a
	// "provider" attribute. Nil means slog.Default().
	Logger *slog.Logger
	// Env is added to the plugin's environment ("KEY=value"). The plugin
	// inherits nothing else from the host but PATH (and gets go-plugin's
	// handshake variables and SANDSTEP_PLUGIN_LOG_LEVEL): in particular no
	// cloud credentials.
	Env []string
	// MTLS, when set, authenticates both ends of the local socket, as
	// go-plugin's AutoMTLS does: it is called at every start of the plugin
	// for the host's certificate, which the plugin answers with its own.
	// mtls.OneTime makes a one-time certificate (about 30 ms per start); it
	// is a function here so that hosts that never use it (the Lambdas) do
	// not link certificate generation (128 KiB).
	MTLS func() (ClientCert, error)
	// StartTimeout bounds start and handshake (the handshake does not
	// take a context); 0 = DefaultStartTimeout. The ctx given to Start bounds
	// the Configure call that follows.
	StartTimeout time.Duration
}

// BinaryNotFoundError is returned by Start when the plugin binary does not
// exist. errors.Is(err, fs.ErrNotExist) holds.
type BinaryNotFoundError struct {
	Provider string
	Path     string // absolute
}

func (e *BinaryNotFoundError) Error() string {
	return fmt.Sprintf("provider %q: plugin binary not found at %s (build it with make plugins)", e.Provider, e.Path)
}

func (e *BinaryNotFoundError) Is(target error) bool { return target == fs.ErrNotExist }

// BinaryPath returns the absolute path of provider name's plugin in dir.
func BinaryPath(dir, name string) (string, error) {
	return filepath.Abs(filepath.Join(dir, BinaryPrefix+name))
}

// Client is a provider plugin seen from the host: a providers.Provider whose
// calls go to the plugin process. It is safe for concurrent use and meant to
// live as long as the host (a warm Lambda reuses it across invocations).
//
// When the plugin dies, the next call starts a new one and configures it
// again before going ahead. A call that was under way when it died fails
// with code Unavailable, except for calls without side effects or idempotent
// by contract (Info, Get, List, Terminate, ReadFile before any byte arrived,
// ListFiles, the snapshot and volume calls, Configure), which are retried
// once on the new plugin.
type Client struct {
	name         string
	path         string
	env          []string
	logger       *slog.Logger
	mtls         func() (ClientCert, error)
	startTimeout time.Duration

	mu     sync.Mutex
	cfg    providers.Config
	cur    *instance
	closed bool
}

// instance is one running plugin process.
type instance struct {
	proc   *process
	p      *grpcClient
	broken bool // guarded by Client.mu
}

var _ providers.Provider = (*Client)(nil)

// Start starts the plugin, checks its protocol version and configures it.
// The caller must Close the Client.
func Start(ctx context.Context, opts Options) (*Client, error) {
	path, name := opts.Path, opts.Name
	var err error
	switch {
	case path != "":
		path, err = filepath.Abs(path)
	case name != "":
		path, err = BinaryPath(opts.Dir, name)
	default:
		return nil, errors.New("plugin: Options needs Path or Name")
	}
	if err != nil {
		return nil, fmt.Errorf("provider %q: %w", name, err)
	}
	if name == "" {
		name = strings.TrimPrefix(filepath.Base(path), BinaryPrefix)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	c := &Client{
		name:         name,
		path:         path,
		env:          opts.Env,
		logger:       logger.With("provider", name),
		mtls:         opts.MTLS,
		startTimeout: opts.StartTimeout,
		cfg: providers.Config{Settings: opts.Settings, Secrets: opts.Secrets, Defaults: opts.Defaults,
			BaseDir: opts.BaseDir, DataDir: opts.DataDir},
	}
	if c.startTimeout <= 0 {
		c.startTimeout = DefaultStartTimeout
	}
	inst, err := c.launch(ctx, c.cfg)
	if err != nil {
		return nil, err
	}
	c.cur = inst
	return c, nil
}

// launch starts one plugin process and configures it.
func (c *Client) launch(ctx context.Context, cfg providers.Config) (*instance, error) {
	if err := checkBinary(c.name, c.path); err != nil {
		return nil, err
	}
	env := append([]string{
		"PATH=" + os.Getenv("PATH"),
		logLevelEnv + "=" + levelName(c.logger),
		hostPIDEnv + "=" + strconv.Itoa(os.Getpid()),
	}, c.env...)
	proc, err := startProcess(c.path, env, c.logger, c.mtls, c.startTimeout)
	if err != nil {
		return nil, c.startError(err)
	}
	inst := &instance{proc: proc, p: newGRPCClient(proc.conn)}
	if err := inst.p.Configure(ctx, cfg); err != nil {
		inst.kill()
		return nil, fmt.Errorf("provider %q: %w", c.name, err)
	}
	return inst, nil
}

func checkBinary(name, path string) error {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &BinaryNotFoundError{Provider: name, Path: path}
	}
	if err != nil {
		return fmt.Errorf("provider %q: plugin binary: %w", name, err)
	}
	if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("provider %q: plugin %s is not an executable file (build it with make plugins)", name, path)
	}
	return nil
}

// startError names the plugin and, for a version mismatch, the cure.
func (c *Client) startError(err error) error {
	var ve *versionError
	if errors.As(err, &ve) {
		return fmt.Errorf("provider %q: plugin %s speaks provider protocol version %d, this host speaks version %d; rebuild the plugin from the same sandstep version (make plugins)",
			c.name, c.path, ve.plugin, providers.APIVersion)
	}
	return fmt.Errorf("provider %q: starting plugin %s: %w", c.name, c.path, err)
}

// kill ends a process that may be hung or half dead, without asking it
// first: a hung plugin would never answer.
func (i *instance) kill() { i.proc.kill() }

// shutdownGrace is how long Close lets a plugin stop on request before
// killing it.
const shutdownGrace = 5 * time.Second

// shutdown asks the plugin to stop and waits for it, killing it if the
// request goes unanswered (a frozen process never answers it) or the
// process does not exit within shutdownGrace.
func (i *instance) shutdown() {
	p := i.proc
	p.ending.Store(true)
	t := time.NewTimer(shutdownGrace)
	defer t.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	// The plugin stops its server while answering, so the call's error
	// says nothing; its exit does (go-plugin's client waits the same way).
	_ = p.shutdown(ctx)
	select {
	case <-p.done:
		p.close()
	case <-t.C:
		p.kill()
	}
}

var errClosed = providers.Errorf(providers.FailedPrecondition, "", "the provider plugin client is closed")

// get returns the running plugin, starting a new one if the last one died.
// Holding the lock while starting means concurrent callers wait for one
// restart instead of racing to start several.
func (c *Client) get(ctx context.Context, op string) (*instance, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errClosed
	}
	if c.cur != nil && !c.cur.broken && !c.cur.proc.exited() {
		return c.cur, nil
	}
	if c.cur != nil {
		c.logger.Warn("provider plugin exited; restarting it", "path", c.path)
		c.cur.kill()
		c.cur = nil
	}
	inst, err := c.launch(ctx, c.cfg)
	if err != nil {
		return nil, &providers.Error{Code: providers.Unavailable, Op: op, Err: fmt.Errorf("restarting the plugin: %w", err)}
	}
	c.cur = inst
	return inst, nil
}

// failed decides, after a call on inst failed with err, whether the plugin
// is gone. Only a transport failure can mean that, and then the process has
// exited or no longer answers a health check.
func (c *Client) failed(ctx context.Context, inst *instance, err error) bool {
	if !isTransport(err) {
		return false
	}
	if !inst.proc.exited() && inst.p.ping(ctx) == nil {
		return false
	}
	c.mu.Lock()
	inst.broken = true
	c.mu.Unlock()
	return true
}

// call runs f on the plugin. With retry set, a call that failed because the
// plugin died runs once more on a restarted plugin.
func (c *Client) call(ctx context.Context, op string, retry bool, f func(p *grpcClient) error) error {
	inst, err := c.get(ctx, op)
	if err != nil {
		return err
	}
	err = f(inst.p)
	if err == nil || !c.failed(context.WithoutCancel(ctx), inst, err) || !retry || ctx.Err() != nil {
		return err
	}
	if inst, err = c.get(ctx, op); err != nil {
		return err
	}
	return f(inst.p)
}

// callValue is call for methods that return a value.
func callValue[T any](ctx context.Context, c *Client, op string, retry bool, f func(p *grpcClient) (T, error)) (T, error) {
	var out T
	err := c.call(ctx, op, retry, func(p *grpcClient) (err error) {
		out, err = f(p)
		return err
	})
	return out, err
}

// Close ends the plugin. Calls after Close fail with FailedPrecondition.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.cur != nil {
		c.cur.shutdown()
		c.cur = nil
	}
	return nil
}

// Closed reports whether Close was called.
func (c *Client) Closed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Configure replaces the configuration the plugin runs with; a restarted
// plugin gets the latest one.
func (c *Client) Configure(ctx context.Context, cfg providers.Config) error {
	c.mu.Lock()
	c.cfg = cfg
	c.mu.Unlock()
	return c.call(ctx, "configure", true, func(p *grpcClient) error { return p.Configure(ctx, cfg) })
}

func (c *Client) Info(ctx context.Context) (providers.Info, error) {
	return callValue(ctx, c, "info", true, func(p *grpcClient) (providers.Info, error) { return p.Info(ctx) })
}

func (c *Client) Create(ctx context.Context, spec providers.CreateSpec) (providers.Sandbox, error) {
	return callValue(ctx, c, "create", false, func(p *grpcClient) (providers.Sandbox, error) { return p.Create(ctx, spec) })
}

func (c *Client) Get(ctx context.Context, id string) (providers.Sandbox, error) {
	return callValue(ctx, c, "get", true, func(p *grpcClient) (providers.Sandbox, error) { return p.Get(ctx, id) })
}

func (c *Client) List(ctx context.Context, f providers.ListFilter) ([]providers.Sandbox, error) {
	return callValue(ctx, c, "list", true, func(p *grpcClient) ([]providers.Sandbox, error) { return p.List(ctx, f) })
}

func (c *Client) Terminate(ctx context.Context, id string) error {
	return c.call(ctx, "terminate", true, func(p *grpcClient) error { return p.Terminate(ctx, id) })
}

func (c *Client) Exec(ctx context.Context, id string, req providers.ExecRequest) (providers.ExecResult, error) {
	return callValue(ctx, c, "exec", false, func(p *grpcClient) (providers.ExecResult, error) { return p.Exec(ctx, id, req) })
}

func (c *Client) WriteFile(ctx context.Context, id string, f providers.WriteFileRequest) error {
	return c.call(ctx, "write file", false, func(p *grpcClient) error { return p.WriteFile(ctx, id, f) })
}

// ReadFile is retried after a restart only if no byte reached w, so w never
// sees the same bytes twice.
func (c *Client) ReadFile(ctx context.Context, id string, f providers.ReadFileRequest, w io.Writer) (int64, error) {
	inst, err := c.get(ctx, "read file")
	if err != nil {
		return 0, err
	}
	cw := &countingWriter{w: w}
	n, err := inst.p.ReadFile(ctx, id, f, cw)
	if err == nil || cw.n > 0 || !c.failed(context.WithoutCancel(ctx), inst, err) || ctx.Err() != nil {
		return n, err
	}
	if inst, err = c.get(ctx, "read file"); err != nil {
		return 0, err
	}
	return inst.p.ReadFile(ctx, id, f, w)
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (cw *countingWriter) Write(p []byte) (int, error) {
	n, err := cw.w.Write(p)
	cw.n += int64(n)
	return n, err
}

func (c *Client) ListFiles(ctx context.Context, id, path string) ([]providers.FileInfo, error) {
	return callValue(ctx, c, "list files", true, func(p *grpcClient) ([]providers.FileInfo, error) { return p.ListFiles(ctx, id, path) })
}

func (c *Client) EnsureSnapshot(ctx context.Context, spec providers.SnapshotSpec) (providers.Snapshot, error) {
	return callValue(ctx, c, "ensure snapshot", true, func(p *grpcClient) (providers.Snapshot, error) { return p.EnsureSnapshot(ctx, spec) })
}

func (c *Client) GetSnapshot(ctx context.Context, slug string) (providers.Snapshot, error) {
	return callValue(ctx, c, "get snapshot", true, func(p *grpcClient) (providers.Snapshot, error) { return p.GetSnapshot(ctx, slug) })
}

func (c *Client) DeleteSnapshot(ctx context.Context, slug string) error {
	return c.call(ctx, "delete snapshot", true, func(p *grpcClient) error { return p.DeleteSnapshot(ctx, slug) })
}

func (c *Client) ListSnapshots(ctx context.Context, labels map[string]string) ([]providers.Snapshot, error) {
	return callValue(ctx, c, "list snapshots", true, func(p *grpcClient) ([]providers.Snapshot, error) { return p.ListSnapshots(ctx, labels) })
}

func (c *Client) CreateVolume(ctx context.Context, spec providers.VolumeSpec) (providers.Volume, error) {
	return callValue(ctx, c, "create volume", true, func(p *grpcClient) (providers.Volume, error) { return p.CreateVolume(ctx, spec) })
}

func (c *Client) GetVolume(ctx context.Context, slug string) (providers.Volume, error) {
	return callValue(ctx, c, "get volume", true, func(p *grpcClient) (providers.Volume, error) { return p.GetVolume(ctx, slug) })
}

func (c *Client) DeleteVolume(ctx context.Context, slug string) error {
	return c.call(ctx, "delete volume", true, func(p *grpcClient) error { return p.DeleteVolume(ctx, slug) })
}

func (c *Client) ListVolumes(ctx context.Context, labels map[string]string) ([]providers.Volume, error) {
	return callValue(ctx, c, "list volumes", true, func(p *grpcClient) ([]providers.Volume, error) { return p.ListVolumes(ctx, labels) })
}
