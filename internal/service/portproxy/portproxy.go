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
	"syscall"
	"time"
)

// New returns a reverse proxy to an exposed port's address. prefix is the
// part of the request's path before the app's own (it is cut, and passed
// on as X-Forwarded-Prefix); the query's token, Authorization and cookies
// are sandstep's and are not passed on. onError answers a failed forward.
func New(target, prefix string, onError func(http.ResponseWriter, *http.Request, error)) (http.Handler, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{ResponseHeaderTimeout: 5 * time.Minute, IdleConnTimeout: 30 * time.Second}
	base := &url.URL{Scheme: u.Scheme, Host: u.Host, Path: strings.TrimRight(u.Path, "/")}
	if u.Scheme == "unix" {
		sock := u.Path
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) { return dialSocket(ctx, sock) }
		base = &url.URL{Scheme: "http", Host: "sandbox"}
	} else if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("port URL scheme %q", u.Scheme)
	}
	return &httputil.ReverseProxy{
		Transport:    tr,
		ErrorHandler: onError,
		Rewrite: func(pr *httputil.ProxyRequest) {
			rest := strings.TrimPrefix(pr.In.URL.Path, prefix)
			pr.Out.URL.Scheme, pr.Out.URL.Host = base.Scheme, base.Host
			pr.Out.URL.Path = base.Path + rest
			pr.Out.URL.RawPath = ""
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
			pr.Out.Header.Del("Cookie")
			pr.SetXForwarded()
			pr.Out.Header.Set("X-Forwarded-Prefix", prefix)
		},
	}, nil
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
