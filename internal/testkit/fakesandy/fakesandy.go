// Package fakesandy is a fake of the Sandy sandbox service, faithful to the
// wire contract in shared/contracts/sandy-api.md, quirks included: camelCase
// answers, an int priority (422 otherwise), unknown fields ignored, exec
// answering 200 whatever the exit code, a short default timeout for an exec
// without timeoutMs, text-only file writes, 404 once a sandbox is gone and
// teardown that lags behind terminate. Faults that the real service shows now
// and then (502 "Upstream error", 429, warmup failures of a fresh sandbox,
// truncated reads, preemption) can be switched on at run time.
//
// Commands run for real on this machine. Each sandbox is a directory holding
// workspace/, tmp/ and home/; a command runs as `/bin/sh -c` under bubblewrap
// in a mount namespace of its own in which those are /workspace, /tmp and
// /root and the rest of the host is read-only. Sandboxes share the host's pid
// and network namespaces, so that a background process (nohup ... &) outlives
// the exec that started it, as in Sandy's VMs. Every process of a sandbox
// inherits an environment variable naming the sandbox; terminate, expiry and
// preemption kill every process that carries it, which neither a new process
// group nor a new session escapes.
//
// The file API maps the same paths onto the sandbox's directories; a path
// elsewhere reads the host's file and cannot be written.
package fakesandy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/testkit/bwrapbox"
)

// Options configure a Server. The zero value is usable: no API key, a
// temporary directory, bwrap from PATH.
type Options struct {
	// APIKey is the bearer token every /api request must carry; "" accepts
	// requests without one.
	APIKey string
	// Dir holds the sandboxes' directories; "" makes a temporary directory
	// that Close removes.
	Dir string
	// BwrapPath is the bubblewrap binary; "" looks up "bwrap" in PATH.
	BwrapPath string
	// HostSuffix makes a sandbox's public URL https://<id><HostSuffix>.
	// Nothing is served there. "" means ".sandy.fake.invalid".
	HostSuffix string
	// DefaultTTL is the lifetime of a sandbox created without ttl_seconds;
	// 0 means one hour. A sandbox past its timeoutAt is gone (404).
	DefaultTTL time.Duration
	// MissingTimeout is how long an exec without timeoutMs may run before it
	// fails with "Command timed out"; 0 means 2 s. Sandy falls back to a
	// short client default there.
	MissingTimeout time.Duration
	// MaxSandboxes refuses creates (429) beyond this many live sandboxes;
	// 0 means no limit.
	MaxSandboxes int
	// Admin serves the test-only endpoints under /_fake/ (faults,
	// preemption). They need no API key.
	Admin bool
	// Faults are in force from the start; SetFaults changes them.
	Faults Faults
	// Logger receives one line per request at debug level; nil discards.
	Logger *slog.Logger
}

// Faults are the failures the fake injects. A client is told apart from its
// retries by the X-Request-Id header: every attempt of one logical request
// carries the same id, so a fault hits a request a known number of times,
// whatever else runs concurrently. Requests without the header each count as
// a new logical request.
type Faults struct {
	// CreateUpstreamErrors answers every create this many times with 502
	// {"detail":"Upstream error ..."} before letting it through.
	CreateUpstreamErrors int `json:"createUpstreamErrors"`
	// UpstreamErrorEvery answers every Nth logical API request once with
	// 502 "Upstream error"; 0 = never.
	UpstreamErrorEvery int `json:"upstreamErrorEvery"`
	// RateLimitEvery and RateLimitBurst answer every Nth logical API request
	// RateLimitBurst times with 429; 0 = never.
	RateLimitEvery int `json:"rateLimitEvery"`
	RateLimitBurst int `json:"rateLimitBurst"`
	// WarmupExecFailures answers the first K execs of every sandbox created
	// while it is set with 200, exitCode 1 and stderr "vsock handshake
	// failed" or "agent not ready", without running them.
	WarmupExecFailures int `json:"warmupExecFailures"`
	// TruncateReadsAbove cuts the content files/read returns to this many
	// bytes; 0 = never.
	TruncateReadsAbove int `json:"truncateReadsAbove"`
	// ReadFormat is how files/read answers: "" or "json" as {"content"}
	// (invalid UTF-8 replaced, as a text API does), "base64" as
	// {"content","encoding":"base64"}, "raw" as the bytes themselves. Sandy
	// has answered in all three over time.
	ReadFormat string `json:"readFormat"`
	// TeardownDelay keeps GET answering 200 for this long after terminate;
	// every other call gets 404 at once.
	TeardownDelay config.Duration `json:"teardownDelay"`
	// EchoAuthorization puts the Authorization header the fake received in
	// the body of its 401 answers, as a careless proxy might, so that tests
	// can show a client keeps it out of its errors.
	EchoAuthorization bool `json:"echoAuthorization"`
}

