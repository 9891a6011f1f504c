package deno

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/sandstep/sandstep/providers"
)

// rpcConn is one WebSocket to a sandbox, speaking JSON-RPC 2.0 in text
// frames, with Deno's stream notifications both ways.
type rpcConn struct {
	id string // the sandbox's
	ws *websocket.Conn

	mu      sync.Mutex
	nextID  int64
	pending map[int64]chan reply
	inbound map[int]*sink // server streams (stdout, stderr)
	nextOut int           // client streams (stdin, file content)
	err     error         // set once the socket is gone
	done    chan struct{}
	// ctx is the socket's life: every write uses it, never a caller's,
	// since a write whose context ends closes the WebSocket.
	ctx    context.Context
	cancel context.CancelFunc
}

type reply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

// serializedError is an application error inside a result.
type serializedError struct {
	ConstructorName string  `json:"constructorName"`
	Message         string  `json:"message"`
	Code            *string `json:"code"`
}

// appError is a sandbox's application error (ENOENT and the like).
type appError struct{ serializedError }

func (e *appError) Error() string {
	return e.ConstructorName + ": " + e.Message
}

// dial opens a sandbox socket: create (config set) or connect.
func dial(ctx context.Context, c *client, op, url string, config []byte) (*rpcConn, error) {
	h := http.Header{}
	c.headers(h)
	if config != nil {
		h.Set("x-deno-sandbox-config", base64.StdEncoding.EncodeToString(config))
	}
	ws, resp, err := websocket.Dial(ctx, strings.Replace(url, "http", "ws", 1), &websocket.DialOptions{HTTPHeader: h, HTTPClient: c.hc})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			var body []byte
			if resp.Body != nil {
				body, _ = io.ReadAll(io.LimitReader(resp.Body, 1024))
			}
			e := errorFrom(resp.StatusCode, resp.Header, body)
			return nil, providers.Wrap(codeFor(resp.StatusCode), op, e)
		}
		if ctx.Err() != nil {
			return nil, providers.Wrap(providers.DeadlineExceeded, op, err)
		}
		return nil, providers.Wrap(providers.Unavailable, op, err)
	}
	id := resp.Header.Get("x-deno-sandbox-id")
	if !sandboxIDRE.MatchString(id) {
		_ = ws.CloseNow()
		return nil, providers.Errorf(providers.Internal, op, "Deno's upgrade carries no usable sandbox id (%q)", clip(id))
	}
	ws.SetReadLimit(64 << 20)
	rc := &rpcConn{id: id, ws: ws, pending: map[int64]chan reply{}, inbound: map[int]*sink{}, done: make(chan struct{})}
	rc.ctx, rc.cancel = context.WithCancel(context.Background())
	go rc.read()
	go rc.keepalive()
	return rc, nil
}

// keepalive sends the text frame "ping" the way the SDK does.
func (rc *rpcConn) keepalive() {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-rc.done:
			return
		case <-t.C:
			_ = rc.ws.Write(rc.ctx, websocket.MessageText, []byte("ping"))
		}
	}
}

