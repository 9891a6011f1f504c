package fakedeno

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"sync"

	"github.com/coder/websocket"
)

// conn is one WebSocket of a sandbox, speaking JSON-RPC 2.0 in text frames.
type conn struct {
	s  *Server
	sb *sandbox
	ws *websocket.Conn

	mu         sync.Mutex
	inbound    map[int]*inbound // client-allocated streams (stdin, file content)
	nextStream int              // server-allocated stream ids
	files      handles
}

// inbound is a stream the client sends, buffered: the read loop never
// waits for the stream's consumer, whose call may come after the chunks.
type inbound struct {
	mu      sync.Mutex
	cond    *sync.Cond
	chunks  [][]byte
	ended   bool
	err     error
	closed  bool // the consumer stopped reading
	claimed bool
}

func (in *inbound) add(b []byte) {
	in.mu.Lock()
	if !in.ended && !in.closed {
		in.chunks = append(in.chunks, b)
	}
	in.mu.Unlock()
	in.cond.Broadcast()
}

func (in *inbound) end(err error) {
	in.mu.Lock()
	if !in.ended {
		in.ended, in.err = true, err
	}
	in.mu.Unlock()
	in.cond.Broadcast()
}

// Read gives the chunks in order, then io.EOF or the stream's error.
func (in *inbound) Read(p []byte) (int, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for len(in.chunks) == 0 && !in.ended && !in.closed {
		in.cond.Wait()
	}
	if in.closed {
		return 0, io.ErrClosedPipe
	}
	if len(in.chunks) == 0 {
		if in.err != nil {
			return 0, in.err
		}
		return 0, io.EOF
	}
	n := copy(p, in.chunks[0])
	if n == len(in.chunks[0]) {
		in.chunks = in.chunks[1:]
	} else {
		in.chunks[0] = in.chunks[0][n:]
	}
	return n, nil
}

func (in *inbound) Close() error {
	in.mu.Lock()
	in.closed, in.chunks = true, nil
	in.mu.Unlock()
	in.cond.Broadcast()
	return nil
}

type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"` // JS ids start at 0: never "absent" by value
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

// serializedError is the SDK's SerializedError; constructorName and message
// are what it requires, the nullable rest is always present.
type serializedError struct {
	ConstructorName string  `json:"constructorName"`
	Message         string  `json:"message"`
	Code            *string `json:"code"`
	Stack           *string `json:"stack"`
	Cause           any     `json:"cause"`
	Errors          any     `json:"errors"`
	Name            *string `json:"name"`
}

func appError(constructor, code, msg string) *serializedError {
	e := &serializedError{ConstructorName: constructor, Message: msg}
	if code != "" {
		e.Code = &code
	}
	e.Name = &constructor
	return e
}

// rpcError is a JSON-RPC protocol error, unlike the application errors that
// travel inside a successful result.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (c *conn) send(ctx context.Context, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	_ = c.ws.Write(ctx, websocket.MessageText, b)
}

func (c *conn) notify(ctx context.Context, method string, params any) {
	c.send(ctx, map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
}

func (c *conn) serve(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer c.files.closeAll()
	defer func() {
		c.mu.Lock()
		for _, in := range c.inbound {
			in.end(errors.New("the connection closed"))
		}
		c.mu.Unlock()
	}()
	for {
		typ, data, err := c.ws.Read(ctx)
		if err != nil {
			return
		}
		if typ == websocket.MessageText && string(data) == "ping" {
			_ = c.ws.Write(ctx, websocket.MessageText, []byte("pong"))
			continue
		}
		var m message
		if err := json.Unmarshal(data, &m); err != nil {
			_ = c.ws.Close(4000, "Invalid JSON")
			return
		}
		if m.JSONRPC != "2.0" || m.Method == "" {
			_ = c.ws.Close(4001, "Invalid message")
			return
		}
		if len(m.ID) == 0 || string(m.ID) == "null" {
			c.notification(m)
			continue
		}
		go c.call(ctx, m)
	}
}

// notification handles the client's stream messages.
func (c *conn) notification(m message) {
	var p struct {
		StreamID int    `json:"streamId"`
		Data     []byte `json:"data"` // base64 in JSON
	}
	if err := json.Unmarshal(m.Params, &p); err != nil {
		return
	}
	switch m.Method {
	case "$sandbox.stream.start":
		c.stream(p.StreamID)
	case "$sandbox.stream.enqueue":
		c.stream(p.StreamID).add(p.Data)
	case "$sandbox.stream.end":
		c.stream(p.StreamID).end(nil)
	case "$sandbox.stream.error":
		c.stream(p.StreamID).end(errors.New("the client's stream failed"))
	case "$sandbox.stream.cancel":
		// The client stops reading one of ours; the writer notices on its
		// next send, which goes nowhere.
	}
}

// stream returns the inbound stream id, made on first mention: the start
// notification and the call naming the stream may come in either order.
func (c *conn) stream(id int) *inbound {
	c.mu.Lock()
	defer c.mu.Unlock()
	in := c.inbound[id]
	if in == nil {
		in = &inbound{}
		in.cond = sync.NewCond(&in.mu)
		c.inbound[id] = in
	}
	return in
}

// claim hands an inbound stream to one consumer.
func (c *conn) claim(id int) (io.ReadCloser, bool) {
	in := c.stream(id)
	c.mu.Lock()
	defer c.mu.Unlock()
	if in.claimed {
		return nil, false
	}
	in.claimed = true
	return in, true
}

// newStreamID allocates a server stream id.
func (c *conn) newStreamID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := c.nextStream
	c.nextStream++
	return id
}