// Server is the fake Sandy: an http.Handler. Close it to kill every
// sandbox's processes and remove their directories.
type Server struct {
	opts     Options
	log      *slog.Logger
	bwrap    string
	rootArgs []string // bwrap arguments that rebuild the host's root read-only
	dir      string
	ownDir   bool
	instance string // part of every process marker: two fakes never touch each other's processes
	mux      *http.ServeMux
	admin    *http.ServeMux

	mu        sync.Mutex
	faults    Faults
	sandboxes map[string]*sandbox
	requests  map[string]*logicalRequest
	seq       int
	closed    bool
	busy      int        // teardowns under way; Close waits for them
	idle      *sync.Cond // on mu, signalled when busy drops
}

// logicalRequest is one request and its retries.
type logicalRequest struct {
	attempts int
	plan     []int // the status of each failing attempt, in order
	seen     time.Time
}

// ErrNoBubblewrap is wrapped by New's error when bubblewrap is missing or
// cannot make a sandbox on this machine (no user namespaces, say).
var ErrNoBubblewrap = errors.New("fakesandy: bubblewrap (Debian package bubblewrap) is needed to run commands and does not work here")

// New checks that bubblewrap can run commands here and returns the fake.
func New(opts Options) (*Server, error) {
	if opts.HostSuffix == "" {
		opts.HostSuffix = ".sandy.fake.invalid"
	}
	if opts.DefaultTTL <= 0 {
		opts.DefaultTTL = time.Hour
	}
	if opts.MissingTimeout <= 0 {
		opts.MissingTimeout = 2 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	bwrap := opts.BwrapPath
	if bwrap == "" {
		p, err := exec.LookPath("bwrap")
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNoBubblewrap, err)
		}
		bwrap = p
	}
	rootArgs, err := bwrapbox.RootArgs("/tmp", "/root", "/workspace")
	if err != nil {
		return nil, err
	}
	s := &Server{
		opts:      opts,
		log:       log,
		bwrap:     bwrap,
		rootArgs:  rootArgs,
		dir:       opts.Dir,
		instance:  randomHex(6),
		faults:    opts.Faults,
		sandboxes: make(map[string]*sandbox),
		requests:  make(map[string]*logicalRequest),
	}
	s.idle = sync.NewCond(&s.mu)
	if s.dir == "" {
		d, err := os.MkdirTemp("", "fakesandy-")
		if err != nil {
			return nil, fmt.Errorf("fakesandy: %w", err)
		}
		s.dir, s.ownDir = d, true
	} else if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, fmt.Errorf("fakesandy: %w", err)
	}
	if err := s.probe(); err != nil {
		s.removeOwnDir()
		return nil, err
	}
	s.routes()
	return s, nil
}

// probe runs one command the way execs run, so that a machine where
// bubblewrap cannot work fails here rather than on every exec.
func (s *Server) probe() error {
	d, err := os.MkdirTemp(s.dir, "probe-")
	if err != nil {
		return fmt.Errorf("fakesandy: %w", err)
	}
	defer os.RemoveAll(d)
	for _, sub := range []string{"workspace", "tmp", "home"} {
		if err := os.Mkdir(filepath.Join(d, sub), 0o755); err != nil {
			return fmt.Errorf("fakesandy: %w", err)
		}
	}
	args := append(slices.Clone(s.rootArgs), mountArgs(d, "/workspace")...)
	args = append(args, "--", "/bin/sh", "-c", "test -d /workspace && test -w /tmp")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, s.bwrap, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s cannot run a sandbox here: %v: %s", ErrNoBubblewrap, s.bwrap, err, bytes.TrimSpace(out))
	}
	return nil
}

