package fakedeno

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/sandstep/sandstep/internal/testkit/bwrapbox"
)

// sandbox is one fake sandbox. Fields below mu in Server are guarded by it.
type sandbox struct {
	id           string
	labels       map[string]string
	createdAt    time.Time
	stopAt       time.Time // zero: session mode, it dies with its primary socket
	memoryMB     int
	dir          string // its own directory (layer when not booted from a volume)
	layer        string // the root layer's directory
	rootVolume   string // volume id, when booted from a volume
	rootSnapshot string // snapshot id, when booted from one
	mounts       []mount
	allowNet     []string // nil: unrestricted
	secrets      map[string]secret
	env          map[string]string
	primary      *conn
	conns        map[*conn]bool
	procs        map[int]*process
	nextPid      int
	exposed      map[string]string // domain -> target
	timer        *time.Timer
	stopped      bool
	stoppedAt    time.Time
	done         chan struct{} // closed when stopped
	marker       string        // NAME=value in the environment of its processes
}

type mount struct {
	volume string // id
	at     string
	dir    string
}

type secret struct {
	hosts       []string
	value       string
	placeholder string
}

// sandboxIDRE is the SDK's SANDBOX_ID_REGEXP.
var sandboxIDRE = regexp.MustCompile(`^sbx_([a-z]{3})_[0-9a-hjkmnp-z]{20}$`)

// Regional is the regional sandbox API ({region}.sandbox-api.deno.net).
func (s *Server) Regional() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v3/sandboxes/create", s.handleCreate)
	mux.HandleFunc("GET /api/v3/sandbox/{id}/connect", s.handleConnect)
	mux.HandleFunc("DELETE /api/v3/sandbox/{id}", s.handleKill)
	mux.HandleFunc("PATCH /api/v3/sandbox/{id}", s.handleExtend)
	mux.HandleFunc("POST /api/v3/sandbox/{id}/expose/http", s.handleExpose)
	return s.logged(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.authorize(w, r) {
			return
		}
		mux.ServeHTTP(w, r)
	}))
}

// config is the x-deno-sandbox-config header; unknown keys (the Python SDK
// sends several) are ignored.
type config struct {
	StopAtMs *int64            `json:"stop_at_ms"`
	MemoryMB int               `json:"memory_mb"`
	Labels   map[string]string `json:"labels"`
	Root     *struct {
		Volume string `json:"volume"`
	} `json:"root"`
	Volumes []struct {
		Volume string `json:"volume"`
		Path   string `json:"path"`
	} `json:"volumes"`
	AllowNet []string `json:"allow_net"`
	Secrets  map[string]struct {
		Hosts []string `json:"hosts"`
		Value string   `json:"value"`
	} `json:"secrets"`
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request) {
	raw, err := base64.StdEncoding.DecodeString(r.Header.Get("x-deno-sandbox-config"))
	var cfg config
	if err == nil {
		err = json.Unmarshal(raw, &cfg)
	}
	if err != nil {
		apiError(w, http.StatusBadRequest, "INVALID_CONFIG", "x-deno-sandbox-config must be base64 of a JSON object: %v", err)
		return
	}
	sb, status, code, msg := s.newSandbox(cfg)
	if sb == nil {
		apiError(w, status, code, "%s", msg)
		return
	}
	s.serveSocket(w, r, sb, true)
}

