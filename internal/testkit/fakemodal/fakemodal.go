// Package fakemodal is a fake Modal for tests: Modal's own control-plane
// (modal.client.ModalClient) and task command router
// (modal.task_command_router.TaskCommandRouter) services, implemented on
// the server stubs generated into the official Go SDK
// (github.com/modal-labs/modal-client/go/proto/modal_proto), so that both the
// sandstep provider and the SDK itself talk to it unchanged
// (shared/contracts/modal-api.md).
//
// It implements what the Sandbox V2 backend offers a client that creates
// named, tagged sandboxes and runs commands in them: token exchange with
// expiring JWTs, apps, registry images, SandboxCreateV2, GetFromNameV2,
// GetTaskIdV2, GetCommandRouterAccess, WaitV2, TerminateV2, ListV2 with tags,
// TagsGetV2, GetTunnelsV2, volumes (GetOrCreate, Delete, List, and mounts
// at create, read-only or not), images built on a base image (ENV layers),
// published image names (Publish, GetByTag, NameDelete, ListTags), and on
// the router TaskSnapshotFilesystem (images.go), TaskExecStart, StdioRead, Wait,
// Poll, StdinWrite and StdinWriteStream. Commands run under bubblewrap over
// the host's root, read-only, with /workspace, /tmp, /root and /opt of
// each sandbox's own (the host's /opt entries bound into the last), which
// a filesystem snapshot keeps; a sandbox whose network is blocked gets no network
// namespace of the host's. Images are recorded, not built: every sandbox
// sees the host's root whatever its image says.
//
// Quirks of the real service it keeps: a name held by a running sandbox
// gives ALREADY_EXISTS; lookups by name find running sandboxes only;
// finished sandboxes answer Wait with their result (TIMEOUT after
// timeout_secs, IDLE_TIMEOUT after idle_timeout_secs without an exec or
// stdin, TERMINATED after Terminate); router calls into a container that is
// gone answer NOT_FOUND with Modal's wording; command router access for a
// finished sandbox is FAILED_PRECONDITION. Faults switch on stale
// containers (Vanish), rate limits, UNAVAILABLE bursts, lost create answers
// and slow creates.
package fakemodal

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sandstep/sandstep/internal/testkit/bwrapbox"
)

// Options configure a fake.
type Options struct {
	// TokenID and TokenSecret are the credentials every control-plane call
	// must carry (x-modal-token-id, x-modal-token-secret).
	TokenID, TokenSecret string
	// TokenTTL is the lifetime of the JWTs AuthTokenGet hands out; 20
	// minutes by default, as Modal assumes without an exp claim.
	TokenTTL time.Duration
	// FirstTokenTTL, when set, is the lifetime of the first token only: a
	// short one makes a client refresh before its first calls are done.
	FirstTokenTTL time.Duration
	// RouterTokenTTL is the lifetime of command router JWTs (5 minutes).
	RouterTokenTTL time.Duration
	// BwrapPath is bubblewrap; "" finds bwrap on PATH.
	BwrapPath string
	// Dir holds the sandboxes' directories; "" makes a temporary one.
	Dir    string
	Logger *slog.Logger
	Faults Faults
}

// Faults are the switchable failures.
type Faults struct {
	// CreatesPerSecond limits SandboxCreateV2 per second (Modal's default is
	// 5); a create over it answers RESOURCE_EXHAUSTED carrying an
	// RPCRetryPolicy that says when to come back. 0 = no limit.
	CreatesPerSecond int
	// UnavailableEvery makes every n-th control-plane call (AuthTokenGet
	// aside) answer UNAVAILABLE, UnavailableBurst times in a row (1 by
	// default). 0 = never.
	UnavailableEvery int
	UnavailableBurst int
	// RouterUnavailableEvery makes every n-th command router call answer
	// UNAVAILABLE before it is handled (streams: before the first message),
	// as a router restarting does. 0 = never.
	RouterUnavailableEvery int
	// LoseCreateAnswers makes the first n creates make their sandbox and
	// then answer UNAVAILABLE, as when the answer is lost on the way.
	LoseCreateAnswers int
	// SlowCreate delays every create before it makes the sandbox; a
	// client that goes away meanwhile makes none.
	SlowCreate time.Duration
	// EchoCredentials makes the fake's refusals and UNAVAILABLE answers
	// repeat the credential headers of the request, as a misbehaving proxy
	// does: a client must keep them out of its logs and errors anyway.
	EchoCredentials bool
	// SlowCreateAnswer delays every create answer after the sandbox is
	// made, whether the client waits or not: a client that dies meanwhile
	// leaves a sandbox it never heard of.
	SlowCreateAnswer time.Duration
}

// ErrNoBubblewrap is wrapped by New's error when bubblewrap cannot run a
// command here.
var ErrNoBubblewrap = errors.New("fakemodal: bubblewrap (Debian package bubblewrap) is needed to run commands and does not work here")

