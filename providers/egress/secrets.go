package egress

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
)

// Secret is a host-scoped secret of one sandbox: the sandbox sees
// Placeholder wherever it would have seen Value, and the proxy puts Value
// back into the headers of requests to Hosts, and nowhere else.
type Secret struct {
	Name        string
	Value       string
	Placeholder string
	Hosts       []HostRule
}

// NewSecret makes a host-scoped secret with a fresh placeholder.
func NewSecret(name, value string, hosts []string) (Secret, error) {
	s := Secret{Name: name, Value: value, Placeholder: NewPlaceholder()}
	for i, h := range hosts {
		r, err := ParseHostRule(h)
		if err != nil {
			return Secret{}, fmt.Errorf("secret %s: hosts[%d]: %w", name, i, err)
		}
		s.Hosts = append(s.Hosts, r)
	}
	if len(s.Hosts) == 0 {
		return Secret{}, fmt.Errorf("secret %s: no hosts", name)
	}
	return s, nil
}

// PlaceholderPrefix starts every placeholder, so that output and logs can
// tell one at a glance.
const PlaceholderPrefix = "sandstep-placeholder-"

// NewPlaceholder returns a value no one can guess: 128 random bits. It is
// made of characters every header, URL and shell accepts unquoted.
func NewPlaceholder() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return PlaceholderPrefix + hex.EncodeToString(b[:])
}

func (s *Secret) scopedTo(host string, port uint16) bool {
	for _, r := range s.Hosts {
		if r.Matches(host, port) {
			return true
		}
	}
	return false
}

// substitute replaces, in every header value, the placeholders of the
// secrets scoped to host:port with their values. Basic credentials are
// decoded first, so a placeholder used as a password is found too. It
// reports whether anything was replaced.
func substitute(h http.Header, secrets []Secret, host string, port uint16) bool {
	var r *strings.Replacer
	var pairs []string
	for i := range secrets {
		if secrets[i].scopedTo(host, port) {
			pairs = append(pairs, secrets[i].Placeholder, secrets[i].Value)
		}
	}
	if len(pairs) == 0 {
		return false
	}
	r = strings.NewReplacer(pairs...)
	changed := false
	for k, vs := range h {
		for i, v := range vs {
			nv := v
			if scheme, cred, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "Basic") && (k == "Authorization" || k == "Proxy-Authorization") {
				if raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred)); err == nil {
					if dec := r.Replace(string(raw)); dec != string(raw) {
						nv = scheme + " " + base64.StdEncoding.EncodeToString([]byte(dec))
					}
				}
			}
			nv = r.Replace(nv)
			if nv != v {
				vs[i] = nv
				changed = true
			}
		}
	}
	return changed
}
