package fakedeno

import (
	"context"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Proxy is the sandboxes' way out: an HTTP forward proxy that knows a
// sandbox by the user name of its Proxy-Authorization. In a request to one
// of a secret's hosts it replaces the secret's placeholder with the value
// (in the headers, the URL and the body, as Deno's proxy does "on the
// wire"); to any other host the placeholder goes out unchanged. allow_net,
// when set, refuses other hosts with 403. CONNECT tunnels are passed
// through untouched: the fake terminates no TLS, so its tests talk plain
// HTTP to the hosts of Options.Hosts.
func (s *Server) Proxy() http.Handler {
	transport := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, s.dialAddr(addr))
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sb := s.proxySandbox(r)
		if sb == nil {
			http.Error(w, "the fake Deno proxy serves its sandboxes only", http.StatusProxyAuthRequired)
			return
		}
		host := r.URL.Host
		if r.Method == http.MethodConnect {
			host = r.Host
		}
		rec := Egress{Sandbox: sb.id, Host: host, Method: r.Method}
		if !allowed(sb.allowNet, host) {
			rec.Refused = true
			s.record(rec)
			http.Error(w, "allow_net does not admit "+host, http.StatusForbidden)
			return
		}
		if r.Method == http.MethodConnect {
			s.record(rec)
			s.tunnel(w, host)
			return
		}
		// Which secrets this host may see.
		var swap []secret
		var names []string
		for name, sec := range sb.secrets {
			if hostMatches(sec.hosts, host) {
				swap = append(swap, sec)
				names = append(names, name)
			}
		}
		replace := func(v string) string {
			for _, sec := range swap {
				v = strings.ReplaceAll(v, sec.placeholder, sec.value)
			}
			return v
		}
		out := r.Clone(r.Context())
		out.RequestURI = ""
		out.Header.Del("Proxy-Authorization")
		out.Header.Del("Proxy-Connection")
		used := map[string]bool{}
		for k, vs := range out.Header {
			for i, v := range vs {
				if nv := replace(v); nv != v {
					vs[i] = nv
					for j, sec := range swap {
						if strings.Contains(v, sec.placeholder) {
							used[names[j]] = true
						}
					}
				}
			}
			out.Header[k] = vs
		}
		if u := replace(out.URL.RawQuery); u != out.URL.RawQuery {
			out.URL.RawQuery = u
			for _, n := range names {
				used[n] = true
			}
		}
		if len(swap) > 0 && r.Body != nil {
			b, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
			if err == nil {
				nb := replace(string(b))
				if nb != string(b) {
					for j, sec := range swap {
						if strings.Contains(string(b), sec.placeholder) {
							used[names[j]] = true
						}
					}
				}
				out.Body = io.NopCloser(strings.NewReader(nb))
				out.ContentLength = int64(len(nb))
			}
		}
		for n := range used {
			rec.Substituted = append(rec.Substituted, n)
		}
		slices.Sort(rec.Substituted)
		s.record(rec)
		resp, err := transport.RoundTrip(out)
		if err != nil {
			http.Error(w, "the fake Deno proxy could not reach "+host+": "+err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, vs := range resp.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	})
}

func (s *Server) record(e Egress) {
	s.mu.Lock()
	s.egress = append(s.egress, e)
	s.mu.Unlock()
}

// proxySandbox finds the running sandbox the request names.
func (s *Server) proxySandbox(r *http.Request) *sandbox {
	auth, ok := strings.CutPrefix(r.Header.Get("Proxy-Authorization"), "Basic ")
	if !ok {
		return nil
	}
	raw, err := base64.StdEncoding.DecodeString(auth)
	if err != nil {
		return nil
	}
	id, _, _ := strings.Cut(string(raw), ":")
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.sandboxes[id]
	if sb == nil || sb.stopped {
		return nil
	}
	return sb
}

// dialAddr maps a host of Options.Hosts to its address.
func (s *Server) dialAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if to, ok := s.opts.Hosts[host+":"+port]; ok {
		return to
	}
	if to, ok := s.opts.Hosts[host]; ok {
		return to
	}
	return addr
}

func (s *Server) tunnel(w http.ResponseWriter, host string) {
	up, err := net.DialTimeout("tcp", s.dialAddr(host), 10*time.Second)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = up.Close()
		http.Error(w, "cannot tunnel", http.StatusInternalServerError)
		return
	}
	down, _, err := hj.Hijack()
	if err != nil {
		_ = up.Close()
		return
	}
	_, _ = down.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
	go func() { _, _ = io.Copy(up, down); _ = up.Close() }()
	_, _ = io.Copy(down, up)
	_ = down.Close()
}

// hostMatches applies Deno's host patterns: host, host:port, *.domain[:port].
func hostMatches(patterns []string, hostport string) bool {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, ""
	}
	for _, p := range patterns {
		ph, pp, err := net.SplitHostPort(p)
		if err != nil {
			ph, pp = p, ""
		}
		if pp != "" && pp != port {
			continue
		}
		if ph == host {
			return true
		}
		if d, ok := strings.CutPrefix(ph, "*."); ok && strings.HasSuffix(host, "."+d) {
			return true
		}
	}
	return false
}

// allowed applies allow_net: nil admits everything.
func allowed(allowNet []string, hostport string) bool {
	return allowNet == nil || hostMatches(allowNet, hostport)
}