func (s *Server) removeOwnDir() {
	if s.ownDir {
		_ = os.RemoveAll(s.dir)
	}
}

// SetFaults replaces the faults in force. Sandboxes created before keep the
// warmup failures they were created with.
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
}

// Faults returns the faults in force.
func (s *Server) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// Sandboxes returns the ids of the sandboxes that are not terminated,
// expired or preempted, sorted.
func (s *Server) Sandboxes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, sb := range s.sandboxes {
		if !sb.terminating {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Preempt makes a sandbox disappear as Sandy does under memory pressure:
// its processes are killed and every call about it answers 404 at once. It
// reports whether the sandbox existed.
func (s *Server) Preempt(id string) bool {
	s.mu.Lock()
	sb := s.sandboxes[id]
	s.mu.Unlock()
	if sb == nil {
		return false
	}
	s.destroy(sb)
	return true
}

// begin counts a teardown that Close must wait for; it reports false once
// Close has begun, which tears everything down itself.
func (s *Server) begin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.busy++
	return true
}

func (s *Server) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy--
	s.idle.Broadcast()
}

// Close kills every sandbox's processes and removes their directories.
// Requests that arrive afterwards are answered 503.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	sbs := make([]*sandbox, 0, len(s.sandboxes))
	for _, sb := range s.sandboxes {
		sbs = append(sbs, sb)
	}
	s.mu.Unlock()
	for _, sb := range sbs {
		s.destroy(sb)
	}
	s.mu.Lock()
	for s.busy > 0 {
		s.idle.Wait()
	}
	s.mu.Unlock()
	s.removeOwnDir()
	return nil
}

func (s *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("POST /api/sandboxes", s.handleCreate)
	m.HandleFunc("GET /api/sandboxes/stats", s.handleStats)
	m.HandleFunc("GET /api/sandboxes/{id}", s.handleGet)
	m.HandleFunc("POST /api/sandboxes/{id}/exec", s.handleExec)
	m.HandleFunc("POST /api/sandboxes/{id}/files/write", s.handleWrite)
	m.HandleFunc("GET /api/sandboxes/{id}/files/read", s.handleRead)
	m.HandleFunc("GET /api/sandboxes/{id}/files/list", s.handleList)
	m.HandleFunc("POST /api/sandboxes/{id}/terminate", s.handleTerminate)
	m.HandleFunc("GET /api/resources", s.handleResources)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeDetail(w, http.StatusNotFound, "Not Found")
	})
	s.mux = m

	a := http.NewServeMux()
	a.HandleFunc("GET /_fake/faults", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.Faults())
	})
	a.HandleFunc("PUT /_fake/faults", func(w http.ResponseWriter, r *http.Request) {
		var f Faults
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			writeDetail(w, http.StatusUnprocessableEntity, err.Error())
			return
		}
		s.SetFaults(f)
		writeJSON(w, http.StatusOK, f)
	})
	a.HandleFunc("POST /_fake/sandboxes/{id}/preempt", func(w http.ResponseWriter, r *http.Request) {
		if !s.Preempt(r.PathValue("id")) {
			writeDetail(w, http.StatusNotFound, "Sandbox not found")
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "preempted"})
	})
	a.HandleFunc("GET /_fake/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string][]string{"sandboxes": s.Sandboxes()})
	})
	s.admin = a
}

// ServeHTTP answers the Sandy API: authentication, then injected faults,
// then the endpoint.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	defer func() {
		s.log.Debug("fake sandy", "method", r.Method, "path", r.URL.Path, "status", rec.status, "duration", time.Since(start))
	}()
	if strings.HasPrefix(r.URL.Path, "/_fake/") {
		if !s.opts.Admin {
			writeDetail(rec, http.StatusNotFound, "Not Found")
			return
		}
		s.admin.ServeHTTP(rec, r)
		return
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		writeDetail(rec, http.StatusServiceUnavailable, "Service shutting down")
		return
	}
	if s.opts.APIKey != "" && r.Header.Get("Authorization") != "Bearer "+s.opts.APIKey {
		detail := "Invalid or missing API key"
		if s.Faults().EchoAuthorization {
			detail += fmt.Sprintf(" (got Authorization: %q)", r.Header.Get("Authorization"))
		}
		writeDetail(rec, http.StatusUnauthorized, detail)
		return
	}
	if status := s.injected(r); status != 0 {
		detail := "Upstream error: worker did not answer"
		if status == http.StatusTooManyRequests {
			detail = "Too many requests; retry later"
		}
		writeDetail(rec, status, detail)
		return
	}
	s.mux.ServeHTTP(rec, r)
}

