// Package fakedeno is a fake of Deno Sandbox, faithful to the wire contract
// in shared/contracts/deno-sandbox-api.md (section 8 is its checklist) and
// checked by Deno's own SDK, @deno/sandbox, in a test: when the two disagree
// the fake is wrong.
//
// It serves both of Deno's planes on 127.0.0.1: the console REST API
// (volumes, snapshots, listing sandboxes) and the regional sandbox API (the
// WebSocket JSON-RPC per sandbox, and kill, extend and expose over REST). A
// third listener is the sandboxes' way out: an HTTP proxy that swaps a
// secret's placeholder for its value only in requests to the secret's hosts,
// and records what it did.
//
// Commands run for real on this machine under bubblewrap, JavaScript and
// TypeScript with the real deno binary. A sandbox's root file system is the
// host's, read-only, with the writable directories of a Deno root volume
// (/home/app, /opt, /tmp and /workspace) coming from its root: a fresh
// directory for the base image, a copy of a snapshot (writes are ephemeral,
// as on Deno), or a bootable volume's own directory (writes persist). Data
// volumes are directories bound where the config mounts them. Sandboxes share
// the host's pid and network namespaces: a process left in the background
// outlives its spawn, as in Deno's VM, and every process of a sandbox carries
// a marker in its environment by which the sandbox's stop kills them all.
package fakedeno

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Options configure a Server.
type Options struct {
	// Token is the bearer token every request must carry. One that does not
	// start with "ddo_" (an organisation token) also needs X-Deno-Org: Org.
	Token string
	Org   string
	// Dir holds sandboxes, volumes and snapshots; "" makes a temporary
	// directory that Close removes.
	Dir string
	// BwrapPath and DenoPath are the binaries; "" looks them up in PATH.
	BwrapPath string
	DenoPath  string
	// MaxSandboxes refuses creates beyond this many running sandboxes
	// (Deno's pre-release default is 5); 0 means 5.
	MaxSandboxes int
	// Hosts maps host names the sandboxes use (such as api.example.test) to
	// the 127.0.0.1 addresses the proxy dials for them.
	Hosts map[string]string
	// DetachDelay is how long a stopped sandbox's volumes stay attached:
	// Deno detaches them a moment after the kill, and until then refuses
	// to attach, snapshot or delete them (409). 0 means 300ms; < 0 detaches
	// at once.
	DetachDelay time.Duration
	// ExposeDomain is the domain exposed ports get names under; "" means
	// "sandbox.fake.invalid". Nothing is served there.
	ExposeDomain string
	// Logger receives one line per request at debug level; nil discards.
	Logger *slog.Logger
}

// Server is the fake: Console and Regional are its two planes.
type Server struct {
	opts   Options
	log    *slog.Logger
	dir    string
	ownDir bool
	bwrap  string
	deno   string
	self   string   // this executable, the waiter of every command ("" if unknown)
	root   []string // bwrap arguments rebuilding the host's root read-only

	proxyAddr string // set by Start: the egress proxy's host:port

	mu        sync.Mutex
	volumes   map[string]*volume   // by id
	snapshots map[string]*snapshot // by id
	sandboxes map[string]*sandbox  // by id, stopped ones too
	egress    []Egress
	closed    bool
}

// ErrNoBubblewrap is returned by New when bwrap is missing or cannot make a
// namespace here.
var ErrNoBubblewrap = errors.New("fakedeno: bubblewrap is not usable")

// New makes a fake. It checks that bubblewrap works.
func New(opts Options) (*Server, error) {
	if opts.MaxSandboxes <= 0 {
		opts.MaxSandboxes = 5
	}
	if opts.DetachDelay == 0 {
		opts.DetachDelay = 300 * time.Millisecond
	}
	if opts.ExposeDomain == "" {
		opts.ExposeDomain = "sandbox.fake.invalid"
	}
	s := &Server{
		opts:      opts,
		log:       opts.Logger,
		volumes:   map[string]*volume{},
		snapshots: map[string]*snapshot{},
		sandboxes: map[string]*sandbox{},
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	var err error
	if s.bwrap = opts.BwrapPath; s.bwrap == "" {
		if s.bwrap, err = exec.LookPath("bwrap"); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNoBubblewrap, err)
		}
	}
	s.deno = opts.DenoPath
	if s.deno == "" {
		s.deno, _ = exec.LookPath("deno") // spawnDeno answers an error without it
	}
	s.self, _ = os.Executable()
	if s.root, err = hostRootArgs(); err != nil {
		return nil, err
	}
	if out, err := exec.Command(s.bwrap, append(append([]string{}, s.root...), "--", "/bin/true")...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%w: %v: %s", ErrNoBubblewrap, err, strings.TrimSpace(string(out)))
	}
	if s.dir = opts.Dir; s.dir == "" {
		if s.dir, err = os.MkdirTemp("", "fakedeno-"); err != nil {
			return nil, err
		}
		s.ownDir = true
	}
	return s, nil
}

// Close stops every sandbox and removes what the fake made.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	var all []*sandbox
	for _, sb := range s.sandboxes {
		all = append(all, sb)
	}
	s.mu.Unlock()
	for _, sb := range all {
		s.stop(sb, "the fake is closing")
	}
	if s.ownDir {
		return os.RemoveAll(s.dir)
	}
	return nil
}

// Running lists the ids of the sandboxes still running.
func (s *Server) Running() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, sb := range s.sandboxes {
		if !sb.stopped {
			ids = append(ids, id)
		}
	}
	return ids
}

// Egress is one request through the proxy and what it did with secrets.
type Egress struct {
	Sandbox string
	Host    string // as the sandbox named it, host[:port]
	Method  string
	// Substituted names the secrets whose placeholder was replaced by the
	// value; Refused is set when allow_net kept the request from leaving.
	Substituted []string
	Refused     bool
}

// EgressLog returns what the proxy did so far.
func (s *Server) EgressLog() []Egress {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Egress(nil), s.egress...)
}

// idAlphabet is the alphabet of Deno's ids: lowercase base32 without i, l
// and o (SANDBOX_ID_REGEXP in the SDK).
const idAlphabet = "0123456789abcdefghjkmnpqrstuvwxyz"

func newID(kind string) string {
	b := make([]byte, 20)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return kind + "_ord_" + string(b)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x", b)
}

// apiError is Deno's REST error body.
func apiError(w http.ResponseWriter, status int, code, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("x-deno-trace-id", randomHex(8))
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": code, "message": fmt.Sprintf(format, args...)})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("x-deno-trace-id", randomHex(8))
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// authorize checks the bearer token and, for a token that is not an
// organisation's, the organisation header.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" || tok != s.opts.Token {
		apiError(w, http.StatusUnauthorized, "INVALID_TOKEN", "the token is missing, malformed or not valid")
		return false
	}
	if !strings.HasPrefix(tok, "ddo_") && r.Header.Get("X-Deno-Org") != s.opts.Org {
		apiError(w, http.StatusBadRequest, "MISSING_ORG", "a personal token needs the X-Deno-Org header naming the organisation")
		return false
	}
	return true
}

// logged wraps a handler with one debug line per request.
func (s *Server) logged(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		h.ServeHTTP(w, r)
		s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "took", time.Since(start))
	})
}
