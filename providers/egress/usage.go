package egress

import (
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/sandstep/sandstep/providers"
)

// maxHosts bounds the hosts a Usage remembers; more are counted only.
const maxHosts = 1000

// Usage counts what a sandbox sent and received through its way out. The
// zero value is ready; a nil *Usage counts nothing. It is safe for
// concurrent use.
type Usage struct {
	out, in, conns, denials atomic.Int64

	mu    sync.Mutex
	hosts map[string]bool
	more  int64 // hosts beyond maxHosts
}

// Out and In add bytes sent to and received from the network.
func (u *Usage) Out(n int64) {
	if u != nil && n > 0 {
		u.out.Add(n)
	}
}

func (u *Usage) In(n int64) {
	if u != nil && n > 0 {
		u.in.Add(n)
	}
}

func (u *Usage) denied() {
	if u != nil {
		u.denials.Add(1)
	}
}

// contacted records a connection made to host:port.
func (u *Usage) contacted(host string, port uint16) {
	if u == nil {
		return
	}
	u.conns.Add(1)
	key := net.JoinHostPort(normalizeHost(host), strconv.Itoa(int(port)))
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.hosts[key] {
		return
	}
	if len(u.hosts) >= maxHosts {
		u.more++
		return
	}
	if u.hosts == nil {
		u.hosts = make(map[string]bool)
	}
	u.hosts[key] = true
}

// Snapshot returns the counts so far.
func (u *Usage) Snapshot() providers.NetworkUsage {
	if u == nil {
		return providers.NetworkUsage{}
	}
	s := providers.NetworkUsage{
		BytesOut:    u.out.Load(),
		BytesIn:     u.in.Load(),
		Connections: u.conns.Load(),
		Denied:      u.denials.Load(),
	}
	u.mu.Lock()
	for h := range u.hosts {
		s.Hosts = append(s.Hosts, h)
	}
	s.MoreHosts = u.more
	u.mu.Unlock()
	slices.Sort(s.Hosts)
	return s
}

// Take returns the counts so far and resets them, for a caller that adds
// them to a running total elsewhere (a file shared by several processes).
func (u *Usage) Take() providers.NetworkUsage {
	if u == nil {
		return providers.NetworkUsage{}
	}
	s := providers.NetworkUsage{
		BytesOut:    u.out.Swap(0),
		BytesIn:     u.in.Swap(0),
		Connections: u.conns.Swap(0),
		Denied:      u.denials.Swap(0),
	}
	u.mu.Lock()
	for h := range u.hosts {
		s.Hosts = append(s.Hosts, h)
	}
	s.MoreHosts = u.more
	u.hosts, u.more = nil, 0
	u.mu.Unlock()
	slices.Sort(s.Hosts)
	return s
}

// Merge adds b to a: counts add up, host lists join (at most maxHosts
// names; the rest are counted in MoreHosts).
func Merge(a, b providers.NetworkUsage) providers.NetworkUsage {
	out := providers.NetworkUsage{
		BytesOut:    a.BytesOut + b.BytesOut,
		BytesIn:     a.BytesIn + b.BytesIn,
		Connections: a.Connections + b.Connections,
		Denied:      a.Denied + b.Denied,
		MoreHosts:   a.MoreHosts + b.MoreHosts,
	}
	seen := make(map[string]bool, len(a.Hosts)+len(b.Hosts))
	for _, h := range append(slices.Clone(a.Hosts), b.Hosts...) {
		if seen[h] {
			continue
		}
		seen[h] = true
		if len(out.Hosts) >= maxHosts {
			out.MoreHosts++
			continue
		}
		out.Hosts = append(out.Hosts, h)
	}
	slices.Sort(out.Hosts)
	return out
}

// countingConn counts a connection's bytes into a Usage.
type countingConn struct {
	net.Conn
	u *Usage
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.u.In(int64(n))
	return n, err
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.u.Out(int64(n))
	return n, err
}

// CloseWrite half-closes the connection when the underlying one can.
func (c *countingConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
