package api

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/sandstep/sandstep/config"
)

// NewServer is the HTTP server of the API, as `sandstep serve` runs it:
// every read, write and idle wait is bounded, so a client (with a token or
// without) cannot hold a connection open by sending slowly or not at all.
// The whole-request read bound is the backstop for what never reaches a
// handler's own body deadline; Server-Sent Events streams lift the
// deadlines of their connection and bound themselves (see stream).
func NewServer(h http.Handler, sc config.ServerConfig, logger *slog.Logger) *http.Server {
	if logger == nil {
		logger = slog.Default()
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: sc.ReadHeaderTimeout.D(),
		ReadTimeout:       sc.ReadTimeout(),
		WriteTimeout:      sc.WriteTimeout.D(),
		IdleTimeout:       sc.IdleTimeout.D(),
		MaxHeaderBytes:    sc.MaxHeaderBytes,
		// What net/http reports itself (a refused TLS handshake, accept
		// errors) goes to the structured log like the rest.
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// limits fills the zero fields of the [server] settings with their
// defaults, so that a handler built without a config is bounded too.
func limits(sc config.ServerConfig) config.ServerConfig {
	d := config.DefaultServer()
	fill := func(v *config.Duration, def config.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	fill(&sc.ReadHeaderTimeout, d.ReadHeaderTimeout)
	fill(&sc.ReadBodyTimeout, d.ReadBodyTimeout)
	fill(&sc.WriteTimeout, d.WriteTimeout)
	fill(&sc.IdleTimeout, d.IdleTimeout)
	fill(&sc.StreamHeartbeat, d.StreamHeartbeat)
	fill(&sc.StreamMaxDuration, d.StreamMaxDuration)
	for _, f := range []struct {
		v   *int
		def int
	}{
		{&sc.MaxHeaderBytes, d.MaxHeaderBytes}, {&sc.MaxBodyBytes, d.MaxBodyBytes}, {&sc.MaxRunBodyBytes, d.MaxRunBodyBytes},
	} {
		if *f.v <= 0 {
			*f.v = f.def
		}
	}
	return sc
}

// guardBody bounds the request body of a route before anything else of
// the route runs: a declared length over the route's limit is refused
// unread, a body that turns out longer stops at the limit (413), and
// reading it has a deadline (408). Once the body is read the deadline is
// lifted: from then on the handler's time is bounded by the write timeout,
// and a read deadline would only cancel its context. Behind API Gateway
// the same limits hold; the deadlines do not apply there (the body is
// already in memory).
func (s *server) guardBody(rt route, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := callOf(r)
		b := &body{rc: http.NewResponseController(w), route: rt, timeout: s.opts.Server.ReadBodyTimeout.D()}
		if r.ContentLength > rt.maxBody {
			fail(w, c, b.tooLarge())
			return
		}
		c.rec.body = b
		if r.Body == nil || r.Body == http.NoBody {
			b.eof = true
			b.lift()
		} else {
			b.deadline(time.Now().Add(b.timeout))
			b.r = http.MaxBytesReader(w, r.Body, rt.maxBody)
			r.Body = b
		}
		next.ServeHTTP(w, r)
	})
}

func (b *body) tooLarge() *Error {
	msg := fmt.Sprintf("the request body is larger than %d bytes, the limit of this route", b.route.maxBody)
	if b.route.bodyKey != "" {
		msg += " (server." + b.route.bodyKey + ")"
	}
	return &Error{Status: http.StatusRequestEntityTooLarge, Code: CodePayloadTooLarge, Field: b.route.bodyField, Message: msg}
}

// body is a request body under guard. It remembers whether it was read to
// its end: an answer sent before that closes the connection, so that the
// server does not wait for the rest of a body nobody will read.
type body struct {
	rc      *http.ResponseController
	r       io.ReadCloser // the body, bounded by MaxBytesReader
	route   route         // its limit
	timeout time.Duration

	mu  sync.Mutex
	eof bool
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == nil {
		return n, nil
	}
	b.mu.Lock()
	b.eof = err == io.EOF
	b.mu.Unlock()
	var tooBig *http.MaxBytesError
	var ne net.Error
	switch {
	case err == io.EOF:
		b.lift()
	case errors.As(err, &tooBig):
		err = &bodyError{answer: b.tooLarge(), err: err}
	case errors.As(err, &ne) && ne.Timeout():
		err = &bodyError{err: err, answer: &Error{Status: http.StatusRequestTimeout, Code: CodeRequestTimeout,
			Message: fmt.Sprintf("the request body did not arrive within %s (server.read_body_timeout)", b.timeout)}}
	}
	return n, err
}

func (b *body) Close() error { return b.r.Close() }

// complete reports whether the body was read to its end.
func (b *body) complete() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.eof
}

func (b *body) deadline(t time.Time) {
	// Writers without deadlines (the Lambda's buffer) say so; the body is
	// in memory there.
	_ = b.rc.SetReadDeadline(t)
}

func (b *body) lift() { b.deadline(time.Time{}) }

// bodyError is a body that could not be read whole, with the answer to
// give: 413 past the limit, 408 past the deadline.
type bodyError struct {
	answer *Error
	err    error
}

func (e *bodyError) Error() string { return e.answer.Message + ": " + e.err.Error() }

func (e *bodyError) Unwrap() error { return e.err }
