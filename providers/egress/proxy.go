package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/netutil"
)

// Proxy is an HTTP/1.1 forward proxy shared by the sandboxes of one
// provider: absolute-form requests for http:// (and https://) URLs, CONNECT
// for everything else over TCP. Each sandbox gets its own Session with its
// policy, secrets and counters.
type Proxy struct {
	// Resolver looks names up; nil means the system resolver.
	Resolver Resolver
	// RootCAs verify upstream servers where the proxy terminates TLS (hosts
	// a secret is scoped to); nil means the system roots.
	RootCAs *x509.CertPool
	Log     *slog.Logger

	local LocalAddrs
}

// Session is one sandbox's way out.
type Session struct {
	ID      string // names the sandbox in logs
	Policy  Policy
	Secrets []Secret
	// CA signs the certificates shown to the sandbox for the hosts its
	// secrets are scoped to; nil when it has none.
	CA    *CA
	Usage *Usage

	p         *Proxy
	log       *slog.Logger
	dialer    *Dialer
	transport *http.Transport
	rp        *httputil.ReverseProxy

	mu     sync.Mutex
	closed bool
	srvs   map[*http.Server]bool
	conns  map[net.Conn]bool // hijacked: tunnels and TLS-terminated ones
}

// Session returns the way out of one sandbox; call Serve with the
// listener its clients connect to.
func (p *Proxy) Session(id string, policy Policy, secrets []Secret, ca *CA, usage *Usage) *Session {
	log := p.Log
	if log == nil {
		log = slog.Default()
	}
	s := &Session{
		ID: id, Policy: policy, Secrets: secrets, CA: ca, Usage: usage,
		p: p, log: log.With("sandbox_id", id),
		srvs: map[*http.Server]bool{}, conns: map[net.Conn]bool{},
	}
	s.dialer = &Dialer{Policy: policy, Resolver: p.Resolver, Local: &p.local, Usage: usage}
	s.transport = &http.Transport{
		DialContext:           s.dialer.DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: p.RootCAs},
		TLSHandshakeTimeout:   15 * time.Second,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       30 * time.Second,
		ExpectContinueTimeout: time.Second,
		// What the client asked for is what the server sends: the proxy
		// neither adds nor undoes compression.
		DisableCompression: true,
		// HTTP/1.1 upstream keeps upgrades (WebSocket) working through
		// the proxy.
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	s.rp = &httputil.ReverseProxy{
		Rewrite:      s.rewrite,
		Transport:    s.transport,
		ErrorHandler: s.roundTripError,
		ErrorLog:     slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	return s
}

// MaxConnsPerSession bounds the client connections one sandbox has open
// at once: each costs the proxy a descriptor or two, which one sandbox
// must not use up for all.
const MaxConnsPerSession = 512

// Serve answers the clients of ln until ln is closed or Close is called.
// Beyond MaxConnsPerSession open connections, new ones wait in the
// listen queue.
func (s *Session) Serve(ln net.Listener) error {
	srv := s.server(http.HandlerFunc(s.serveProxy))
	if srv == nil {
		return net.ErrClosed
	}
	err := srv.Serve(netutil.LimitListener(ln, MaxConnsPerSession))
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// Close ends every connection of the session. Serve returns.
func (s *Session) Close() {
	s.mu.Lock()
	s.closed = true
	srvs, conns := s.srvs, s.conns
	s.srvs, s.conns = map[*http.Server]bool{}, map[net.Conn]bool{}
	s.mu.Unlock()
	for srv := range srvs {
		srv.Close()
	}
	for c := range conns {
		c.Close()
	}
	s.transport.CloseIdleConnections()
}

func (s *Session) server(h http.Handler) *http.Server {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.srvs[srv] = true
	return srv
}

func (s *Session) forgetServer(srv *http.Server) {
	s.mu.Lock()
	delete(s.srvs, srv)
	s.mu.Unlock()
}

func (s *Session) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = true
	return true
}

func (s *Session) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// serveProxy answers one request of a client in the sandbox.
func (s *Session) serveProxy(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		s.connect(w, r)
		return
	}
	if !r.URL.IsAbs() || (r.URL.Scheme != "http" && r.URL.Scheme != "https") || r.URL.Host == "" {
		http.Error(w, "sandstep egress proxy: send absolute-form requests (GET http://host/path) or CONNECT host:port", http.StatusBadRequest)
		return
	}
	s.rp.ServeHTTP(w, r)
}

// target is where a request goes: set on requests a TLS-terminated
// connection carries, whose URL is only a path.
type targetKey struct{}

// rewrite makes the outgoing request: to the URL's host, never to what a
// Host header claims, with the scoped secrets put in.
func (s *Session) rewrite(pr *httputil.ProxyRequest) {
	if t, ok := pr.In.Context().Value(targetKey{}).(string); ok {
		pr.Out.URL.Scheme = "https"
		pr.Out.URL.Host = t
	}
	pr.Out.Host = ""
	host, port := hostPort(pr.Out.URL.Host, pr.Out.URL.Scheme)
	substitute(pr.Out.Header, s.Secrets, host, port)
}

func (s *Session) roundTripError(w http.ResponseWriter, r *http.Request, err error) {
	host := r.URL.Host
	if t, ok := r.Context().Value(targetKey{}).(string); ok {
		host = t
	}
	s.fail(w, host, err)
}

