package api_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/api"
)

// shortServer is [server] with timeouts short enough for a test, loaded
// the way `sandstep serve` loads it.
func shortServer(t testing.TB) config.ServerConfig {
	t.Helper()
	c, err := config.Parse([]byte(`
[server]
read_header_timeout = "1s"
read_body_timeout = "2s"
write_timeout = "10s"
idle_timeout = "3s"
stream_heartbeat = "200ms"
stream_max_duration = "6s"
[sessions]
sync_wait = "1s"
`), "config.toml", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return c.Server
}

func withServer(sc config.ServerConfig) func(*api.Options) {
	return func(o *api.Options) { o.Server = sc }
}

// raiseFileLimit lets the test hold n connections at once, both ends of
// each in this process.
func raiseFileLimit(t *testing.T, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur < n && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
	}
	if lim.Cur < n {
		t.Fatalf("the open file limit is %d (hard %d); this test needs %d", lim.Cur, lim.Max, n)
	}
}

func openFDs(t testing.TB) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

// healthProbe asks /healthz every interval until stopped and remembers
// every answer that was not a 200.
type healthProbe struct {
	stop     chan struct{}
	done     chan struct{}
	mu       sync.Mutex
	answers  int
	failures []string
	client   *http.Client
}

func probeHealth(url string, every time.Duration) *healthProbe {
	p := &healthProbe{stop: make(chan struct{}), done: make(chan struct{}),
		client: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}}
	go func() {
		defer close(p.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			res, err := p.client.Get(url + "/healthz")
			p.mu.Lock()
			switch {
			case err != nil:
				p.failures = append(p.failures, err.Error())
			case res.StatusCode != http.StatusOK:
				p.failures = append(p.failures, res.Status)
			default:
				p.answers++
			}
			p.mu.Unlock()
			if res != nil {
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
		}
	}()
	return p
}

func (p *healthProbe) finish(t *testing.T, atLeast int) {
	t.Helper()
	close(p.stop)
	<-p.done
	p.client.CloseIdleConnections()
	if len(p.failures) > 0 || p.answers < atLeast {
		t.Fatalf("/healthz: %d answers (want at least %d), failures: %v", p.answers, atLeast, p.failures)
	}
}

// halfSent sends head (and the start of a body it announces but never
// finishes) on a new connection, then reads until the server closes it.
type halfSent struct {
	conn net.Conn
	sent time.Time
}

func sendHalf(t *testing.T, addr, head string) halfSent {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatalf("write: %v", err)
	}
	return halfSent{conn: conn, sent: time.Now()}
}

// closedBy waits at most limit for the server to close the connection and
// returns what it answered before, and how long it took.
func (h halfSent) closedBy(limit time.Duration) ([]byte, time.Duration, error) {
	defer h.conn.Close()
	h.conn.SetReadDeadline(h.sent.Add(limit))
	b, err := io.ReadAll(h.conn)
	took := time.Since(h.sent)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return b, took, fmt.Errorf("still open after %s", limit)
	}
	// A reset is a close too.
	return b, took, nil
}

// answerOf parses the HTTP answer in b, if any.
func answerOf(b []byte) (*http.Response, map[string]any) {
	res, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), nil)
	if err != nil {
		return nil, nil
	}
	body, _ := io.ReadAll(res.Body)
	var m map[string]any
	_ = json.Unmarshal(body, &m)
	return res, m
}

