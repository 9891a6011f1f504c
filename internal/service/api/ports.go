package api

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
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
	port, err := strconv.Atoi(r.PathValue("port"))
	exposed := false
	for _, p := range d.Ports {
		exposed = exposed || p == port
	}
	if err != nil || !exposed {
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: fmt.Sprintf("sandbox %s exposes no port %q", id, r.PathValue("port"))}
	}
	target := d.PortURLs[strconv.Itoa(port)]
	if s.opts.PortProxy == nil {
		if strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://") {
			http.Redirect(w, r, target, http.StatusTemporaryRedirect)
			return nil
		}
		return &Error{Status: http.StatusNotImplemented, Code: CodeUnavailable, Message: "this server does not proxy exposed ports (the provider gives them no public URL of its own); a server of `sandstep serve` does"}
	}
	if target == "" {
		return &Error{Status: http.StatusBadGateway, Code: CodeUnavailable, Message: "the provider did not expose this port"}
	}
	s.opts.Sandboxes.TouchPort(r.Context(), d)
	prefix := "/v1/sandboxes/" + id + "/ports/" + strconv.Itoa(port)
	if fromQuery {
		keepURLToken(w, r, id, d.URLToken, prefix+"/")
	}
	rp, err := s.opts.PortProxy(target, prefix, func(w http.ResponseWriter, r *http.Request, err error) {
		c.cause = err
		writeError(w, &Error{Status: http.StatusBadGateway, Code: CodeUnavailable, Message: "nothing answers on port " + strconv.Itoa(port) + " in the sandbox"})
	})
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
	rp.ServeHTTP(w, r)
	return nil
}
