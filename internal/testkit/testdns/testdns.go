// Package testdns is a DNS server for tests, on 127.0.0.1, that answers A
// and AAAA queries from a table: with it a test makes a name resolve to
// 127.0.0.1 (or any address) without touching the machine's resolver,
// which is how "a DNS name that resolves to the host's loopback" is tested
// for real.
package testdns

import (
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// Server answers over UDP and TCP on the same 127.0.0.1 port.
type Server struct {
	udp net.PacketConn
	tcp net.Listener

	mu      sync.Mutex
	records map[string][]netip.Addr // lower-case name without the final dot; "*.x" for x's subdomains
	queries map[string]int
}

// Start serves records ("name" or "*.domain" -> addresses) until the test
// ends.
func Start(tb testing.TB, records map[string][]string) *Server {
	tb.Helper()
	s, err := Listen(records)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// Listen starts a server; Close stops it.
func Listen(records map[string][]string) (*Server, error) {
	// The kernel picks a free UDP port; the TCP port of the same number may
	// be another program's, so a few ports are tried.
	var udp net.PacketConn
	var tcp net.Listener
	for try := 0; ; try++ {
		var err error
		if udp, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			return nil, err
		}
		port := udp.LocalAddr().(*net.UDPAddr).Port
		if tcp, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			break
		}
		udp.Close()
		if try == 20 {
			return nil, err
		}
	}
	s := &Server{udp: udp, tcp: tcp, records: map[string][]netip.Addr{}, queries: map[string]int{}}
	for name, addrs := range records {
		s.Set(name, addrs...)
	}
	go s.serveUDP()
	go s.serveTCP()
	return s, nil
}

// Addr is "127.0.0.1:port", for a resolver's server list.
func (s *Server) Addr() string { return s.udp.LocalAddr().String() }

// Set replaces the answers for name ("*.domain" for every subdomain).
func (s *Server) Set(name string, addrs ...string) {
	var ips []netip.Addr
	for _, a := range addrs {
		ips = append(ips, netip.MustParseAddr(a))
	}
	s.mu.Lock()
	s.records[strings.TrimSuffix(strings.ToLower(name), ".")] = ips
	s.mu.Unlock()
}

// Queries returns how often name was asked for (any type).
func (s *Server) Queries(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries[strings.TrimSuffix(strings.ToLower(name), ".")]
}

// Close stops the server.
func (s *Server) Close() {
	s.udp.Close()
	s.tcp.Close()
}

func (s *Server) lookup(name string) ([]netip.Addr, bool) {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queries[name]++
	if ips, ok := s.records[name]; ok {
		return ips, true
	}
	for i := strings.IndexByte(name, '.'); i >= 0; {
		if ips, ok := s.records["*"+name[i:]]; ok {
			return ips, true
		}
		j := strings.IndexByte(name[i+1:], '.')
		if j < 0 {
			break
		}
		i += j + 1
	}
	return nil, false
}

func (s *Server) answer(query []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	resp := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true},
		Questions: []dnsmessage.Question{q},
	}
	ips, ok := s.lookup(q.Name.String())
	if !ok {
		resp.Header.RCode = dnsmessage.RCodeNameError
	}
	for _, ip := range ips {
		rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 1}
		switch {
		case q.Type == dnsmessage.TypeA && ip.Is4():
			rh.Type = dnsmessage.TypeA
			resp.Answers = append(resp.Answers, dnsmessage.Resource{Header: rh, Body: &dnsmessage.AResource{A: ip.As4()}})
		case q.Type == dnsmessage.TypeAAAA && ip.Is6():
			rh.Type = dnsmessage.TypeAAAA
			resp.Answers = append(resp.Answers, dnsmessage.Resource{Header: rh, Body: &dnsmessage.AAAAResource{AAAA: ip.As16()}})
		}
	}
	b, err := resp.Pack()
	if err != nil {
		return nil
	}
	return b
}

func (s *Server) serveUDP() {
	buf := make([]byte, 1500)
	for {
		n, addr, err := s.udp.ReadFrom(buf)
		if err != nil {
			return
		}
		if b := s.answer(buf[:n]); b != nil {
			_, _ = s.udp.WriteTo(b, addr)
		}
	}
}

func (s *Server) serveTCP() {
	for {
		c, err := s.tcp.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			for {
				var l [2]byte
				if _, err := io.ReadFull(c, l[:]); err != nil {
					return
				}
				q := make([]byte, int(l[0])<<8|int(l[1]))
				if _, err := io.ReadFull(c, q); err != nil {
					return
				}
				b := s.answer(q)
				if b == nil {
					return
				}
				if _, err := c.Write(append([]byte{byte(len(b) >> 8), byte(len(b))}, b...)); err != nil {
					return
				}
			}
		}()
	}
}
