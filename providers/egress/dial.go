package egress

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// ProxyEnv names the environment variable through which a provider tells
// programs in a sandbox where its egress proxy is (an http:// URL). Unlike
// HTTP_PROXY, which an environment may set for its own reasons, it always
// means a proxy that enforces the sandbox's policy; sandstep's crawler
// relies on it.
const ProxyEnv = "SANDSTEP_EGRESS_PROXY"

// LocalAddrs is this host's own addresses, which no sandbox may reach
// unless allow_private lists them: a service listening on all interfaces
// is as much the host's as one on 127.0.0.1. The list is refreshed every
// few seconds, as interfaces come and go.
type LocalAddrs struct {
	mu      sync.Mutex
	addrs   map[netip.Addr]bool
	fetched time.Time
}

const localAddrsTTL = 5 * time.Second

// Has reports whether ip is an address of one of this host's interfaces.
func (l *LocalAddrs) Has(ip netip.Addr) bool {
	ip = canonical(ip)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.addrs == nil || time.Since(l.fetched) > localAddrsTTL {
		if ifaddrs, err := net.InterfaceAddrs(); err == nil || l.addrs == nil {
			l.addrs = make(map[netip.Addr]bool, len(ifaddrs))
			for _, a := range ifaddrs {
				if n, ok := a.(*net.IPNet); ok {
					if ip, ok := netip.AddrFromSlice(n.IP); ok {
						l.addrs[canonical(ip)] = true
					}
				}
			}
		}
		l.fetched = time.Now()
	}
	return l.addrs[ip]
}

// Resolver looks names up; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// NewResolver returns a resolver that asks the given DNS servers ("IP" or
// "IP:port", port 53 by default) in turn instead of the system's. No
// servers means the system resolver.
func NewResolver(servers []string) (Resolver, error) {
	if len(servers) == 0 {
		return net.DefaultResolver, nil
	}
	addrs := make([]string, len(servers))
	for i, s := range servers {
		a, err := ParseDNSServer(s)
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			start := rand.IntN(len(addrs))
			var err error
			for i := range addrs {
				var c net.Conn
				if c, err = d.DialContext(ctx, network, addrs[(start+i)%len(addrs)]); err == nil {
					return c, nil
				}
			}
			return nil, err
		},
	}, nil
}

// ParseDNSServer checks a dns_servers entry and returns it as "IP:port".
func ParseDNSServer(s string) (string, error) {
	if ip, err := netip.ParseAddr(s); err == nil {
		return netip.AddrPortFrom(ip, 53).String(), nil
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil || ap.Port() == 0 {
		return "", fmt.Errorf("%q: not an IP address or IP:port (such as \"1.1.1.1\" or \"127.0.0.1:5353\")", s)
	}
	return ap.String(), nil
}

// Dialer opens connections the policy allows: it resolves the host once,
// checks every address it resolves to, and connects to a checked address.
// A name that resolves to any denied address is denied as a whole, so an
// attacker's name cannot mix a public address with 127.0.0.1 and hope for
// the second.
type Dialer struct {
	Policy   Policy
	Resolver Resolver // nil: the system resolver
	Local    *LocalAddrs
	// Timeout bounds one connection attempt; 0 means 10 s.
	Timeout time.Duration
	// Usage, when set, counts the bytes of every connection made.
	Usage *Usage
}

// ErrResolve marks a host that could not be resolved.
var ErrResolve = errors.New("cannot resolve host")

// DialContext connects to addr ("host:port") over TCP. A policy refusal is
// a *Denied (wrapped); use errors.As to tell it from a network failure.
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, fmt.Errorf("egress: network %q is not supported", network)
	}
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("egress: %w", err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return nil, fmt.Errorf("egress: bad port in %q", addr)
	}
	targets, err := d.Resolve(ctx, host, uint16(port))
	if err != nil {
		return nil, err
	}
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	nd := net.Dialer{
		Timeout:   timeout,
		KeepAlive: 30 * time.Second,
		// The second line of defence: whatever the code above decided, the
		// socket itself only ever connects to a checked address.
		ControlContext: func(_ context.Context, _, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return err
			}
			if den := d.Policy.CheckAddr(host, ap, d.Local); den != nil {
				return den
			}
			return nil
		},
	}
	var firstErr error
	for _, ap := range targets {
		c, err := nd.DialContext(ctx, "tcp", ap.String())
		if err == nil {
			if d.Usage != nil {
				d.Usage.contacted(host, uint16(port))
				return &countingConn{Conn: c, u: d.Usage}, nil
			}
			return c, nil
		}
		if firstErr == nil {
			firstErr = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, firstErr
}

// Resolve checks host against the policy, looks it up and checks every
// address. It returns the addresses to connect to, in the resolver's order.
func (d *Dialer) Resolve(ctx context.Context, host string, port uint16) ([]netip.AddrPort, error) {
	if den := d.Policy.CheckHost(host, port); den != nil {
		d.Usage.denied()
		return nil, den
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(normalizeHost(host)); err == nil {
		ips = []netip.Addr{ip}
	} else {
		r := d.Resolver
		if r == nil {
			r = net.DefaultResolver
		}
		if ips, err = r.LookupNetIP(ctx, "ip", host); err != nil || len(ips) == 0 {
			if err == nil {
				err = errors.New("no address")
			}
			return nil, fmt.Errorf("%w %s: %w", ErrResolve, host, err)
		}
	}
	out := make([]netip.AddrPort, 0, len(ips))
	for _, ip := range ips {
		ap := netip.AddrPortFrom(ip.Unmap(), port)
		if den := d.Policy.CheckAddr(host, ap, d.Local); den != nil {
			d.Usage.denied()
			return nil, den
		}
		out = append(out, ap)
	}
	return out, nil
}

// AsDenied returns the policy refusal inside err, if that is what it is.
func AsDenied(err error) (*Denied, bool) {
	var d *Denied
	ok := errors.As(err, &d)
	return d, ok
}
