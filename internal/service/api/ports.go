package api

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Exposed ports: /v1/sandboxes/{id}/ports/{port}/{path...} proxies HTTP and
// WebSocket requests to a server listening on that port in the sandbox,
// through the provider's forwarder (a unix socket on this host, for the
// local provider) or to the provider's own URL. Access is by the sandbox's
// URL token: ?token= once (it becomes a cookie for the port's path, and is
// not passed on), or a bearer token that may use the sandbox. Terminating
// the sandbox revokes it. Each request counts as the sandbox's activity.

func (s *server) portRoutes(mux *http.ServeMux) {
	s.handle(mux, "/v1/sandboxes/{id}/ports/{port}/{path...}", s.proxyPort, public, fileBody)
	s.handle(mux, "/v1/sandboxes/{id}/ports/{port}", s.portRoot, public)
}

// portRoot sends a request for the port's bare path to its folder, so that
// the app's relative links resolve under it.
func (s *server) portRoot(w http.ResponseWriter, r *http.Request, c *call) error {
	u := *r.URL
	u.Path += "/"
	u.RawPath = ""
	http.Redirect(w, r, u.RequestURI(), http.StatusTemporaryRedirect)
	return nil
}

func (s *server) proxyPort(w http.ResponseWriter, r *http.Request, c *call) error {
	id := r.PathValue("id")
	d, fromQuery, err := s.publicAccess(r, c, id)
	if err != nil {
		return err
	}
	c.tenant = d.Tenant
	port, err := strconv.Atoi(r.PathValue("port"))
	exposed := false
	for _, p := range d.Ports {
		exposed = exposed || p == port
	}
	if err != nil || !exposed {
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: fmt.Sprintf("sandbox %s exposes no port %q", id, r.PathValue("port"))}
	}
	target := d.PortURLs[strconv.Itoa(port)]
	if target == "" {
		return &Error{Status: http.StatusBadGateway, Code: CodeUnavailable, Message: "the provider did not expose this port"}
	}
	s.opts.Sandboxes.TouchPort(r.Context(), d)
	prefix := "/v1/sandboxes/" + id + "/ports/" + strconv.Itoa(port)
	if fromQuery {
		http.SetCookie(w, &http.Cookie{Name: urlTokenCookie(id), Value: d.URLToken, Path: prefix + "/",
			HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil})
	}
	rp, err := portProxy(target, prefix)
	if err != nil {
		c.cause = err
		return &Error{Status: http.StatusBadGateway, Code: CodeUnavailable, Message: "the port's address is not usable"}
	}
	// A WebSocket or a long response is not held to the API's deadlines.
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	if r.Header.Get("Upgrade") != "" {
		_ = rc.SetReadDeadline(time.Time{})
	}
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		c.cause = err
		writeError(w, &Error{Status: http.StatusBadGateway, Code: CodeUnavailable, Message: "nothing answers on port " + strconv.Itoa(port) + " in the sandbox"})
	}
	rp.ServeHTTP(w, r)
	return nil
}

// portProxy is a reverse proxy to an exposed port's URL: "unix://<socket>"
// or the provider's http(s) URL.
func portProxy(target, prefix string) (*httputil.ReverseProxy, error) {
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
		Transport: tr,
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
			pr.Out.Host = pr.In.Host
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