// Server is a fake Modal.
type Server struct {
	pb.UnimplementedModalClientServer
	opts     Options
	log      *slog.Logger
	bwrap    string
	rootArgs []string
	optBinds []string // the host's /opt entries, bound over each sandbox's own /opt
	dir      string
	ownDir   bool
	key      []byte // signs the JWTs
	instance string
	router   routerServer

	mu          sync.Mutex
	faults      Faults
	calls       int // control-plane calls, for UnavailableEvery
	routerCalls int
	burst       int // UNAVAILABLE answers still due in the current burst
	tokens      int
	creates     []time.Time        // create times in the last second
	apps        map[string]string  // "env/name" -> app id
	images      map[string]*image  // by image id
	published   map[string]*named  // "env/name:tag" -> the image it names
	snapshots   map[string]string  // snapshot_id -> image id (the idempotency key)
	volumes     map[string]*volume // "env/name" -> volume
	sandboxes   map[string]*sandbox
	tasks       map[string]*sandbox // task id -> sandbox
	stats       Stats
	routerAddr  string
	closed      bool
	wg          sync.WaitGroup
	stop        chan struct{}
}

// Stats counts what happened, for tests that check that a fault was met.
type Stats struct {
	Creates, RateLimited, Unavailable, RouterUnavailable, LostCreates, Unauthenticated, TokensIssued, Execs int
}

// New checks that bubblewrap works and returns a fake that serves nothing
// yet (see Start, or Register on a grpc.Server of your own).
func New(opts Options) (*Server, error) {
	if opts.TokenTTL <= 0 {
		opts.TokenTTL = 20 * time.Minute
	}
	if opts.RouterTokenTTL <= 0 {
		opts.RouterTokenTTL = 5 * time.Minute
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
	rootArgs, err := bwrapbox.RootArgs("/tmp", "/root", "/workspace", "/opt")
	if err != nil {
		return nil, err
	}
	// /opt is each sandbox's own (a snapshot keeps what a build put
	// there), with the host's entries of /opt bound into it read-only.
	rootArgs = append(rootArgs, "--dir", "/opt")
	var optBinds []string
	if entries, err := os.ReadDir("/opt"); err == nil {
		for _, e := range entries {
			optBinds = append(optBinds, "--ro-bind", "/opt/"+e.Name(), "/opt/"+e.Name())
		}
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	s := &Server{
		opts: opts, log: log, bwrap: bwrap, rootArgs: rootArgs, optBinds: optBinds, dir: opts.Dir, key: key,
		instance:  randomID(8),
		faults:    opts.Faults,
		apps:      map[string]string{},
		images:    map[string]*image{},
		published: map[string]*named{},
		snapshots: map[string]string{},
		volumes:   map[string]*volume{},
		sandboxes: map[string]*sandbox{},
		tasks:     map[string]*sandbox{},
	}
	s.router.s = s
	if s.dir == "" {
		d, err := os.MkdirTemp("", "fakemodal-")
		if err != nil {
			return nil, fmt.Errorf("fakemodal: %w", err)
		}
		s.dir, s.ownDir = d, true
	} else if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, fmt.Errorf("fakemodal: %w", err)
	}
	if err := s.probe(); err != nil {
		s.removeOwnDir()
		return nil, err
	}
	s.stop = make(chan struct{})
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case now := <-t.C:
				s.idleSweep(now)
			}
		}
	}()
	return s, nil
}

func (s *Server) removeOwnDir() {
	if s.ownDir {
		_ = os.RemoveAll(s.dir)
	}
}

// Register puts both services on g, which must serve plaintext HTTP/2 at
// addr (host:port), the address handed out as the command router's.
func (s *Server) Register(g *grpc.Server, addr string) {
	s.mu.Lock()
	s.routerAddr = addr
	s.mu.Unlock()
	pb.RegisterModalClientServer(g, s)
	pb.RegisterTaskCommandRouterServer(g, &s.router)
}

