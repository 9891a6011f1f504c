// Package egress is the way out of a sandbox: a network policy checked on
// resolved addresses, an HTTP forward proxy that enforces it, host-scoped
// secrets substituted into request headers on their way out, and the
// accounting of what left.
//
// The local provider runs the proxy for every sandbox with network, on a
// listening socket that lives in the sandbox's own network namespace; the
// crawler uses the same policy and dialer when it runs where no such proxy
// exists. Any provider that owns its sandboxes' way out can reuse it.
//
// The policy is decided on addresses, not names: a name is resolved once,
// every address it resolves to is checked, and the connection goes to a
// checked address, so a redirect to a private address, a name that resolves
// to 127.0.0.1 and DNS rebinding are all caught the same way.
package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/sandstep/sandstep/providers"
)

// Reasons a connection is denied, as DeniedHeader and Denied carry them.
const (
	// ReasonNoNetwork: the sandbox's policy is "none".
	ReasonNoNetwork = "network-none"
	// ReasonNotAllowed: an allowlist policy does not list the host.
	ReasonNotAllowed = "not-allowlisted"
	// ReasonPrivate: the address is in a range that is never public
	// (loopback, link-local, RFC 1918, ...) and allow_private does not
	// list it.
	ReasonPrivate = "private-address"
	// ReasonHostAddress: the address is one of this host's own.
	ReasonHostAddress = "host-address"
)

// Denied is a connection the policy refuses. Proxies answer it with 403
// and DeniedHeader; dialers return it (wrapped) as their error.
type Denied struct {
	Reason string
	// Host is the host asked for, as the client named it.
	Host string
	// Addr is the address that was refused; zero when the name itself was.
	Addr netip.AddrPort
	// Range names the address range, such as "loopback" or "link-local".
	Range string
}

func (d *Denied) Error() string {
	var b strings.Builder
	b.WriteString("egress denied: ")
	switch d.Reason {
	case ReasonNoNetwork:
		b.WriteString("the sandbox has no network")
	case ReasonNotAllowed:
		b.WriteString("host not in the allowlist")
	case ReasonPrivate:
		b.WriteString(d.Range + " address")
	case ReasonHostAddress:
		b.WriteString("an address of this host")
	default:
		b.WriteString(d.Reason)
	}
	if d.Host != "" {
		b.WriteString(" " + d.Host)
	}
	if d.Addr.IsValid() && d.Addr.Addr().String() != d.Host {
		b.WriteString(" (" + d.Addr.String() + ")")
	}
	return b.String()
}

// DeniedHeader is the response header of a proxy's 403 for a denied
// connection: the reason, then "key=value" pairs, separated by "; ", such
// as "private-address; range=loopback; addr=127.0.0.1:8080; host=a.test".
const DeniedHeader = "X-Sandstep-Egress-Denied"

// Header renders d as DeniedHeader's value.
func (d *Denied) Header() string {
	parts := []string{d.Reason}
	if d.Range != "" {
		parts = append(parts, "range="+d.Range)
	}
	if d.Addr.IsValid() {
		parts = append(parts, "addr="+d.Addr.String())
	}
	if h := headerSafe(d.Host); h != "" {
		parts = append(parts, "host="+h)
	}
	return strings.Join(parts, "; ")
}

// ParseDenied reads a DeniedHeader value; ok is false when v is empty or
// not one.
func ParseDenied(v string) (d *Denied, ok bool) {
	parts := strings.Split(v, ";")
	reason := strings.TrimSpace(parts[0])
	if reason == "" || strings.Contains(reason, "=") {
		return nil, false
	}
	d = &Denied{Reason: reason}
	for _, p := range parts[1:] {
		k, val, _ := strings.Cut(strings.TrimSpace(p), "=")
		switch k {
		case "range":
			d.Range = val
		case "addr":
			d.Addr, _ = netip.ParseAddrPort(val)
		case "host":
			d.Host = val
		}
	}
	return d, true
}

// headerSafe keeps a client-supplied host out of the header unless it is
// made of characters a host name or address literal has.
func headerSafe(h string) string {
	if len(h) > 255 {
		return ""
	}
	for _, r := range h {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(".-_:[]*", r)) {
			return ""
		}
	}
	return h
}