// injected decides whether this attempt of a logical request fails, and
// with which status (0 = it goes through).
func (s *Server) injected(r *http.Request) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := r.Header.Get("X-Request-Id")
	lr := s.requests[id]
	if lr == nil {
		s.seq++
		f := s.faults
		lr = &logicalRequest{}
		if f.RateLimitEvery > 0 && s.seq%f.RateLimitEvery == 0 {
			for range f.RateLimitBurst {
				lr.plan = append(lr.plan, http.StatusTooManyRequests)
			}
		}
		if f.UpstreamErrorEvery > 0 && s.seq%f.UpstreamErrorEvery == 0 {
			lr.plan = append(lr.plan, http.StatusBadGateway)
		}
		if r.Method == http.MethodPost && r.URL.Path == "/api/sandboxes" {
			for range f.CreateUpstreamErrors {
				lr.plan = append(lr.plan, http.StatusBadGateway)
			}
		}
		if id != "" {
			s.rememberRequest(id, lr)
		}
	}
	lr.attempts++
	lr.seen = time.Now()
	if lr.attempts <= len(lr.plan) {
		return lr.plan[lr.attempts-1]
	}
	return 0
}

// maxRequests bounds the memory of request ids; ids older than a few
// minutes belong to requests whose retries are long over.
const maxRequests = 4096

func (s *Server) rememberRequest(id string, lr *logicalRequest) {
	if len(s.requests) >= maxRequests {
		cutoff := time.Now().Add(-2 * time.Minute)
		for k, v := range s.requests {
			if v.seen.Before(cutoff) {
				delete(s.requests, k)
			}
		}
		if len(s.requests) >= maxRequests {
			clear(s.requests)
		}
	}
	s.requests[id] = lr
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"detail":"encoding the answer failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// writeDetail answers with FastAPI's error shape.
func writeDetail(w http.ResponseWriter, status int, detail string) {
	writeJSON(w, status, map[string]string{"detail": detail})
}

// validationError answers 422 the way FastAPI's request validation does.
func validationError(w http.ResponseWriter, field, msg string, input any) {
	writeJSON(w, http.StatusUnprocessableEntity, map[string]any{
		"detail": []map[string]any{{"type": "value_error", "loc": []string{"body", field}, "msg": msg, "input": input}},
	})
}

// decodeBody decodes a JSON object into fields, leaving unknown keys aside
// as Sandy does. An empty body is an empty object.
func decodeBody(r *http.Request) (map[string]json.RawMessage, error) {
	var raw bytes.Buffer
	if _, err := raw.ReadFrom(http.MaxBytesReader(nil, r.Body, 256<<20)); err != nil {
		return nil, err
	}
	fields := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(raw.Bytes())) == 0 {
		return fields, nil
	}
	if err := json.Unmarshal(raw.Bytes(), &fields); err != nil {
		return nil, err
	}
	return fields, nil
}

// field decodes one field into v; a missing or null field leaves v alone.
// It reports false after answering 422 when the field has the wrong type.
func field(w http.ResponseWriter, fields map[string]json.RawMessage, name string, v any, msg string) bool {
	raw, ok := fields[name]
	if !ok || string(raw) == "null" {
		return true
	}
	if err := json.Unmarshal(raw, v); err != nil {
		var input any
		_ = json.Unmarshal(raw, &input)
		validationError(w, name, msg, input)
		return false
	}
	return true
}

var errBadBody = errors.New("body is not a JSON object")

func badBody(w http.ResponseWriter, err error) {
	writeJSON(w, http.StatusUnprocessableEntity, map[string]any{
		"detail": []map[string]any{{"type": "json_invalid", "loc": []string{"body"}, "msg": fmt.Sprintf("%v: %v", errBadBody, err)}},
	})
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}
