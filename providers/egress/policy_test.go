package egress

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/providers"
)

func TestClassify(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1":                  "loopback",
		"127.3.4.5":                  "loopback",
		"10.1.2.3":                   "private",
		"172.16.0.1":                 "private",
		"172.31.255.255":             "private",
		"192.168.1.1":                "private",
		"169.254.169.254":            "link-local",
		"100.64.0.1":                 "shared (CGNAT)",
		"0.0.0.0":                    "unspecified",
		"224.0.0.251":                "multicast",
		"255.255.255.255":            "reserved",
		"::1":                        "loopback",
		"::":                         "unspecified",
		"fe80::1":                    "link-local",
		"fd00:ec2::254":              "unique-local", // EC2's IPv6 metadata service
		"fc00::1":                    "unique-local",
		"ff02::1":                    "multicast",
		"::ffff:127.0.0.1":           "loopback",
		"::ffff:169.254.169.254":     "link-local",
		"::ffff:10.0.0.1":            "private",
		"64:ff9b::a9fe:a9fe":         "link-local", // NAT64 of the metadata service
		"64:ff9b::7f00:1":            "loopback",
		"::127.0.0.1":                "unspecified", // IPv4-compatible, deprecated
		"93.184.215.14":              "",
		"1.1.1.1":                    "",
		"172.32.0.1":                 "",
		"2606:4700:4700::1111":       "",
		"::ffff:1.1.1.1":             "",
		"fe80::1%eth0":               "link-local",
		"2001:db8:85a3::8a2e:370:73": "",
	} {
		if got := Classify(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Classify(%s) = %q, want %q", addr, got, want)
		}
	}
}

func TestParseAddrRule(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1":              "127.0.0.1",
		"127.0.0.1:8443":         "127.0.0.1:8443",
		"10.1.2.0/24":            "10.1.2.0/24",
		"10.1.2.0/24:443":        "10.1.2.0/24:443",
		"fd00::/8":               "fd00::/8",
		"[fd00::1]:443":          "[fd00::1]:443",
		"[fd00::/8]:443":         "[fd00::/8]:443",
		"::1":                    "::1",
		"::ffff:127.0.0.1":       "127.0.0.1",
		"[::ffff:10.0.0.0/104]":  "10.0.0.0/8",
		"169.254.169.254:80":     "169.254.169.254:80",
		"[2001:db8::/32]:65535":  "[2001:db8::/32]:65535",
		"192.168.0.0/16":         "192.168.0.0/16",
		"0.0.0.0/0":              "0.0.0.0/0",
		"100.64.0.0/10:8080":     "100.64.0.0/10:8080",
		"[fe80::1]":              "fe80::1",
		"172.16.0.0/12:1":        "172.16.0.0/12:1",
		"203.0.113.9":            "203.0.113.9",
		"203.0.113.9:65535":      "203.0.113.9:65535",
		"127.0.0.0/8":            "127.0.0.0/8",
		"127.0.0.0/8:8080":       "127.0.0.0/8:8080",
		"[::1]:8080":             "[::1]:8080",
		"[fc00::/7]":             "fc00::/7",
		"10.0.0.0/8":             "10.0.0.0/8",
		"1.2.3.4/32":             "1.2.3.4",
		"[2001:db8::1/128]:8443": "[2001:db8::1]:8443",
	} {
		r, err := ParseAddrRule(in)
		if err != nil {
			t.Errorf("ParseAddrRule(%q): %v", in, err)
			continue
		}
		if r.String() != want {
			t.Errorf("ParseAddrRule(%q) = %s, want %s", in, r, want)
		}
	}
	for _, bad := range []string{"", "localhost", "localhost:80", "127.0.0.1:0", "127.0.0.1:99999", "10.1.2.3/24", "10.0.0.0/33",
		"[fd00::1", "[fd00::1]443", "127.0.0.1:http", "http://127.0.0.1", "127.0.0.1/8/8", "fixture.test:8080"} {
		if r, err := ParseAddrRule(bad); err == nil {
			t.Errorf("ParseAddrRule(%q) = %s, want an error", bad, r)
		}
	}
}

