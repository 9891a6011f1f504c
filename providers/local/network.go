package local

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/egress"
)

// Every sandbox has a network namespace of its own with nothing but a
// loopback interface. A sandbox whose policy lets anything out gets one way
// out: the agent, inside that namespace, listens on 127.0.0.1:egressPort
// and hands the listening socket to the plugin (opEgress, SCM_RIGHTS); the
// plugin accepts on it and runs the egress proxy, which enforces the
// policy on resolved addresses and substitutes host-scoped secrets. No byte
// passes through the agent, and code that ignores the proxy variables has
// no route anywhere: not to the host's loopback, not to its other
// addresses, not to private networks. The agent keeps the socket, so a
// restarted plugin asks for it again and the way out survives.
const (
	egressPort = 3128
	egressURL  = "http://127.0.0.1:3128"
	opEgress   = "egress"
)

// egressFile is a sandbox's egress configuration, kept in its directory
// (mode 0600): the policy, the host-scoped secrets with their values and
// the sandbox CA with its key, so that a restarted plugin serves the
// sandbox as before. state_dir is private to the plugin's uid and never
// mounted into a sandbox; this is where the CA key and the real values of
// host-scoped secrets live, and nowhere else on disk.
const egressFile = "egress.json"

// usageFile holds the sandbox's network counters, to which every plugin
// process serving the sandbox adds what it counted.
const usageFile = "network.json"

type egressState struct {
	Mode         providers.NetworkMode `json:"mode"`
	AllowHosts   []string              `json:"allow_hosts,omitempty"`
	AllowPrivate []string              `json:"allow_private,omitempty"`
	Secrets      []egressSecret        `json:"secrets,omitempty"`
	CACert       string                `json:"ca_cert,omitempty"`
	CAKey        string                `json:"ca_key,omitempty"`
}

type egressSecret struct {
	Name        string   `json:"name"`
	Value       string   `json:"value"`
	Placeholder string   `json:"placeholder"`
	Hosts       []string `json:"hosts"`
}

// sandboxNet is what create decides about a sandbox's network before it
// starts: the state to serve it with, the environment its commands get, and
// the CA bundle that replaces the system one inside when it has a CA.
type sandboxNet struct {
	state      egressState
	env        map[string]string
	bundle     []byte
	bundlePath string
}

// caEnv are the variables that make common clients trust the sandbox's
// bundle (system roots plus the sandbox CA). OpenSSL, Go, Python's ssl and
// curl also read the file at the system path, which the bundle replaces.
var caEnv = []string{
	"SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
	"DENO_CERT", "PIP_CERT", "GIT_SSL_CAINFO", "AWS_CA_BUNDLE", "CARGO_HTTP_CAINFO",
}