// newSandbox checks cfg and starts a sandbox, or says why not.
func (s *Server) newSandbox(cfg config) (sb *sandbox, status int, code, msg string) {
	bad := func(format string, args ...any) (*sandbox, int, string, string) {
		return nil, http.StatusBadRequest, "INVALID_CONFIG", fmt.Sprintf(format, args...)
	}
	if cfg.MemoryMB == 0 {
		cfg.MemoryMB = 1280
	}
	if cfg.MemoryMB < 768 || cfg.MemoryMB > 4096 {
		return bad("memory_mb must be from 768 to 4096, not %d", cfg.MemoryMB)
	}
	if len(cfg.Labels) > 5 {
		return bad("at most 5 labels, not %d", len(cfg.Labels))
	}
	for k, v := range cfg.Labels {
		if k == "" || len(k) > 64 || len(v) > 128 {
			return bad("label keys are 1 to 64 bytes and values at most 128")
		}
	}
	for name, sec := range cfg.Secrets {
		if !envNameRE.MatchString(name) || len(sec.Hosts) == 0 {
			return bad("secret %q needs an environment variable name and at least one host", name)
		}
	}
	now := time.Now()
	sb = &sandbox{
		id: newID("sbx"), labels: cfg.Labels, createdAt: now, memoryMB: cfg.MemoryMB,
		allowNet: cfg.AllowNet, secrets: map[string]secret{}, env: map[string]string{},
		conns: map[*conn]bool{}, procs: map[int]*process{}, nextPid: 2,
		exposed: map[string]string{}, done: make(chan struct{}),
	}
	sb.marker = "FAKEDENO_SANDBOX=" + randomHex(8) + "-" + sb.id
	if cfg.StopAtMs != nil {
		sb.stopAt = time.UnixMilli(*cfg.StopAtMs)
		if !sb.stopAt.After(now) {
			return bad("stop_at_ms is in the past")
		}
		// Deno's sandboxes live "up to 30 minutes" at a time; longer is
		// extendTimeout's business. A second of slack for the clocks.
		if sb.stopAt.After(now.Add(maxLifetime + time.Second)) {
			return bad("stop_at_ms is %s away: a sandbox lives at most %s before it is extended", time.Until(sb.stopAt).Round(time.Second), maxLifetime)
		}
	}
	for name, sec := range cfg.Secrets {
		sb.secrets[name] = secret{hosts: sec.Hosts, value: sec.Value, placeholder: "DENO_SECRET_PLACEHOLDER_" + randomHex(16)}
	}
	sb.dir = filepath.Join(s.dir, "sandboxes", sb.id)

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, http.StatusServiceUnavailable, "UNAVAILABLE", "the fake is closing"
	}
	running := 0
	for _, o := range s.sandboxes {
		if !o.stopped {
			running++
		}
	}
	if running >= s.opts.MaxSandboxes {
		return nil, http.StatusTooManyRequests, "SANDBOX_LIMIT_REACHED", fmt.Sprintf("the organisation runs %d sandboxes, its limit", running)
	}
	var attach []*volume
	sb.layer = filepath.Join(sb.dir, "root")
	switch {
	case cfg.Root == nil || cfg.Root.Volume == "":
		if err := newLayer(sb.layer); err != nil {
			return nil, http.StatusInternalServerError, "INTERNAL", err.Error()
		}
	case s.findSnapshot(cfg.Root.Volume) != nil:
		sn := s.findSnapshot(cfg.Root.Volume)
		// A snapshot root is read-only: writes go to a copy that dies
		// with the sandbox.
		if err := copyTree(sn.dir, sb.layer); err != nil {
			return nil, http.StatusInternalServerError, "INTERNAL", err.Error()
		}
		sb.rootSnapshot = sn.id
	default:
		v := s.findVolume(cfg.Root.Volume)
		switch {
		case v == nil:
			return nil, http.StatusNotFound, "VOLUME_NOT_FOUND", fmt.Sprintf("no volume or snapshot %q for root", cfg.Root.Volume)
		case !v.bootable:
			return bad("volume %q is not bootable", v.slug)
		}
		sb.layer, sb.rootVolume = v.dir, v.id
		attach = append(attach, v)
	}
	for _, m := range cfg.Volumes {
		v := s.findVolume(m.Volume)
		if v == nil {
			return nil, http.StatusNotFound, "VOLUME_NOT_FOUND", fmt.Sprintf("no volume %q", m.Volume)
		}
		if !path.IsAbs(m.Path) || path.Clean(m.Path) != m.Path || m.Path == "/" {
			return bad("mount path %q must be absolute and clean", m.Path)
		}
		if v.region != "ord" {
			return bad("volume %q is in region %s, the sandbox in ord", v.slug, v.region)
		}
		attach = append(attach, v)
		sb.mounts = append(sb.mounts, mount{volume: v.id, at: m.Path, dir: v.dir})
	}
	for i, v := range attach {
		if v.attachedTo != "" || slices.Index(attach, v) != i {
			return nil, http.StatusConflict, "VOLUME_ALREADY_ATTACHED", fmt.Sprintf("volume %q is attached to sandbox %s", v.slug, v.attachedTo)
		}
	}
	for _, v := range attach {
		v.attachedTo = sb.id
	}
	s.sandboxes[sb.id] = sb
	if !sb.stopAt.IsZero() {
		sb.timer = time.AfterFunc(time.Until(sb.stopAt), func() { s.stop(sb, "the sandbox reached stop_at_ms") })
	}
	return sb, 0, "", ""
}