// fail answers a request that could not be forwarded: 403 with
// DeniedHeader for a policy refusal, 502 or 504 otherwise.
func (s *Session) fail(w http.ResponseWriter, host string, err error) {
	if d, ok := AsDenied(err); ok {
		s.log.Info("egress denied", "host", d.Host, "addr", d.Addr, "reason", d.Reason, "range", d.Range)
		w.Header().Set(DeniedHeader, d.Header())
		http.Error(w, "sandstep egress proxy: "+d.Error(), http.StatusForbidden)
		return
	}
	s.log.Debug("egress failed", "host", host, "err", err)
	status, kind := http.StatusBadGateway, FailedConnect
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		status, kind = http.StatusGatewayTimeout, FailedTimeout
	}
	// The header tells the proxy's own failure from a 502 or 504 that the
	// server sent: the crawler reports the one as an unreachable page, the
	// other as the page's status.
	w.Header().Set(FailedHeader, kind)
	http.Error(w, fmt.Sprintf("sandstep egress proxy: %s: %v", host, err), status)
}

// FailedHeader marks an answer of the proxy itself when it could not reach
// the host (FailedConnect) or the host did not answer in time
// (FailedTimeout); the body says why.
const (
	FailedHeader  = "X-Sandstep-Egress-Failed"
	FailedConnect = "connect"
	FailedTimeout = "timeout"
)

// hostPort splits an authority, filling the scheme's default port.
func hostPort(authority, scheme string) (string, uint16) {
	host, p, err := net.SplitHostPort(authority)
	if err != nil {
		host = authority
		p = "80"
		if scheme == "https" {
			p = "443"
		}
	}
	n, _ := strconv.ParseUint(p, 10, 16)
	return host, uint16(n)
}

// mitm reports whether CONNECTs to host:port are terminated here: the
// session has a secret scoped to it.
func (s *Session) mitm(host string, port uint16) bool {
	if s.CA == nil {
		return false
	}
	for i := range s.Secrets {
		if s.Secrets[i].scopedTo(host, port) {
			return true
		}
	}
	return false
}

// connect opens a tunnel: a plain TCP relay, or for a host a secret is
// scoped to, a TLS connection this proxy terminates.
func (s *Session) connect(w http.ResponseWriter, r *http.Request) {
	authority := r.Host
	host, portStr, err := net.SplitHostPort(authority)
	port, perr := strconv.ParseUint(portStr, 10, 16)
	if err != nil || perr != nil || port == 0 {
		http.Error(w, "sandstep egress proxy: CONNECT needs host:port", http.StatusBadRequest)
		return
	}
	var up net.Conn
	if s.mitm(host, uint16(port)) {
		// Decide now, so a refused host gets its 403 before any TLS.
		if _, err := s.dialer.Resolve(r.Context(), host, uint16(port)); err != nil {
			s.fail(w, authority, err)
			return
		}
	} else if up, err = s.dialer.DialContext(r.Context(), "tcp", authority); err != nil {
		s.fail(w, authority, err)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "sandstep egress proxy: cannot tunnel", http.StatusInternalServerError)
		return
	}
	conn, brw, err := hj.Hijack()
	if err != nil {
		if up != nil {
			up.Close()
		}
		return
	}
	client := net.Conn(conn)
	if n := brw.Reader.Buffered(); n > 0 {
		// The client spoke before our answer (a TLS hello): keep it.
		b, _ := brw.Reader.Peek(n)
		client = &prefixConn{Conn: conn, prefix: append([]byte(nil), b...)}
	}
	if !s.track(conn) {
		conn.Close()
		if up != nil {
			up.Close()
		}
		return
	}
	defer s.untrack(conn)
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection Established\r\n\r\n"); err != nil {
		conn.Close()
		if up != nil {
			up.Close()
		}
		return
	}
	if up == nil {
		s.terminate(client, host, authority)
		return
	}
	if !s.track(up) {
		up.Close()
		conn.Close()
		return
	}
	defer s.untrack(up)
	Relay(client, up)
}

// terminate serves the requests of a TLS connection the sandbox opened to
// authority, presenting a certificate of the sandbox's CA, and forwards
// them to authority over a verified TLS connection of its own.
func (s *Session) terminate(client net.Conn, host, authority string) {
	defer client.Close()
	leaf, err := s.CA.leaf(normalizeHost(host))
	if err != nil {
		s.log.Warn("egress: issuing a certificate", "host", host, "err", err)
		return
	}
	tc := tls.Server(client, &tls.Config{
		Certificates: []tls.Certificate{*leaf},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	ctx := context.WithValue(context.Background(), targetKey{}, authority)
	srv := s.server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), targetKey{}, authority)))
	}))
	if srv == nil {
		return
	}
	defer s.forgetServer(srv)
	srv.BaseContext = func(net.Listener) context.Context { return ctx }
	ln := newOneConnListener(tc)
	srv.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed || st == http.StateHijacked {
			ln.done()
		}
	}
	_ = srv.Serve(ln)
	ln.wait()
}

// Relay copies both ways until both sides are done, half-closing each
// direction as it ends, then closes both.
func Relay(a, b net.Conn) {
	var wg sync.WaitGroup
	cp := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			dst.Close()
		}
	}
	wg.Add(2)
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
	a.Close()
	b.Close()
}

// prefixConn replays bytes read ahead before the connection's own.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(b []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(b, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

func (c *prefixConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// oneConnListener hands out one connection, then blocks until it is done.
type oneConnListener struct {
	mu     sync.Mutex
	c      net.Conn
	closed chan struct{}
	once   sync.Once
}

func newOneConnListener(c net.Conn) *oneConnListener {
	return &oneConnListener{c: c, closed: make(chan struct{})}
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.c
	l.c = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConnListener) done()          { l.once.Do(func() { close(l.closed) }) }
func (l *oneConnListener) wait()          { <-l.closed }
func (l *oneConnListener) Close() error   { l.done(); return nil }
func (l *oneConnListener) Addr() net.Addr { return oneConnAddr{} }

type oneConnAddr struct{}

func (oneConnAddr) Network() string { return "tcp" }
func (oneConnAddr) String() string  { return "sandbox" }