// prepareNetwork decides rec's network from the spec and the defaults: its
// policy, placeholders for the host-scoped secrets, a CA when one is needed,
// and the environment that points clients at the way out. It returns the
// secrets that remain plain environment variables.
func (p *Provider) prepareNetwork(rec *sandboxRecord, spec providers.CreateSpec, defaults providers.SandboxDefaults) (*sandboxNet, map[string]string, error) {
	const op = "create"
	pol := spec.Network
	if pol.Mode == "" {
		pol = defaults.Network
	}
	if pol.Mode == "" {
		pol.Mode = providers.NetworkNone
	}
	rec.Network = pol.Mode
	switch pol.Mode {
	case providers.NetworkNone, providers.NetworkAll, providers.NetworkAllowlist:
	default:
		return nil, nil, providers.Errorf(providers.InvalidArgument, op, "unknown network mode %q", pol.Mode)
	}
	hosts := pol.AllowHosts
	if pol.Mode != providers.NetworkAllowlist {
		hosts = nil
	}
	if _, err := egress.NewPolicy(pol.Mode, hosts, defaults.AllowPrivate); err != nil {
		return nil, nil, providers.Errorf(providers.InvalidArgument, op, "network policy: %v", err)
	}
	nw := &sandboxNet{
		state: egressState{Mode: pol.Mode, AllowHosts: hosts, AllowPrivate: defaults.AllowPrivate},
		env:   map[string]string{},
	}
	plain := map[string]string{}
	for _, sec := range spec.Secrets {
		if len(sec.Hosts) == 0 {
			plain[sec.Name] = sec.Value
			continue
		}
		es, err := egress.NewSecret(sec.Name, sec.Value, sec.Hosts)
		if err != nil {
			// The value stays out of the message.
			return nil, nil, providers.Errorf(providers.InvalidArgument, op, "secret %q: %v", sec.Name, errors.Unwrap(err))
		}
		nw.state.Secrets = append(nw.state.Secrets, egressSecret{Name: sec.Name, Value: sec.Value, Placeholder: es.Placeholder, Hosts: sec.Hosts})
		nw.env[sec.Name] = es.Placeholder
	}
	if pol.Mode == providers.NetworkNone {
		return nw, plain, nil
	}
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", egress.ProxyEnv} {
		nw.env[k] = egressURL
	}
	// The sandbox's own loopback is its own: only it goes direct. A host
	// address in allow_private is reached through the proxy like any other.
	nw.env["NO_PROXY"] = "localhost,127.0.0.1,::1"
	nw.env["no_proxy"] = nw.env["NO_PROXY"]
	// Node.js 22.21 and 24.5 on read the proxy variables with this set.
	nw.env["NODE_USE_ENV_PROXY"] = "1"
	if len(nw.state.Secrets) > 0 {
		ca, err := egress.NewCA(rec.ID, rec.ExpiresAt)
		if err != nil {
			return nil, nil, providers.Wrap(providers.Internal, op, fmt.Errorf("sandbox CA: %w", err))
		}
		nw.state.CACert, nw.state.CAKey = string(ca.CertPEM()), string(ca.KeyPEM())
		path, system := egress.SystemBundle()
		if path == "" {
			path = egress.SystemBundles[0]
		}
		nw.bundlePath = path
		nw.bundle = append(append(append([]byte(nil), system...), '\n'), ca.CertPEM()...)
		for _, k := range caEnv {
			nw.env[k] = path
		}
	}
	return nw, plain, nil
}

func (nw *sandboxNet) port() int {
	if nw.state.Mode == providers.NetworkNone {
		return 0
	}
	return egressPort
}

// bundleFile returns the CA bundle as a file bwrap reads (--ro-bind-data),
// so that no host path of it shows in the sandbox's mountinfo; nil when the
// sandbox has no CA.
func (nw *sandboxNet) bundleFile() (*os.File, error) {
	if nw.bundle == nil {
		return nil, nil
	}
	fd, err := unix.MemfdCreate("sandstep-ca-bundle", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "ca-bundle")
	if _, err := f.Write(nw.bundle); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// egressServer is the way out of one sandbox this process serves.
type egressServer struct {
	session *egress.Session
	ln      net.Listener
	usage   *egress.Usage
	done    chan struct{}
}

// startEgress saves the sandbox's egress state and starts serving it.
func (p *Provider) startEgress(ctx context.Context, s settings, id string, nw *sandboxNet) error {
	if nw.state.Mode == providers.NetworkNone {
		return nil
	}
	if err := writeJSONFile(filepath.Join(s.sandboxDir(id), egressFile), nw.state, 0o600); err != nil {
		return fmt.Errorf("saving the egress state: %w", err)
	}
	return p.serveEgress(ctx, s, id, nw.state)
}

// resumeEgress serves the way out of a sandbox another plugin process
// started, as its saved state says.
func (p *Provider) resumeEgress(s settings, id string) {
	var st egressState
	b, err := os.ReadFile(filepath.Join(s.sandboxDir(id), egressFile))
	if errors.Is(err, os.ErrNotExist) {
		return // network none, or a sandbox that never got a way out
	}
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = p.serveEgress(ctx, s, id, st)
		cancel()
	}
	if err != nil {
		p.log.Warn("the sandbox's way out cannot be served: it has no network until it ends", "sandbox_id", id, "err", err)
	}
}