func (s *Server) handleConnect(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	sb := s.sandboxes[id]
	s.mu.Unlock()
	if sb == nil || !sandboxIDRE.MatchString(id) {
		apiError(w, http.StatusNotFound, "SANDBOX_NOT_FOUND", "no sandbox %q", id)
		return
	}
	if sb.isStopped(s) {
		apiError(w, http.StatusGone, "SANDBOX_STOPPED", "sandbox %s has stopped", id)
		return
	}
	s.serveSocket(w, r, sb, false)
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (sb *sandbox) isStopped(s *Server) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sb.stopped
}

// serveSocket upgrades to the sandbox's JSON-RPC socket and serves it until
// either side closes. Closing the primary socket of a session-mode sandbox
// stops it.
func (s *Server) serveSocket(w http.ResponseWriter, r *http.Request, sb *sandbox, primary bool) {
	w.Header().Set("x-deno-sandbox-id", sb.id)
	w.Header().Set("x-deno-trace-id", randomHex(8))
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		if primary {
			s.stop(sb, "the upgrade failed")
		}
		return
	}
	ws.SetReadLimit(64 << 20)
	c := &conn{s: s, sb: sb, ws: ws, inbound: map[int]*inbound{}, nextStream: 0}
	s.mu.Lock()
	stopped := sb.stopped
	if !stopped {
		sb.conns[c] = true
		if primary {
			sb.primary = c
		}
	}
	s.mu.Unlock()
	if stopped {
		_ = ws.Close(websocket.StatusNormalClosure, "sandbox stopped")
		return
	}
	c.serve(r.Context())
	s.mu.Lock()
	delete(sb.conns, c)
	sessionEnds := primary && sb.stopAt.IsZero()
	s.mu.Unlock()
	if sessionEnds {
		s.stop(sb, "the primary connection of a session sandbox closed")
	}
}

// stop ends a sandbox: its processes die, its sockets close with 1000, its
// volumes detach.
func (s *Server) stop(sb *sandbox, why string) {
	s.mu.Lock()
	if sb.stopped {
		s.mu.Unlock()
		return
	}
	sb.stopped, sb.stoppedAt = true, time.Now()
	close(sb.done)
	if sb.timer != nil {
		sb.timer.Stop()
	}
	procs := make([]*process, 0, len(sb.procs))
	for _, p := range sb.procs {
		procs = append(procs, p)
	}
	conns := make([]*conn, 0, len(sb.conns))
	for c := range sb.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	bwrapbox.KillMarked(sb.marker)
	for _, p := range procs {
		p.kill("SIGKILL")
		<-p.exited
	}
	for _, c := range conns {
		_ = c.ws.Close(websocket.StatusNormalClosure, why)
	}
	detach := func() {
		s.mu.Lock()
		for _, v := range s.volumes {
			if v.attachedTo == sb.id {
				v.attachedTo = ""
			}
		}
		s.mu.Unlock()
	}
	if d := s.opts.DetachDelay; d > 0 && !s.isClosed() {
		time.AfterFunc(d, detach)
	} else {
		detach()
	}
	if sb.rootVolume == "" {
		_ = os.RemoveAll(sb.dir)
	}
	s.log.Debug("sandbox stopped", "id", sb.id, "why", why)
}

func (s *Server) regionalSandbox(w http.ResponseWriter, r *http.Request) *sandbox {
	id := r.PathValue("id")
	s.mu.Lock()
	sb := s.sandboxes[id]
	s.mu.Unlock()
	if sb == nil {
		apiError(w, http.StatusNotFound, "SANDBOX_NOT_FOUND", "no sandbox %q", id)
	}
	return sb
}

func (s *Server) handleKill(w http.ResponseWriter, r *http.Request) {
	sb := s.regionalSandbox(w, r)
	if sb == nil {
		return
	}
	s.stop(sb, "killed")
	writeJSON(w, http.StatusOK, map[string]any{})
}

// maxExtend is the most one extend call adds; maxLifetime the longest
// lifetime a create may ask for.
const (
	maxExtend   = 30 * time.Minute
	maxLifetime = 30 * time.Minute
)