// Interceptors are the checks every call passes: credentials and auth
// tokens on the control plane, the router JWT on the router, and the
// injected faults. Start installs them; a caller of Register installs them
// with grpc.ChainUnaryInterceptor / ChainStreamInterceptor.
func (s *Server) Interceptors() (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := s.admit(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if err := s.admit(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return h(srv, ss)
	}
	return unary, stream
}

const (
	controlPrefix = "/modal.client.ModalClient/"
	routerPrefix  = "/modal.task_command_router.TaskCommandRouter/"
)

// admit checks a call's credentials and applies the faults.
func (s *Server) admit(ctx context.Context, method string) error {
	md, _ := metadata.FromIncomingContext(ctx)
	get := func(k string) string {
		if v := md.Get(k); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	s.mu.Lock()
	echo := ""
	if s.faults.EchoCredentials {
		for _, k := range []string{"x-modal-token-id", "x-modal-token-secret", "x-modal-auth-token", "authorization"} {
			echo += fmt.Sprintf(" %s: %s", k, get(k))
		}
		echo = " (request headers:" + echo + ")"
	}
	s.mu.Unlock()
	switch {
	case strings.HasPrefix(method, controlPrefix):
		// Constant-time comparisons; never echo what was sent.
		if !hmac.Equal([]byte(get("x-modal-token-id")), []byte(s.opts.TokenID)) ||
			!hmac.Equal([]byte(get("x-modal-token-secret")), []byte(s.opts.TokenSecret)) {
			s.count(func(st *Stats) { st.Unauthenticated++ })
			return status.Error(codes.Unauthenticated, "Token ID or secret is invalid. Please check your Modal token."+echo)
		}
		name := strings.TrimPrefix(method, controlPrefix)
		if name == "AuthTokenGet" {
			return nil
		}
		if err := s.verifyJWT(get("x-modal-auth-token"), "auth"); err != nil {
			s.count(func(st *Stats) { st.Unauthenticated++ })
			return status.Error(codes.Unauthenticated, "invalid x-modal-auth-token: "+err.Error()+echo)
		}
		return s.injectUnavailable(echo)
	case strings.HasPrefix(method, routerPrefix):
		auth := get("authorization")
		tok, ok := strings.CutPrefix(auth, "Bearer ")
		if !ok {
			return status.Error(codes.Unauthenticated, "missing bearer token"+echo)
		}
		if err := s.verifyJWT(tok, "router"); err != nil {
			s.count(func(st *Stats) { st.Unauthenticated++ })
			return status.Error(codes.Unauthenticated, "invalid command router token: "+err.Error()+echo)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if n := s.faults.RouterUnavailableEvery; n > 0 {
			s.routerCalls++
			if s.routerCalls%n == 0 {
				s.stats.RouterUnavailable++
				return status.Error(codes.Unavailable, "command router unavailable"+echo)
			}
		}
	}
	return nil
}

func (s *Server) injectUnavailable(echo string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.faults.UnavailableEvery <= 0 {
		return nil
	}
	if s.burst > 0 {
		s.burst--
		s.stats.Unavailable++
		return status.Error(codes.Unavailable, "upstream connect error or disconnect/reset before headers"+echo)
	}
	s.calls++
	if s.calls%s.faults.UnavailableEvery == 0 {
		s.burst = max(s.faults.UnavailableBurst, 1) - 1
		s.stats.Unavailable++
		return status.Error(codes.Unavailable, "upstream connect error or disconnect/reset before headers"+echo)
	}
	return nil
}

func (s *Server) count(f func(*Stats)) {
	s.mu.Lock()
	f(&s.stats)
	s.mu.Unlock()
}

// Stats returns the counters so far.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// SetFaults replaces the faults in force.
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	s.faults = f
	s.burst = 0
	s.mu.Unlock()
}

// jwt returns an HS256 JWT for aud, valid for ttl.
func (s *Server) jwt(aud, sub string, ttl time.Duration) string {
	enc := base64.RawURLEncoding
	head := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	claims, _ := json.Marshal(map[string]any{"aud": aud, "sub": sub, "exp": time.Now().Add(ttl).Unix(), "jti": randomID(8)})
	body := head + "." + enc.EncodeToString(claims)
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(body))
	return body + "." + enc.EncodeToString(m.Sum(nil))
}

func (s *Server) verifyJWT(tok, aud string) error {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return errors.New("malformed token")
	}
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(parts[0] + "." + parts[1]))
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || !hmac.Equal(sig, m.Sum(nil)) {
		return errors.New("bad signature")
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return errors.New("malformed token")
	}
	var c struct {
		Aud string `json:"aud"`
		Exp int64  `json:"exp"`
	}
	if err := json.Unmarshal(raw, &c); err != nil || c.Aud != aud {
		return errors.New("token is not for this service")
	}
	if time.Now().Unix() >= c.Exp {
		return errors.New("token expired")
	}
	return nil
}

// Running is a fake serving on a loopback port.
type Running struct {
	*Server
	// URL is the control plane's address for clients: http://127.0.0.1:PORT
	// (plaintext; the router URL handed out is https://, which Modal's
	// clients dial in plaintext when the server is on localhost).
	URL string
	g   *grpc.Server
	lis net.Listener
}

// Start makes a fake and serves it on addr ("" = a free port on
// 127.0.0.1). Addresses other than loopback are refused.
func Start(opts Options, addr string) (*Running, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	if err := checkLoopback(addr); err != nil {
		return nil, err
	}
	s, err := New(opts)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		s.removeOwnDir()
		return nil, fmt.Errorf("fakemodal: %w", err)
	}
	unary, stream := s.Interceptors()
	g := grpc.NewServer(grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream),
		grpc.MaxRecvMsgSize(100<<20), grpc.MaxSendMsgSize(100<<20))
	s.Register(g, lis.Addr().String())
	go func() { _ = g.Serve(lis) }()
	return &Running{Server: s, URL: "http://" + lis.Addr().String(), g: g, lis: lis}, nil
}

// Close terminates every sandbox, stops serving and removes the fake's
// files.
func (r *Running) Close() error {
	r.Server.shutdown()
	r.g.Stop()
	r.Server.wg.Wait()
	r.Server.removeOwnDir()
	return nil
}

func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("fakemodal: address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("fakemodal: serves on loopback only, not %q", host)
	}
	return nil
}

func randomID(n int) string {
	const alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func itoa(n int) string { return strconv.Itoa(n) }