func (p *Provider) serveEgress(ctx context.Context, s settings, id string, st egressState) error {
	hosts := st.AllowHosts
	pol, err := egress.NewPolicy(st.Mode, hosts, st.AllowPrivate)
	if err != nil {
		return err
	}
	var secrets []egress.Secret
	for _, sec := range st.Secrets {
		es, err := egress.NewSecret(sec.Name, sec.Value, sec.Hosts)
		if err != nil {
			return fmt.Errorf("secret %s: %w", sec.Name, errors.Unwrap(err))
		}
		es.Placeholder = sec.Placeholder
		secrets = append(secrets, es)
	}
	var ca *egress.CA
	if st.CACert != "" {
		if ca, err = egress.ParseCA([]byte(st.CACert), []byte(st.CAKey)); err != nil {
			return err
		}
	}
	ln, err := fetchEgressListener(ctx, s, id)
	if err != nil {
		return err
	}
	p.mu.Lock()
	proxy := p.egress
	p.mu.Unlock()
	es := &egressServer{usage: &egress.Usage{}, ln: ln, done: make(chan struct{})}
	es.session = proxy.Session(id, pol, secrets, ca, es.usage)
	p.egressMu.Lock()
	if old := p.serving[id]; old != nil {
		p.egressMu.Unlock()
		ln.Close()
		return nil
	}
	p.serving[id] = es
	p.egressMu.Unlock()
	go func() {
		defer close(es.done)
		if err := es.session.Serve(ln); err != nil {
			p.log.Warn("egress proxy stopped", "sandbox_id", id, "err", err)
		}
	}()
	return nil
}

// stopEgress stops serving a sandbox's way out and saves its counters.
func (p *Provider) stopEgress(s settings, id string) {
	p.egressMu.Lock()
	es := p.serving[id]
	delete(p.serving, id)
	p.egressMu.Unlock()
	if es == nil {
		return
	}
	es.ln.Close()
	es.session.Close()
	<-es.done
	if err := addUsage(s, id, es.usage.Take()); err != nil && !errors.Is(err, os.ErrNotExist) {
		p.log.Warn("saving network usage", "sandbox_id", id, "err", err)
	}
}

// stopAllEgress stops serving every sandbox's way out, saving counters.
func (p *Provider) stopAllEgress(s settings) {
	for _, id := range p.servingIDs() {
		p.stopEgress(s, id)
	}
}

// servingIDs lists the sandboxes whose ways out this process serves.
func (p *Provider) servingIDs() []string {
	p.egressMu.Lock()
	defer p.egressMu.Unlock()
	ids := make([]string, 0, len(p.serving))
	for id := range p.serving {
		ids = append(ids, id)
	}
	return ids
}

// networkUsage returns what a sandbox sent and received so far, by every
// plugin process that served it.
func (p *Provider) networkUsage(s settings, id string) providers.NetworkUsage {
	p.egressMu.Lock()
	es := p.serving[id]
	p.egressMu.Unlock()
	if es != nil {
		if err := addUsage(s, id, es.usage.Take()); err != nil {
			p.log.Warn("saving network usage", "sandbox_id", id, "err", err)
		}
	}
	// Every connection of the sandbox goes through its proxy (or none
	// leaves it), so the counts are measured, zeros included.
	u, _ := readUsage(s, id)
	u.Measured = true
	return u
}

// flushUsage saves the counters of every sandbox this process serves, so
// that a crash loses little of them.
func (p *Provider) flushUsage(s settings) {
	for _, id := range p.servingIDs() {
		p.networkUsage(s, id)
	}
}

func readUsage(s settings, id string) (providers.NetworkUsage, error) {
	var u providers.NetworkUsage
	b, err := os.ReadFile(filepath.Join(s.sandboxDir(id), usageFile))
	if err != nil {
		return u, err
	}
	return u, json.Unmarshal(b, &u)
}

// addUsage adds delta to the sandbox's saved counters, under a lock that
// every plugin process sharing state_dir takes.
func addUsage(s settings, id string, delta providers.NetworkUsage) error {
	if delta.BytesIn == 0 && delta.BytesOut == 0 && delta.Connections == 0 && delta.Denied == 0 && len(delta.Hosts) == 0 {
		return nil
	}
	dir := s.sandboxDir(id)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lock, err := lockFile(ctx, filepath.Join(dir, usageFile+".lock"))
	if err != nil {
		return err
	}
	defer lock.Close()
	cur, err := readUsage(s, id)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return writeJSONFile(filepath.Join(dir, usageFile), egress.Merge(cur, delta), 0o600)
}

// fetchEgressListener asks a sandbox's agent for its egress listener and
// receives the socket itself.
func fetchEgressListener(ctx context.Context, s settings, id string) (net.Listener, error) {
	f, err := fetchFD(ctx, s, id, request{Op: opEgress})
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return net.FileListener(f)
}

