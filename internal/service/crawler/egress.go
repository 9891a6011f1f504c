package crawler

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"

	"github.com/sandstep/sandstep/internal/service/crawler/spec"
	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/egress"
)

// egressNet is how the crawl's fetches leave the sandbox, under the same
// policy whatever the provider.
//
// Where the provider runs a policy proxy (egress.ProxyEnv, the local
// provider), everything goes through it, the HTTP client and the browser
// alike, for every URL: inside such a sandbox 127.0.0.1 is the sandbox
// itself, and a fixture on the host's loopback (in allow_private) is only
// reachable through the proxy. Its 403 with egress.DeniedHeader is a
// policy skip. NO_PROXY is not honoured, on purpose.
//
// Elsewhere (hosted providers) the crawler enforces the policy itself: its
// HTTP client connects through egress.Dialer, which checks every address a
// name resolves to, and the browser is pointed at an egress proxy the
// crawler runs on its own loopback, so that a page's scripts and
// subresources obey the same rules.
type egressNet struct {
	proxy  *url.URL // the provider's policy proxy; nil when there is none
	policy egress.Policy
	dialer *egress.Dialer

	once   sync.Once
	local  string // the crawler's own proxy, for the browser
	ln     net.Listener
	sess   *egress.Session
	lnErr  error
	closed bool
	mu     sync.Mutex
}

func newNetwork(allowPrivate []string, getenv func(string) string) (*egressNet, error) {
	pol, err := egress.NewPolicy(providers.NetworkAll, nil, allowPrivate)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInput, err)
	}
	n := &egressNet{policy: pol}
	if p := getenv(egress.ProxyEnv); p != "" {
		u, err := url.Parse(p)
		if err != nil || u.Scheme != "http" || u.Host == "" {
			return nil, fmt.Errorf("%w: %s=%q is not an http:// proxy URL", ErrInput, egress.ProxyEnv, p)
		}
		n.proxy = u
		return n, nil
	}
	n.dialer = &egress.Dialer{Policy: pol, Local: &egress.LocalAddrs{}}
	return n, nil
}

// setup makes tr leave through the network.
func (n *egressNet) setup(tr *http.Transport) {
	if n.proxy != nil {
		proxy := n.proxy
		tr.Proxy = func(*http.Request) (*url.URL, error) { return proxy, nil }
		// A refused CONNECT comes back as the proxy's 403; its header says
		// why, which the transport would otherwise drop.
		tr.OnProxyConnectResponse = func(_ context.Context, _ *url.URL, _ *http.Request, res *http.Response) error {
			if d, ok := deniedResponse(res); ok {
				return d
			}
			return nil
		}
		return
	}
	tr.Proxy = nil
	tr.DialContext = n.dialer.DialContext
}

// deniedResponse reads a policy proxy's refusal.
func deniedResponse(res *http.Response) (*egress.Denied, bool) {
	if res == nil || res.StatusCode != http.StatusForbidden {
		return nil, false
	}
	return egress.ParseDenied(res.Header.Get(egress.DeniedHeader))
}

// proxyFailure reads an answer of the egress proxy itself that says it
// could not reach the host: that is the page failing to load, not a 502 or
// 504 the site sent.
func proxyFailure(status int, h http.Header, body []byte) (why, bool) {
	kind := h.Get(egress.FailedHeader)
	if kind == "" || status != http.StatusBadGateway && status != http.StatusGatewayTimeout {
		return why{}, false
	}
	msg := strings.TrimSpace(strings.TrimPrefix(string(body), "sandstep egress proxy: "))
	if len(msg) > 300 {
		msg = msg[:300]
	}
	if kind == egress.FailedTimeout {
		return skip(spec.ReasonTimeout, "no answer in time: %s", msg), true
	}
	return skip(spec.ReasonFetchError, "%s", msg), true
}

// browserProxy returns the proxy the browser must use: the provider's, or
// one the crawler starts on first use.
func (n *egressNet) browserProxy() (string, error) {
	if n.proxy != nil {
		return n.proxy.String(), nil
	}
	n.once.Do(func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.closed {
			n.lnErr = net.ErrClosed
			return
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			n.lnErr = fmt.Errorf("the browser's egress proxy: %w", err)
			return
		}
		p := &egress.Proxy{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		n.ln, n.sess = ln, p.Session("crawler", n.policy, nil, nil, nil)
		n.local = "http://" + ln.Addr().String()
		go func() { _ = n.sess.Serve(ln) }()
	})
	return n.local, n.lnErr
}

func (n *egressNet) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	if n.ln != nil {
		n.ln.Close()
		n.sess.Close()
	}
}

// hostEnv is os.Getenv; tests replace it.
var hostEnv = os.Getenv

// isDenied reports whether a failed render was the policy's doing.
func isDenied(headers map[string]any) (*egress.Denied, bool) {
	for k, v := range headers {
		if strings.EqualFold(k, egress.DeniedHeader) {
			if s, ok := v.(string); ok {
				return egress.ParseDenied(s)
			}
		}
	}
	return nil, false
}