// special are the address ranges that are never public. An address in one
// is denied unless allow_private lists it.
var special = func() []struct {
	p    netip.Prefix
	name string
} {
	var out []struct {
		p    netip.Prefix
		name string
	}
	for _, r := range [][2]string{
		{"0.0.0.0/8", "unspecified"},
		{"10.0.0.0/8", "private"},
		{"100.64.0.0/10", "shared (CGNAT)"},
		{"127.0.0.0/8", "loopback"},
		{"169.254.0.0/16", "link-local"},
		{"172.16.0.0/12", "private"},
		{"192.0.0.0/24", "IETF protocol"},
		{"192.168.0.0/16", "private"},
		{"198.18.0.0/15", "benchmarking"},
		{"224.0.0.0/4", "multicast"},
		{"240.0.0.0/4", "reserved"},
		{"::1/128", "loopback"},
		// IPv4-compatible addresses (deprecated), :: among them.
		{"::/96", "unspecified"},
		{"100::/64", "discard"},
		{"fc00::/7", "unique-local"},
		{"fe80::/10", "link-local"},
		{"fec0::/10", "site-local"},
		{"ff00::/8", "multicast"},
	} {
		out = append(out, struct {
			p    netip.Prefix
			name string
		}{netip.MustParsePrefix(r[0]), r[1]})
	}
	return out
}()

// nat64 is the well-known NAT64 prefix: its last 32 bits are an IPv4
// address that a NAT64 gateway would reach.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// Classify names the never-public range ip lies in, or returns "" for an
// address that may be public. IPv4-mapped and NAT64 forms are judged by the
// IPv4 address they carry.
func Classify(ip netip.Addr) string {
	ip = canonical(ip)
	for _, s := range special {
		if s.p.Contains(ip) {
			return s.name
		}
	}
	return ""
}

// canonical unmaps IPv4-mapped addresses, takes the IPv4 address out of a
// NAT64 one, and drops zones.
func canonical(ip netip.Addr) netip.Addr {
	ip = ip.Unmap().WithZone("")
	if ip.Is6() && nat64.Contains(ip) {
		b := ip.As16()
		ip = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	return ip
}

// AddrRule is one allow_private entry: an address or prefix, and a port
// (0 = every port).
type AddrRule struct {
	Prefix netip.Prefix
	Port   uint16
}

func (r AddrRule) String() string {
	s := r.Prefix.String()
	if r.Prefix.IsSingleIP() {
		s = r.Prefix.Addr().String()
	}
	if r.Port == 0 {
		return s
	}
	if r.Prefix.Addr().Is6() {
		return "[" + s + "]:" + strconv.Itoa(int(r.Port))
	}
	return s + ":" + strconv.Itoa(int(r.Port))
}

func (r AddrRule) matches(ap netip.AddrPort) bool {
	return r.Prefix.Contains(canonical(ap.Addr())) && (r.Port == 0 || r.Port == ap.Port())
}

// ParseAddrRule parses one allow_private entry: an IP address or a CIDR
// prefix, optionally with a port: "127.0.0.1", "127.0.0.1:8443",
// "10.1.2.0/24", "10.1.2.0/24:443", "fd00::/8", "[fd00::1]:443",
// "[fd00::/8]:443".
func ParseAddrRule(s string) (AddrRule, error) {
	addr, port := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.Index(s, "]")
		if end < 0 {
			return AddrRule{}, fmt.Errorf("%q: missing ]", s)
		}
		addr, port = s[1:end], s[end+1:]
		if port != "" {
			if port = strings.TrimPrefix(port, ":"); port == s[end+1:] {
				return AddrRule{}, fmt.Errorf("%q: expected :port after ]", s)
			}
		}
	case strings.Count(s, ":") == 1:
		addr, port, _ = strings.Cut(s, ":")
	}
	var r AddrRule
	if strings.Contains(addr, "/") {
		p, err := netip.ParsePrefix(addr)
		if err != nil {
			return AddrRule{}, fmt.Errorf("%q: not an IP address or CIDR prefix (such as \"127.0.0.1:8443\" or \"10.1.2.0/24\")", s)
		}
		if p.Masked() != p {
			return AddrRule{}, fmt.Errorf("%q: the prefix has host bits set (did you mean %s?)", s, p.Masked())
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		r.Prefix = p
	} else {
		ip, err := netip.ParseAddr(addr)
		if err != nil {
			return AddrRule{}, fmt.Errorf("%q: not an IP address or CIDR prefix (such as \"127.0.0.1:8443\" or \"10.1.2.0/24\"); host names are not allowed here", s)
		}
		ip = canonical(ip)
		r.Prefix = netip.PrefixFrom(ip, ip.BitLen())
	}
	if port != "" {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			return AddrRule{}, fmt.Errorf("%q: port %q is not a number from 1 to 65535", s, port)
		}
		r.Port = uint16(n)
	}
	return r, nil
}

// HostRule is one allow_hosts entry: a name, or "*." and a domain for any
// of its subdomains (not the domain itself), and a port (0 = every port).
type HostRule struct {
	Name     string // lower case, no trailing dot, no "*."
	Wildcard bool
	Port     uint16
}

func (r HostRule) String() string {
	s := r.Name
	if r.Wildcard {
		s = "*." + s
	}
	if r.Port != 0 {
		if strings.Contains(s, ":") {
			s = "[" + s + "]"
		}
		s += ":" + strconv.Itoa(int(r.Port))
	}
	return s
}