func (s *Server) handleExtend(w http.ResponseWriter, r *http.Request) {
	sb := s.regionalSandbox(w, r)
	if sb == nil {
		return
	}
	var in struct {
		StopAtMs int64 `json:"stop_at_ms"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.StopAtMs == 0 {
		apiError(w, http.StatusBadRequest, "INVALID_BODY", "the body must be {\"stop_at_ms\": <epoch ms>}")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case sb.stopped:
		apiError(w, http.StatusGone, "SANDBOX_STOPPED", "sandbox %s has stopped", sb.id)
		return
	case sb.stopAt.IsZero():
		apiError(w, http.StatusBadRequest, "SESSION_SANDBOX", "sandbox %s lives as long as its connection: there is no timeout to extend", sb.id)
		return
	}
	want := time.UnixMilli(in.StopAtMs)
	// The grant may differ from the request: a call adds at most 30
	// minutes.
	if limit := sb.stopAt.Add(maxExtend); want.After(limit) {
		want = limit
	}
	if want.After(sb.stopAt) {
		sb.stopAt = want
		sb.timer.Reset(time.Until(want))
	}
	writeJSON(w, http.StatusOK, map[string]int64{"stop_at_ms": sb.stopAt.UnixMilli()})
}

func (s *Server) handleExpose(w http.ResponseWriter, r *http.Request) {
	sb := s.regionalSandbox(w, r)
	if sb == nil {
		return
	}
	domain := strings.ToLower(strings.TrimPrefix(sb.id, "sbx_ord_")) + "-" + randomHex(3) + "." + s.opts.ExposeDomain
	s.mu.Lock()
	stopped := sb.stopped
	if !stopped {
		sb.exposed[domain] = "" // the exposeHttp RPC names the target
	}
	s.mu.Unlock()
	if stopped {
		apiError(w, http.StatusGone, "SANDBOX_STOPPED", "sandbox %s has stopped", sb.id)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"domain": domain})
}

// StopAt returns when a sandbox stops on its own; zero for one in session
// mode or unknown.
func (s *Server) StopAt(id string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.sandboxes[id]; sb != nil {
		return sb.stopAt
	}
	return time.Time{}
}

// Exposed returns what the exposeHttp calls of a sandbox asked for: domain
// to "port:N" or "pid:N".
func (s *Server) Exposed(id string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	if sb := s.sandboxes[id]; sb != nil {
		for d, t := range sb.exposed {
			if t != "" {
				out[d] = t
			}
		}
	}
	return out
}

// hostRootArgs rebuilds the host's root read-only for bubblewrap, leaving out
// what a sandbox's root layer brings.
func hostRootArgs() ([]string, error) {
	return bwrapbox.RootArgs("/tmp", "/home", "/opt", "/workspace")
}

// resolve maps a path inside the sandbox onto the host: the deepest mount
// or layer directory holding it, writable; elsewhere the host's own file,
// read-only.
func (sb *sandbox) resolve(p string) (host string, writable bool) {
	p = path.Clean("/" + p)
	best, bestAt := "", ""
	for _, d := range layerDirs {
		if within(p, d.at) && len(d.at) > len(bestAt) {
			best, bestAt = filepath.Join(sb.layer, d.sub), d.at
		}
	}
	for _, m := range sb.mounts {
		// A mount over a layer directory (a volume at /workspace) wins.
		if within(p, m.at) && len(m.at) >= len(bestAt) {
			best, bestAt = m.dir, m.at
		}
	}
	if bestAt == "" {
		return p, false
	}
	return filepath.Join(best, strings.TrimPrefix(p, bestAt)), true
}

func within(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// denoBin is where the sandbox finds deno, on its PATH: where Deno's
// installer puts it.
const denoBin = "/home/app/.deno/bin"

// bindArgs binds the sandbox's writable directories, and deno.
func (sb *sandbox) bindArgs(deno string) []string {
	var args []string
	for _, d := range layerDirs {
		args = append(args, "--bind", filepath.Join(sb.layer, d.sub), d.at)
	}
	if deno != "" {
		args = append(args, "--ro-bind", deno, denoBin+"/deno")
	}
	for _, m := range sb.mounts {
		args = append(args, "--bind", m.dir, m.at)
	}
	return args
}