// A client that announces a body and sends three bytes of it, without a
// token, cannot keep a connection: 1,000 of them at once are each closed
// within the server's read timeout, /healthz answers all along, and the
// process's open files come back to where they were. The same holds with a
// token (the body deadline answers 408), for headers that never end, and
// for a public route that reads no body.
func TestHalfSentRequestsAreClosed(t *testing.T) {
	const n = 1000
	raiseFileLimit(t, 2*n+256)
	sc := shortServer(t)
	e := newEnv(t, withServer(sc))
	addr := strings.TrimPrefix(e.srv.URL, "http://")
	// Scheduling on a loaded machine may add to the timeout itself.
	const grace = 3 * time.Second
	limit := sc.ReadTimeout() + grace

	// Warm up: the store, the probe's connection and this test's own
	// goroutines exist before the count starts.
	e.get("/healthz", "")
	probe := probeHealth(e.srv.URL, 50*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	before := openFDs(t)

	type variant struct {
		name   string
		count  int
		head   string
		status int    // the answer expected before the close; 0: none
		code   string // its error code
	}
	half := func(path, auth string) string {
		method := "POST"
		if path == "/healthz" {
			method = "GET"
		}
		h := method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n"
		if auth != "" {
			h += "Authorization: Bearer " + auth + "\r\n"
		}
		return h + "\r\n{\"q"
	}
	for _, v := range []variant{
		{name: "no token", count: n, head: half("/v1/jobs", ""), status: http.StatusUnauthorized, code: "unauthenticated"},
		{name: "with a token", count: 50, head: half("/v1/jobs", tokenAcme), status: http.StatusRequestTimeout, code: "request_timeout"},
		{name: "headers never end", count: 50, head: "POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le"},
		{name: "public route", count: 50, head: half("/healthz", ""), status: http.StatusOK},
		{name: "unknown route", count: 50, head: half("/v1/nothing", ""), status: http.StatusNotFound, code: "not_found"},
	} {
		t.Run(v.name, func(t *testing.T) {
			conns := make([]halfSent, v.count)
			for i := range conns {
				conns[i] = sendHalf(t, addr, v.head)
			}
			var wg sync.WaitGroup
			errs := make(chan error, v.count)
			// A connection closed in time but with nothing read: one of
			// 1,000 was, once, in a CI run with four test packages at
			// once on two cores, and did not recur in 24 runs under
			// load; its cause is not known. A few are tolerated and
			// logged; a server that closed without answering would show
			// on most of them.
			var unanswered atomic.Int32
			for _, c := range conns {
				wg.Add(1)
				go func() {
					defer wg.Done()
					b, took, err := c.closedBy(limit)
					if err != nil {
						errs <- err
						return
					}
					if took > limit {
						errs <- fmt.Errorf("closed after %s, past the read timeout %s", took, sc.ReadTimeout())
						return
					}
					if v.status == 0 {
						return
					}
					if len(b) == 0 {
						unanswered.Add(1)
						return
					}
					res, body := answerOf(b)
					if res == nil || res.StatusCode != v.status {
						errs <- fmt.Errorf("answered %q, want %d", b, v.status)
						return
					}
					if v.code != "" {
						eo, _ := body["error"].(map[string]any)
						if eo == nil || eo["code"] != v.code {
							errs <- fmt.Errorf("answered %q, want the error %q", b, v.code)
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			var failed []string
			for err := range errs {
				failed = append(failed, err.Error())
			}
			if n := int(unanswered.Load()); n > max(1, v.count/100) {
				failed = append(failed, fmt.Sprintf("%d closed with no answer", n))
			} else if n > 0 {
				t.Logf("%d of %d connections closed with nothing read", n, v.count)
			}
			if len(failed) > 0 {
				t.Fatalf("%d of %d connections: %s", len(failed), v.count, strings.Join(failed[:min(len(failed), 5)], "; "))
			}
		})
	}
	probe.finish(t, 5)

	// Every connection is gone on both ends: the count comes back to
	// where it was (the server closes a connection shortly after its last
	// answer).
	deadline := time.Now().Add(15 * time.Second)
	for {
		now := openFDs(t)
		if now <= before+10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("open files: %d before, %d after", before, now)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A body over the route's limit is refused with the JSON error naming the
// limit, whether its length is declared (refused unread, before the token
// is looked at) or not (chunked, stopped at the limit).
func TestBodyLimits(t *testing.T) {
	sc := shortServer(t)
	sc.MaxBodyBytes = 2048
	sc.MaxRunBodyBytes = 8192
	e := newSessionsEnv(t, "[sessions]\nenabled = true\n", withServer(sc))
	big := `{"query":"` + strings.Repeat("x", 4000) + `"}`
	for _, tc := range []struct {
		name, path, token string
		body              io.Reader
		field, key        string
	}{
		{"declared, no token", "/v1/jobs", "", strings.NewReader(big), "", "server.max_body_bytes"},
		{"declared", "/v1/jobs", tokenAcme, strings.NewReader(big), "", "server.max_body_bytes"},
		{"chunked", "/v1/jobs", tokenAcme, io.MultiReader(strings.NewReader(big)), "", "server.max_body_bytes"},
		{"a route without a body", "/v1/jobs/x/cancel", tokenAcme, strings.NewReader(big), "", "server.max_body_bytes"},
		{"run, chunked", "/v1/sessions/s1/run", tokenAcme, io.MultiReader(strings.NewReader(`{"language":"shell","code":"` + strings.Repeat("x", 9000) + `"}`)), "code", "server.max_run_body_bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := e.do(http.MethodPost, tc.path, tc.token, tc.body, "Content-Type", "application/json")
			er := wantError(t, res, http.StatusRequestEntityTooLarge, "payload_too_large", tc.field)
			if msg, _ := er["message"].(string); !strings.Contains(msg, tc.key) {
				t.Fatalf("message %q does not name %s", msg, tc.key)
			}
		})
	}
	// Within the limits, the run route takes more than the others.
	res := e.post("/v1/jobs", tokenAcme, `{"query":"`+strings.Repeat("x", 1900)+`"}`)
	wantStatus(t, res, http.StatusAccepted)
}

// A stream is exempt from the read and write timeouts: it outlives both,
// with keep-alive comments, and ends cleanly at its maximum duration, after
// which the client resumes with Last-Event-ID.
func TestStreamOutlivesTheTimeouts(t *testing.T) {
	sc := shortServer(t)
	sc.WriteTimeout = config.Duration(1500 * time.Millisecond)
	sc.StreamMaxDuration = config.Duration(5 * time.Second)
	e := newEnv(t, streaming(50*time.Millisecond), withServer(sc))
	e.submit(tokenAcme, "long-1")
	appendEvents(t, e.store, acmeKey("long-1"), 1, 1)
	start := time.Now()
	res, sse := e.openStream(ctxFor(t), "/v1/jobs/long-1/events")
	defer res.Body.Close()
	var ids []string
	beats := 0
	var last string
	for {
		ev, err := sse.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the stream broke after %s: %v", time.Since(start), err)
		}
		for _, c := range ev.comments {
			last = c
			if c == "keep-alive" {
				beats++
			}
		}
		switch {
		case ev.id != "":
			ids = append(ids, ev.id)
			if ev.id == "1" {
				// One more event while the stream is open, past the
				// read timeout.
				go func() {
					time.Sleep(sc.ReadTimeout() + 500*time.Millisecond)
					appendEvents(t, e.store, acmeKey("long-1"), 2, 2)
				}()
			}
		}
	}
	took := time.Since(start)
	if took < sc.StreamMaxDuration.D() {
		t.Fatalf("the stream ended after %s, before its maximum duration %s (read timeout %s, write timeout %s)", took, sc.StreamMaxDuration, sc.ReadTimeout(), sc.WriteTimeout)
	}
	if strings.Join(ids, ",") != "1,2" || beats < 3 || !strings.Contains(last, "Last-Event-ID") {
		t.Fatalf("events %v, %d keep-alives, last comment %q", ids, beats, last)
	}
}