func TestHostRules(t *testing.T) {
	type probe struct {
		host string
		port uint16
		ok   bool
	}
	for rule, probes := range map[string][]probe{
		"pypi.org":             {{"pypi.org", 443, true}, {"PyPI.org.", 80, true}, {"files.pypi.org", 443, false}, {"pypi.org.evil.com", 443, false}, {"xpypi.org", 443, false}},
		"*.github.com":         {{"api.github.com", 443, true}, {"a.b.github.com", 22, true}, {"github.com", 443, false}, {"evilgithub.com", 443, false}, {"github.com.evil", 443, false}},
		"api.example.com:8443": {{"api.example.com", 8443, true}, {"api.example.com", 443, false}},
		"*.example.org:443":    {{"www.example.org", 443, true}, {"www.example.org", 80, false}},
		"203.0.113.7":          {{"203.0.113.7", 1, true}, {"[::ffff:203.0.113.7]", 1, true}, {"203.0.113.8", 1, false}},
		"[2001:db8::1]:443":    {{"2001:db8::1", 443, true}, {"[2001:0db8::1]", 443, true}, {"2001:db8::1", 80, false}},
	} {
		r, err := ParseHostRule(rule)
		if err != nil {
			t.Errorf("ParseHostRule(%q): %v", rule, err)
			continue
		}
		for _, p := range probes {
			if got := r.Matches(p.host, p.port); got != p.ok {
				t.Errorf("%s matches %s:%d = %v, want %v", rule, p.host, p.port, got, p.ok)
			}
		}
	}
	for _, bad := range []string{"", "*", "*.", "https://pypi.org", "pypi.org/simple", "*.1.2.3.4", "a..b", "-a.com", "pypi.org:0", "pypi.org:x", "a b"} {
		if r, err := ParseHostRule(bad); err == nil {
			t.Errorf("ParseHostRule(%q) = %s, want an error", bad, r)
		}
	}
}

func TestPolicyChecks(t *testing.T) {
	pol, err := NewPolicy(providers.NetworkAllowlist, []string{"*.allowed.test", "exact.test:8080"}, []string{"127.0.0.1:9000", "10.0.0.0/8:443"})
	if err != nil {
		t.Fatal(err)
	}
	host := func(h string, port uint16) string {
		if d := pol.CheckHost(h, port); d != nil {
			return d.Reason
		}
		return "ok"
	}
	for _, c := range []struct {
		host string
		port uint16
		want string
	}{
		{"a.allowed.test", 80, "ok"}, {"allowed.test", 80, ReasonNotAllowed}, {"exact.test", 8080, "ok"},
		{"exact.test", 8081, ReasonNotAllowed}, {"other.test", 80, ReasonNotAllowed},
	} {
		if got := host(c.host, c.port); got != c.want {
			t.Errorf("CheckHost(%s:%d) = %s, want %s", c.host, c.port, got, c.want)
		}
	}
	addr := func(a string) string {
		d := pol.CheckAddr("h", netip.MustParseAddrPort(a), nil)
		if d == nil {
			return "ok"
		}
		return d.Reason + "/" + d.Range
	}
	for a, want := range map[string]string{
		"127.0.0.1:9000":          "ok",
		"127.0.0.1:9001":          ReasonPrivate + "/loopback",
		"[::ffff:127.0.0.1]:9000": "ok",
		"10.9.8.7:443":            "ok",
		"10.9.8.7:80":             ReasonPrivate + "/private",
		"169.254.169.254:80":      ReasonPrivate + "/link-local",
		"93.184.215.14:443":       "ok",
	} {
		if got := addr(a); got != want {
			t.Errorf("CheckAddr(%s) = %s, want %s", a, got, want)
		}
	}
	none, _ := NewPolicy(providers.NetworkNone, nil, []string{"127.0.0.1"})
	if d := none.CheckAddr("h", netip.MustParseAddrPort("127.0.0.1:1"), nil); d == nil || d.Reason != ReasonNoNetwork {
		t.Errorf("network none allowed an address: %v", d)
	}
	if d := none.CheckHost("example.com", 443); d == nil || d.Reason != ReasonNoNetwork {
		t.Errorf("network none allowed a host: %v", d)
	}
	_, err = NewPolicy(providers.NetworkAllowlist, []string{"https://x", "ok.test"}, []string{"localhost"})
	if err == nil || !strings.Contains(err.Error(), "allow_hosts[0]") || !strings.Contains(err.Error(), "allow_private[0]") {
		t.Errorf("NewPolicy with bad entries: %v", err)
	}
}

func TestDeniedHeaderRoundTrip(t *testing.T) {
	d := &Denied{Reason: ReasonPrivate, Host: "evil.test", Addr: netip.MustParseAddrPort("127.0.0.1:8080"), Range: "loopback"}
	h := d.Header()
	if h != "private-address; range=loopback; addr=127.0.0.1:8080; host=evil.test" {
		t.Errorf("header %q", h)
	}
	back, ok := ParseDenied(h)
	if !ok || *back != *d {
		t.Errorf("ParseDenied(%q) = %+v, %v", h, back, ok)
	}
	odd := (&Denied{Reason: ReasonNotAllowed, Host: "a;b=c\r\nX: y"}).Header()
	if odd != ReasonNotAllowed {
		t.Errorf("a host with odd characters went into the header: %q", odd)
	}
	if _, ok := ParseDenied(""); ok {
		t.Error("ParseDenied accepted an empty value")
	}
}
