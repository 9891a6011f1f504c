package soak

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
)

// gate holds the next request it sees until it is opened: a phase that is
// reliably in flight while the test kills the server.
type gate struct {
	mu      sync.Mutex
	armed   bool
	entered chan struct{}
	release chan struct{}
}

// arm makes the next request wait; the channel closes when it arrives.
func (g *gate) arm() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed, g.entered, g.release = true, make(chan struct{}), make(chan struct{})
	return g.entered
}

// open lets the held request (and every later one) go.
func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed = false
	if g.release != nil {
		select {
		case <-g.release:
		default:
			close(g.release)
		}
	}
}

// pass is called by a handler: it waits while the gate holds it.
func (g *gate) pass(r *http.Request) {
	g.mu.Lock()
	if !g.armed {
		g.mu.Unlock()
		return
	}
	g.armed = false
	entered, release := g.entered, g.release
	g.mu.Unlock()
	close(entered)
	select {
	case <-release:
	case <-r.Context().Done():
	}
}

// searx is a SearxNG JSON API answering with the pages set, behind a gate.
type searx struct {
	*httptest.Server
	gate
	mu      sync.Mutex
	results []map[string]any
}

func newSearx(t testing.TB) *searx {
	s := &searx{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.pass(r)
		s.mu.Lock()
		rs := s.results
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"query": r.URL.Query().Get("q"), "number_of_results": len(rs), "results": rs})
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *searx) answer(urls ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.results = nil
	for i, u := range urls {
		s.results = append(s.results, map[string]any{"url": u, "title": "result " + strconv.Itoa(i), "content": "a kestrel snippet", "engine": "fake", "score": 1.0 / float64(i+1)})
	}
}

// fakeLLM is an OpenAI-compatible chat API that streams a short report
// citing source [1], behind a gate.
func fakeLLM(t testing.TB, g *gate) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.pass(r)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, part := range []string{"## Executive summary\n\nKestrels hover [1].\n\n", "## Key findings\n\n- They hunt voles [1].\n"} {
			data, _ := json.Marshal(map[string]any{"model": "fixture-model", "choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": part}}}})
			fmt.Fprintf(w, "data: %s\n\n", data)
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// gatedPage serves one article page behind a gate, for a crawl that is in
// flight, and a JSON summary for the agent at /summary.
func gatedPage(t testing.TB, g *gate) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.pass(r)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, `<!doctype html><html><head><title>Held kestrels</title></head><body><article><h1>Held kestrels</h1>
<p>This page was held while the server died. Kestrels hover over fields and hunt voles; they nest in old buildings and
tree holes, and a pair raises four to six young each year.</p></article></body></html>`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// hostOf is a test server's "IP:port", as [sandbox] allow_private takes it.
func hostOf(srv *httptest.Server) string { return srv.Listener.Addr().String() }