// fetchFD makes a request of a sandbox's agent whose answer carries one
// descriptor (SCM_RIGHTS) and returns it.
func fetchFD(ctx context.Context, s settings, id string, req request) (*os.File, error) {
	nc, err := dialUnix(ctx, s.sandboxDir(id)+"/agent.sock")
	if err != nil {
		return nil, fmt.Errorf("connecting to the agent: %w", err)
	}
	defer nc.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		return nil, errors.New("the agent's connection is not a unix socket")
	}
	if err := (&frameWriter{w: nc}).writeJSON(frameHeader, req); err != nil {
		return nil, err
	}
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, fmt.Errorf("reading the agent's answer: %w", err)
	}
	var files []*os.File
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range msgs {
			fds, err := unix.ParseUnixRights(&m)
			if err != nil {
				continue
			}
			for _, fd := range fds {
				files = append(files, os.NewFile(uintptr(fd), req.Op))
			}
		}
	}
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	// The answer is one result frame; a short read leaves its tail in the
	// socket.
	if n < 5 {
		m, err := io.ReadAtLeast(uc, buf[n:], 5-n)
		if err != nil {
			closeAll()
			return nil, err
		}
		n += m
	}
	size := int(binary.BigEndian.Uint32(buf[1:5]))
	if buf[0] != frameResult || size > len(buf)-5 {
		closeAll()
		return nil, fmt.Errorf("unexpected answer from the agent (frame %q, %d bytes)", buf[0], size)
	}
	if n < 5+size {
		if _, err := io.ReadFull(uc, buf[n:5+size]); err != nil {
			closeAll()
			return nil, err
		}
	}
	var res result
	if err := json.Unmarshal(buf[5:5+size], &res); err != nil {
		closeAll()
		return nil, err
	}
	if err := res.Error.err(req.Op); err != nil {
		closeAll()
		return nil, err
	}
	if len(files) != 1 {
		closeAll()
		return nil, fmt.Errorf("the agent sent %d descriptors, want 1", len(files))
	}
	return files[0], nil
}

// listenEgress opens the agent's egress listener in the sandbox's network
// namespace.
func listenEgress(port int) (*net.TCPListener, error) {
	return net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
}

// sendEgress answers opEgress with the listening socket.
func (a *agent) sendEgress(conn net.Conn) {
	if a.egress == nil {
		_ = (&frameWriter{w: conn}).writeJSON(frameResult, errResult(providers.FailedPrecondition, "this sandbox has no network"))
		return
	}
	f, err := a.egress.File()
	if err != nil {
		_ = (&frameWriter{w: conn}).writeJSON(frameResult, errResult(providers.Internal, "egress listener: %v", err))
		return
	}
	defer f.Close()
	a.sendFD(conn, f)
}

// sendFD answers a request with a descriptor: a result frame carrying it.
func (a *agent) sendFD(conn net.Conn, f *os.File) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		_ = (&frameWriter{w: conn}).writeJSON(frameResult, errResult(providers.Internal, "not a unix socket"))
		return
	}
	payload, _ := json.Marshal(result{})
	frame := make([]byte, 5+len(payload))
	frame[0] = frameResult
	binary.BigEndian.PutUint32(frame[1:5], uint32(len(payload)))
	copy(frame[5:], payload)
	if _, _, err := uc.WriteMsgUnix(frame, unix.UnixRights(int(f.Fd())), nil); err != nil {
		a.log.Warn("sending a descriptor", "err", err)
	}
}

// newEgressProxy builds the proxy from the provider's settings: the DNS
// servers it resolves with and the extra roots it verifies upstream TLS
// against.
func newEgressProxy(ls Settings, log *slog.Logger) (*egress.Proxy, error) {
	bad := func(format string, args ...any) (*egress.Proxy, error) {
		return nil, providers.Errorf(providers.InvalidArgument, "configure", "provider.local: "+format, args...)
	}
	r, err := egress.NewResolver(ls.DNSServers)
	if err != nil {
		return bad("dns_servers: %v", err)
	}
	roots, err := egress.RootPool(ls.UpstreamCAFiles)
	if err != nil {
		return bad("upstream_ca_files: %v", err)
	}
	return &egress.Proxy{Resolver: r, RootCAs: roots, Log: log.With("component", "egress")}, nil
}