// ParseHostRule parses "pypi.org", "*.github.com", "api.example.com:8443",
// "203.0.113.7" or "[2001:db8::1]:443".
func ParseHostRule(s string) (HostRule, error) {
	host, port := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 {
			return HostRule{}, fmt.Errorf("%q: missing ]", s)
		}
		host, port = s[1:end], strings.TrimPrefix(s[end+1:], ":")
	} else if strings.Count(s, ":") == 1 {
		host, port, _ = strings.Cut(s, ":")
	}
	var r HostRule
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		r.Wildcard, host = true, rest
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		if r.Wildcard {
			return HostRule{}, fmt.Errorf("%q: a wildcard needs a domain name, not an address", s)
		}
		host = canonical(ip).String()
	} else if !validName(host) {
		return HostRule{}, fmt.Errorf("%q: not a host name (such as \"pypi.org\" or \"*.github.com\", optionally with :port; no scheme or path)", s)
	}
	r.Name = host
	if port != "" {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			return HostRule{}, fmt.Errorf("%q: port %q is not a number from 1 to 65535", s, port)
		}
		r.Port = uint16(n)
	}
	return r, nil
}

func validName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// Matches reports whether the rule admits host (as a client names it) on
// port.
func (r HostRule) Matches(host string, port uint16) bool {
	if r.Port != 0 && r.Port != port {
		return false
	}
	h := normalizeHost(host)
	if r.Wildcard {
		return strings.HasSuffix(h, "."+r.Name)
	}
	return h == r.Name
}

// normalizeHost lower-cases a host, drops a trailing dot and brackets, and
// writes addresses in their canonical form.
func normalizeHost(h string) string {
	h = strings.TrimSuffix(strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")), ".")
	if ip, err := netip.ParseAddr(h); err == nil {
		return canonical(ip).String()
	}
	return h
}

// Policy is one sandbox's network policy.
type Policy struct {
	Mode providers.NetworkMode
	// AllowHosts is the allowlist (Mode allowlist only).
	AllowHosts []HostRule
	// AllowPrivate lists the never-public addresses that may be reached
	// all the same, in every mode but none.
	AllowPrivate []AddrRule
}

// NewPolicy builds a Policy from its configuration strings; every invalid
// entry is reported.
func NewPolicy(mode providers.NetworkMode, allowHosts, allowPrivate []string) (Policy, error) {
	p := Policy{Mode: mode}
	var errs []error
	switch mode {
	case providers.NetworkNone, providers.NetworkAll:
	case providers.NetworkAllowlist:
		if len(allowHosts) == 0 {
			errs = append(errs, errors.New("network mode \"allowlist\" needs at least one host in allow_hosts"))
		}
	default:
		errs = append(errs, fmt.Errorf("unknown network mode %q", mode))
	}
	if mode == providers.NetworkAllowlist {
		for i, h := range allowHosts {
			r, err := ParseHostRule(h)
			if err != nil {
				errs = append(errs, fmt.Errorf("allow_hosts[%d]: %w", i, err))
				continue
			}
			p.AllowHosts = append(p.AllowHosts, r)
		}
	}
	for i, a := range allowPrivate {
		r, err := ParseAddrRule(a)
		if err != nil {
			errs = append(errs, fmt.Errorf("allow_private[%d]: %w", i, err))
			continue
		}
		p.AllowPrivate = append(p.AllowPrivate, r)
	}
	return p, errors.Join(errs...)
}

// CheckHost decides on the host a client asked for, before any lookup.
func (p *Policy) CheckHost(host string, port uint16) *Denied {
	switch p.Mode {
	case providers.NetworkAll:
		return nil
	case providers.NetworkAllowlist:
		for _, r := range p.AllowHosts {
			if r.Matches(host, port) {
				return nil
			}
		}
		return &Denied{Reason: ReasonNotAllowed, Host: host}
	}
	return &Denied{Reason: ReasonNoNetwork, Host: host}
}

// CheckAddr decides on one address host resolved to. own is this host's
// own addresses (see LocalAddrs); nil checks none.
func (p *Policy) CheckAddr(host string, ap netip.AddrPort, own *LocalAddrs) *Denied {
	if p.Mode != providers.NetworkAll && p.Mode != providers.NetworkAllowlist {
		return &Denied{Reason: ReasonNoNetwork, Host: host, Addr: ap}
	}
	for _, r := range p.AllowPrivate {
		if r.matches(ap) {
			return nil
		}
	}
	if name := Classify(ap.Addr()); name != "" {
		return &Denied{Reason: ReasonPrivate, Host: host, Addr: ap, Range: name}
	}
	if own != nil && own.Has(ap.Addr()) {
		return &Denied{Reason: ReasonHostAddress, Host: host, Addr: ap, Range: "host"}
	}
	return nil
}