func (rc *rpcConn) read() {
	var err error
	for {
		var data []byte
		_, data, err = rc.ws.Read(context.Background())
		if err != nil {
			break
		}
		if string(data) == "pong" {
			continue
		}
		var m struct {
			ID     *int64          `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
			reply
		}
		if json.Unmarshal(data, &m) != nil {
			err = errors.New("Deno sent a frame that is not JSON")
			_ = rc.ws.Close(4000, "Invalid JSON")
			break
		}
		if m.ID == nil {
			rc.notification(m.Method, m.Params)
			continue
		}
		rc.mu.Lock()
		ch := rc.pending[*m.ID]
		delete(rc.pending, *m.ID)
		rc.mu.Unlock()
		if ch != nil {
			ch <- m.reply
		}
	}
	rc.shut(err)
}

// shut records why the socket is gone and fails everything waiting on it.
func (rc *rpcConn) shut(err error) {
	code := websocket.CloseStatus(err)
	gone := fmt.Errorf("the connection to sandbox %s closed: %w", rc.id, err)
	if code == websocket.StatusNormalClosure || code == websocket.StatusGoingAway || code == websocket.StatusNoStatusRcvd {
		gone = fmt.Errorf("sandbox %s stopped (its connection closed normally)", rc.id)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.err != nil {
		return
	}
	rc.err = gone
	close(rc.done)
	rc.cancel()
	for id, ch := range rc.pending {
		close(ch)
		delete(rc.pending, id)
	}
	for _, s := range rc.inbound {
		s.finish(gone)
	}
}

func (rc *rpcConn) close() {
	_ = rc.ws.Close(websocket.StatusNormalClosure, "")
	rc.shut(errors.New("closed by the provider"))
}

func (rc *rpcConn) alive() bool {
	select {
	case <-rc.done:
		return false
	default:
		return true
	}
}

func (rc *rpcConn) notification(method string, params json.RawMessage) {
	var p struct {
		StreamID int    `json:"streamId"`
		Data     []byte `json:"data"`
	}
	if json.Unmarshal(params, &p) != nil {
		return
	}
	switch method {
	case "$sandbox.stream.start":
		rc.stream(p.StreamID)
	case "$sandbox.stream.enqueue":
		rc.stream(p.StreamID).add(p.Data)
	case "$sandbox.stream.end":
		rc.stream(p.StreamID).finish(nil)
	case "$sandbox.stream.error":
		rc.stream(p.StreamID).finish(errors.New("the sandbox's stream failed"))
	}
}

// stream returns server stream id, made on first mention: its start may
// come before or after the answer naming it.
func (rc *rpcConn) stream(id int) *sink {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	s := rc.inbound[id]
	if s == nil {
		s = newSink()
		rc.inbound[id] = s
	}
	return s
}

// drain copies server stream id into w (nil discards) until it ends.
func (rc *rpcConn) drain(id int, w io.Writer) error {
	s := rc.stream(id)
	defer func() {
		rc.mu.Lock()
		delete(rc.inbound, id)
		rc.mu.Unlock()
	}()
	return s.copyTo(w)
}

// sink buffers a server stream: the read loop never blocks on a consumer.
type sink struct {
	mu     sync.Mutex
	cond   *sync.Cond
	chunks [][]byte
	ended  bool
	err    error
}

func newSink() *sink {
	s := &sink{}
	s.cond = sync.NewCond(&s.mu)
	return s
}

func (s *sink) add(b []byte) {
	s.mu.Lock()
	if !s.ended {
		s.chunks = append(s.chunks, b)
	}
	s.mu.Unlock()
	s.cond.Broadcast()
}

func (s *sink) finish(err error) {
	s.mu.Lock()
	if !s.ended {
		s.ended, s.err = true, err
	}
	s.mu.Unlock()
	s.cond.Broadcast()
}

func (s *sink) copyTo(w io.Writer) error {
	var werr error
	for {
		s.mu.Lock()
		for len(s.chunks) == 0 && !s.ended {
			s.cond.Wait()
		}
		chunks := s.chunks
		s.chunks = nil
		ended, err := s.ended, s.err
		s.mu.Unlock()
		for _, c := range chunks {
			if w != nil && werr == nil {
				_, werr = w.Write(c)
			}
		}
		if ended && len(chunks) == 0 {
			if err != nil {
				return err
			}
			return werr
		}
	}
}

// send writes one JSON message.
func (rc *rpcConn) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return rc.ws.Write(rc.ctx, websocket.MessageText, b)
}

// call invokes method and decodes {"ok": ...} into out (nil: discarded). An
// application error comes back as *appError inside a providers.Error.
func (rc *rpcConn) call(ctx context.Context, op, method string, params, out any) error {
	return rc.callThen(ctx, op, method, params, out, nil)
}

// callThen is call, running sent (when not nil) once the request is out:
// a client stream the call reads starts flowing then.
func (rc *rpcConn) callThen(ctx context.Context, op, method string, params, out any, sent func()) error {
	ch := make(chan reply, 1)
	rc.mu.Lock()
	if rc.err != nil {
		err := rc.err
		rc.mu.Unlock()
		return providers.Wrap(providers.NotFound, op, err)
	}
	id := rc.nextID
	rc.nextID++
	rc.pending[id] = ch
	rc.mu.Unlock()
	forget := func() {
		rc.mu.Lock()
		delete(rc.pending, id)
		rc.mu.Unlock()
	}
	if err := rc.send(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params}); err != nil {
		forget()
		if ctx.Err() != nil {
			return providers.Wrap(providers.DeadlineExceeded, op, err)
		}
		return providers.Wrap(providers.Unavailable, op, err)
	}
	if sent != nil {
		sent()
	}
	var r reply
	var ok bool
	select {
	case r, ok = <-ch:
	case <-ctx.Done():
		forget()
		return providers.Wrap(providers.DeadlineExceeded, op, ctx.Err())
	}
	if !ok {
		rc.mu.Lock()
		err := rc.err
		rc.mu.Unlock()
		return providers.Wrap(providers.NotFound, op, err)
	}
	if r.Error != nil {
		code := providers.Internal
		if r.Error.Code == -32601 {
			code = providers.Unsupported
		} else if r.Error.Code == -32602 {
			code = providers.InvalidArgument
		}
		return providers.Errorf(code, op, "Deno's %s failed: %s (%d)", method, r.Error.Message, r.Error.Code)
	}
	var res struct {
		OK    json.RawMessage  `json:"ok"`
		Error *serializedError `json:"error"`
	}
	if err := json.Unmarshal(r.Result, &res); err != nil {
		return providers.Wrap(providers.Internal, op, fmt.Errorf("Deno's %s answer is not a result: %w", method, err))
	}
	if res.Error != nil {
		e := &appError{*res.Error}
		return &providers.Error{Code: appCode(e), Op: op, Message: e.Error(), Err: e}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(res.OK, out); err != nil {
		return providers.Wrap(providers.Internal, op, fmt.Errorf("Deno's %s answer: %w", method, err))
	}
	return nil
}

// appCode maps Deno's error classes (Deno.errors) to provider codes.
func appCode(e *appError) providers.Code {
	switch e.ConstructorName {
	case "NotFound":
		return providers.NotFound
	case "PermissionDenied":
		return providers.PermissionDenied
	case "AlreadyExists", "IsADirectory", "NotADirectory", "NotEmpty":
		return providers.FailedPrecondition
	}
	if e.Code != nil {
		switch *e.Code {
		case "ENOENT":
			return providers.NotFound
		case "EISDIR", "ENOTDIR", "EEXIST", "ENOTEMPTY":
			return providers.FailedPrecondition
		case "EACCES", "EPERM", "EROFS":
			return providers.PermissionDenied
		}
	}
	return providers.Internal
}

// sendStream announces r as a client stream and returns its id, and begin,
// which sends the chunks base64 encoded, then end, or error when r fails
// (the receiver then fails the call that reads it); done says how that
// went. The SDK announces the stream before the call that names it.
func (rc *rpcConn) sendStream(r io.Reader) (id int, begin func(), done <-chan error) {
	rc.mu.Lock()
	id = rc.nextOut
	rc.nextOut++
	rc.mu.Unlock()
	result := make(chan error, 1)
	note := func(method string, params map[string]any) error {
		return rc.send(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
	}
	if err := note("$sandbox.stream.start", map[string]any{"streamId": id}); err != nil {
		result <- err
		return id, func() {}, result
	}
	var once sync.Once
	return id, func() { once.Do(func() { go pump(r, note, id, result) }) }, result
}

func pump(r io.Reader, note func(string, map[string]any) error, id int, done chan<- error) {
	buf := make([]byte, 256<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if werr := note("$sandbox.stream.enqueue", map[string]any{"streamId": id, "data": buf[:n]}); werr != nil {
				done <- werr
				return
			}
		}
		if errors.Is(err, io.EOF) {
			done <- note("$sandbox.stream.end", map[string]any{"streamId": id})
			return
		}
		if err != nil {
			_ = note("$sandbox.stream.error", map[string]any{"streamId": id, "error": map[string]any{"constructorName": "Error", "message": "the content source failed"}})
			done <- err
			return
		}
	}
}