// pump sends r to the client as server stream id: enqueue in base64, then
// end.
func (c *conn) pump(ctx context.Context, id int, r io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			c.notify(ctx, "$sandbox.stream.enqueue", map[string]any{"streamId": id, "data": base64.StdEncoding.EncodeToString(buf[:n])})
		}
		if err != nil {
			c.notify(ctx, "$sandbox.stream.end", map[string]any{"streamId": id})
			return
		}
	}
}

// handler answers one method: ok is the value of {"ok": ...}, appErr an
// application error, rpcErr a protocol error.
type handler func(c *conn, ctx context.Context, params json.RawMessage) (ok any, appErr *serializedError, rpcErr *rpcError)

var handlers map[string]handler

func init() {
	handlers = map[string]handler{
		"spawn":         (*conn).spawn,
		"spawnDeno":     (*conn).spawnDeno,
		"processWait":   (*conn).processWait,
		"processKill":   (*conn).processKill,
		"readFile":      (*conn).readFile,
		"readTextFile":  (*conn).readTextFile,
		"writeFile":     (*conn).writeFile,
		"writeTextFile": (*conn).writeTextFile,
		"readDir":       (*conn).readDir,
		"mkdir":         (*conn).mkdir,
		"remove":        (*conn).remove,
		"rename":        (*conn).rename,
		"stat":          (*conn).stat,
		"lstat":         (*conn).lstat,
		"envGet":        (*conn).envGet,
		"envSet":        (*conn).envSet,
		"envDelete":     (*conn).envDelete,
		"envToObject":   (*conn).envToObject,
		"exposeHttp":    (*conn).exposeHTTP,
		"open":          (*conn).open,
		"fileRead":      (*conn).fileRead,
		"fileSeek":      (*conn).fileSeek,
		"fileClose":     (*conn).fileClose,
	}
}

func (c *conn) call(ctx context.Context, m message) {
	reply := map[string]any{"jsonrpc": "2.0", "id": m.ID}
	h := handlers[m.Method]
	if h == nil {
		reply["error"] = rpcError{Code: -32601, Message: "Method not found"}
		c.send(ctx, reply)
		return
	}
	if len(m.Params) == 0 || string(m.Params) == "null" {
		m.Params = json.RawMessage("{}")
	}
	ok, appErr, rpcErr := h(c, ctx, m.Params)
	switch {
	case rpcErr != nil:
		reply["error"] = rpcErr
	case appErr != nil:
		reply["result"] = map[string]any{"error": appErr}
	default:
		reply["result"] = map[string]any{"ok": ok}
	}
	c.send(ctx, reply)
}

// invalidParams is the protocol error the SDK's zod validation would give.
func invalidParams(err error) *rpcError {
	return &rpcError{Code: -32602, Message: "Invalid params", Data: map[string]string{"constructorName": "ZodError", "message": err.Error()}}
}

func decode(params json.RawMessage, v any) *rpcError {
	if err := json.Unmarshal(params, v); err != nil {
		return invalidParams(err)
	}
	return nil
}

func (c *conn) envGet(_ context.Context, params json.RawMessage) (any, *serializedError, *rpcError) {
	var p struct{ Key string }
	if e := decode(params, &p); e != nil {
		return nil, nil, e
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if v, ok := c.sb.env[p.Key]; ok {
		return v, nil, nil
	}
	if sec, ok := c.sb.secrets[p.Key]; ok {
		return sec.placeholder, nil, nil
	}
	return nil, nil, nil
}

func (c *conn) envSet(_ context.Context, params json.RawMessage) (any, *serializedError, *rpcError) {
	var p struct{ Key, Value string }
	if e := decode(params, &p); e != nil {
		return nil, nil, e
	}
	if !envNameRE.MatchString(p.Key) {
		return nil, appError("TypeError", "", "invalid environment variable name"), nil
	}
	c.s.mu.Lock()
	c.sb.env[p.Key] = p.Value
	c.s.mu.Unlock()
	return nil, nil, nil
}

func (c *conn) envDelete(_ context.Context, params json.RawMessage) (any, *serializedError, *rpcError) {
	var p struct{ Key string }
	if e := decode(params, &p); e != nil {
		return nil, nil, e
	}
	c.s.mu.Lock()
	delete(c.sb.env, p.Key)
	c.s.mu.Unlock()
	return nil, nil, nil
}

func (c *conn) envToObject(context.Context, json.RawMessage) (any, *serializedError, *rpcError) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	out := map[string]string{}
	for k, v := range c.sb.env {
		out[k] = v
	}
	for k, sec := range c.sb.secrets {
		out[k] = sec.placeholder
	}
	return out, nil, nil
}

func (c *conn) exposeHTTP(_ context.Context, params json.RawMessage) (any, *serializedError, *rpcError) {
	var p struct {
		Domain string `json:"domain"`
		Port   *int   `json:"port"`
		Pid    *int   `json:"pid"`
	}
	if e := decode(params, &p); e != nil {
		return nil, nil, e
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if _, ok := c.sb.exposed[p.Domain]; !ok {
		return nil, appError("NotFound", "ENOENT", "the domain was not issued for this sandbox: call POST /expose/http first"), nil
	}
	switch {
	case p.Port != nil && *p.Port >= 1 && *p.Port <= 65535:
		c.sb.exposed[p.Domain] = "port:" + itoa(*p.Port)
	case p.Pid != nil:
		c.sb.exposed[p.Domain] = "pid:" + itoa(*p.Pid)
	default:
		return nil, nil, invalidParams(errors.New("exposeHttp needs a port from 1 to 65535 or a pid"))
	}
	return nil, nil, nil
}
