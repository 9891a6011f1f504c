// Package portproxy forwards HTTP and WebSocket requests to a sandbox's
// exposed port, at the address the provider gave for it
// (providers.Sandbox.PortURLs): "unix://<socket>" on this host (the local
// provider's forwarder into the sandbox's network namespace) or the
// provider's own http(s) URL. It is the API's on a server that can reach
// such sockets and hold a WebSocket open (`sandstep serve`); the API Lambda
// does not link it.
package portproxy

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// CookiePrefix starts the names of sandstep's own cookies (a sandbox's URL
// token after a first visit): they are not passed on to the app.
const CookiePrefix = "sandstep_"

// transports keeps one transport per target, so that an app's connections
// are reused from request to request instead of each request opening (and
// leaving idle) connections of its own. Targets unused for transportTTL
// (their sandbox ended, most likely) are dropped.
var transports = struct {
	sync.Mutex
	m map[string]*cachedTransport
}{m: map[string]*cachedTransport{}}

type cachedTransport struct {
	tr   *http.Transport
	used time.Time
}

const transportTTL = 10 * time.Minute

func transport(target string, u *url.URL) *http.Transport {
	transports.Lock()
	defer transports.Unlock()
	now := time.Now()
	if c, ok := transports.m[target]; ok {
		c.used = now
		return c.tr
	}
	for k, c := range transports.m {
		if now.Sub(c.used) > transportTTL {
			c.tr.CloseIdleConnections()
			delete(transports.m, k)
		}
	}
	tr := &http.Transport{ResponseHeaderTimeout: 5 * time.Minute, IdleConnTimeout: 30 * time.Second, MaxIdleConnsPerHost: 8}
	if u.Scheme == "unix" {
		sock := u.Path
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) { return dialSocket(ctx, sock) }
	}
	transports.m[target] = &cachedTransport{tr: tr, used: now}
	return tr
}

// New returns a reverse proxy to an exposed port's address. prefix is the
// part of the request's path before the app's own (it is cut, and passed
// on as X-Forwarded-Prefix); the query's token, Authorization and
// sandstep's cookies are sandstep's and are not passed on, the app's own
// cookies are, and the cookies the app sets are scoped to the port's
// prefix, so that two apps on sandstep's one origin do not see each
// other's. onError answers a failed forward.
func New(target, prefix string, onError func(http.ResponseWriter, *http.Request, error)) (http.Handler, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	base := &url.URL{Scheme: u.Scheme, Host: u.Host, Path: strings.TrimRight(u.Path, "/")}
	if u.Scheme == "unix" {
		base = &url.URL{Scheme: "http", Host: "sandbox"}
	} else if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("port URL scheme %q", u.Scheme)
	}
	return &httputil.ReverseProxy{
		Transport:    transport(target, u),
		ErrorHandler: onError,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = base.Scheme, base.Host
			// The app gets its path as the client escaped it (an encoded
			// "/" stays encoded).
			raw := base.Path + strings.TrimPrefix(pr.In.URL.EscapedPath(), prefix)
			p, err := url.PathUnescape(raw)
			if err != nil {
				p = raw
			}
			pr.Out.URL.Path, pr.Out.URL.RawPath = p, raw
			q := pr.In.URL.Query()
			if q.Has("token") {
				q.Del("token")
				pr.Out.URL.RawQuery = q.Encode()
			}
			if u.Scheme == "unix" {
				// The app in the sandbox sees the host the client asked.
				pr.Out.Host = pr.In.Host
			} else {
				// A provider's own URL (Deno's domain, a Modal tunnel) is
				// routed by its host name.
				pr.Out.Host = base.Host
			}
			pr.Out.Header.Del("Authorization")
			appCookies(pr.Out.Header)
			pr.SetXForwarded()
			pr.Out.Header.Set("X-Forwarded-Prefix", prefix)
		},
		ModifyResponse: func(res *http.Response) error {
			scopeCookies(res.Header, prefix)
			return nil
		},
	}, nil
}

// appCookies keeps the app's own cookies of a request and drops sandstep's.
func appCookies(h http.Header) {
	all := h.Values("Cookie")
	if len(all) == 0 {
		return
	}
	h.Del("Cookie")
	var kept []string
	for _, line := range all {
		for _, part := range strings.Split(line, ";") {
			name, _, _ := strings.Cut(strings.TrimSpace(part), "=")
			if name != "" && !strings.HasPrefix(name, CookiePrefix) {
				kept = append(kept, strings.TrimSpace(part))
			}
		}
	}
	if len(kept) > 0 {
		h.Set("Cookie", strings.Join(kept, "; "))
	}
}

// scopeCookies puts the cookies an app sets under the port's prefix: the
// app's "/" is prefix + "/" on sandstep's origin. A cookie named like
// sandstep's own is dropped.
func scopeCookies(h http.Header, prefix string) {
	all := h.Values("Set-Cookie")
	if len(all) == 0 {
		return
	}
	h.Del("Set-Cookie")
	for _, line := range all {
		c, err := http.ParseSetCookie(line)
		if err != nil || strings.HasPrefix(c.Name, CookiePrefix) {
			continue
		}
		p := c.Path
		if !strings.HasPrefix(p, "/") {
			p = "/"
		}
		c.Path = prefix + p
		// The app's idea of its domain is not sandstep's.
		c.Domain = ""
		if v := c.String(); v != "" {
			h.Add("Set-Cookie", v)
		}
	}
}

// dialSocket connects to a unix socket whose path may be longer than the
// 108 bytes a socket address holds, through the folder's descriptor.
func dialSocket(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	if len(path) < 100 {
		return d.DialContext(ctx, "unix", path)
	}
	fd, err := syscall.Open(filepath.Dir(path), syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	return d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d/%s", fd, filepath.Base(path)))
}
