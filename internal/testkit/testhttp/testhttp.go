// Package testhttp is an HTTP server for tests, on 127.0.0.1, that records
// every request it gets: a fixture a sandbox may reach, or a stand-in for a
// service no sandbox may reach, whose silence a test asserts.
package testhttp

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Options shape a Recorder.
type Options struct {
	// TLS serves HTTPS with httptest's certificate (for example.com,
	// *.example.com and 127.0.0.1).
	TLS bool
	// Body writes the answer; nil answers "ok <path>". A request with a
	// "to" query parameter is redirected there instead.
	Body func(w http.ResponseWriter, r *http.Request)
}

// Recorder is a running server.
type Recorder struct {
	*httptest.Server
	mu    sync.Mutex
	reqs  map[string][]*http.Request
	paths []string
}

// Start serves until the test ends.
func Start(tb testing.TB, opts Options) *Recorder {
	tb.Helper()
	r := &Recorder{reqs: map[string][]*http.Request{}}
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.reqs[req.URL.Path] = append(r.reqs[req.URL.Path], req)
		r.paths = append(r.paths, req.URL.Path)
		r.mu.Unlock()
		switch to := req.URL.Query().Get("to"); {
		case to != "":
			http.Redirect(w, req, to, http.StatusFound)
		case opts.Body != nil:
			opts.Body(w, req)
		default:
			fmt.Fprintf(w, "ok %s", req.URL.Path)
		}
	})
	if opts.TLS {
		r.Server = httptest.NewTLSServer(h)
	} else {
		r.Server = httptest.NewServer(h)
	}
	tb.Cleanup(r.Close)
	return r
}

// Addr is "127.0.0.1:port".
func (r *Recorder) Addr() string { return r.Listener.Addr().String() }

// Port is the server's port.
func (r *Recorder) Port() string {
	_, p, _ := net.SplitHostPort(r.Addr())
	return p
}

// Got returns the requests for path, in order.
func (r *Recorder) Got(path string) []*http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*http.Request(nil), r.reqs[path]...)
}

// Paths returns the path of every request, in order.
func (r *Recorder) Paths() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.paths...)
}

// Header returns header h of the first request for path ("" without one).
func (r *Recorder) Header(path, h string) string {
	if reqs := r.Got(path); len(reqs) > 0 {
		return reqs[0].Header.Get(h)
	}
	return ""
}
