package api

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/sandstep/sandstep/internal/service/direct"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/providers"
)

// Direct sandboxes (package direct):
//
//	POST   /v1/sandboxes                              create (201; 200 when a name found it)
//	GET    /v1/sandboxes                              the caller's sandboxes, paged
//	GET    /v1/sandboxes/{id}                         status, ttl_remaining, children, public_urls
//	DELETE /v1/sandboxes/{id}                         terminate, with its children (idempotent)
//	POST   /v1/sandboxes/{id}/terminate               the same
//	GET    /v1/sandboxes/{id}/events                  created, expiring, expired, terminated
//	POST   /v1/sandboxes/{id}/exec                    run; output inline, or read by offset
//	GET    /v1/sandboxes/{id}/execs/{eid}             an exec's state
//	GET    /v1/sandboxes/{id}/execs/{eid}/output      its output from ?offset=N (raw, or SSE)
//	PUT    /v1/sandboxes/{id}/files?path=             write a file (the body, streamed)
//	GET    /v1/sandboxes/{id}/files?path=[&list=1]    read a file (streamed), or list a folder
//	GET    /v1/sandboxes/{id}/artifacts               the artifacts folder's files (JSON, or a page)
//	GET    /v1/sandboxes/{id}/artifacts/{path...}     a file of the artifacts folder, typed (artifacts.go)
//	*      /v1/sandboxes/{id}/ports/{port}/{path...}  an exposed port, proxied (ports.go)
//
// A tenant's token manages the tenant's sandboxes; a sandbox's token
// (SANDSTEP_TOKEN, inside it) manages only that sandbox's children. The
// artifacts and ports routes also take the sandbox's URL token (?token=, or
// the cookie a first visit with it sets), so their links work in a browser.

// MaxFileBytes bounds one uploaded file; it streams through, so memory is
// not the limit, the sandbox's disk is.
const MaxFileBytes = 4 << 30

func (s *server) sandboxRoutes(mux *http.ServeMux) {
	s.handle(mux, "POST /v1/sandboxes", s.createSandbox, sandboxScope)
	s.handle(mux, "GET /v1/sandboxes", s.listSandboxes, sandboxScope)
	s.handle(mux, "GET /v1/sandboxes/{id}", s.getSandbox, sandboxScope)
	s.handle(mux, "DELETE /v1/sandboxes/{id}", s.terminateSandbox, sandboxScope)
	s.handle(mux, "POST /v1/sandboxes/{id}/terminate", s.terminateSandbox, sandboxScope)
	s.handle(mux, "GET /v1/sandboxes/{id}/events", s.sandboxEvents, sandboxScope)
	s.handle(mux, "POST /v1/sandboxes/{id}/exec", s.execSandbox, sandboxScope, s.runBodyLimit("command"))
	s.handle(mux, "GET /v1/sandboxes/{id}/execs/{eid}", s.execStatus, sandboxScope)
	s.handle(mux, "GET /v1/sandboxes/{id}/execs/{eid}/output", s.execOutput, sandboxScope)
	s.handle(mux, "PUT /v1/sandboxes/{id}/files", s.putFile, sandboxScope, fileBody)
	s.handle(mux, "GET /v1/sandboxes/{id}/files", s.getFile, sandboxScope)
	s.handle(mux, "GET /v1/sandboxes/{id}/artifacts", s.sandboxArtifacts, public)
	s.handle(mux, "GET /v1/sandboxes/{id}/artifacts/{path...}", s.getArtifact, public)
	s.portRoutes(mux)
	s.sandyRoutes(mux)
}

// sandboxScope lets a sandbox's own token in (see authenticate).
func sandboxScope(rt *route) { rt.sandboxScope = true }

// fileBody bounds a file upload by MaxFileBytes rather than the JSON
// bodies' limit.
func fileBody(rt *route) { rt.maxBody, rt.bodyKey = MaxFileBytes, "" }

func (s *server) sandboxesOn() error {
	if s.opts.Sandboxes == nil {
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "direct sandboxes are not enabled on this server (no sandbox provider)"}
	}
	return nil
}

func (c *call) caller() direct.Caller { return direct.Caller{Tenant: c.tenant, Parent: c.parent} }

// directError turns the service's errors into answers.
func directError(c *call, err error) error {
	var e *direct.Error
	if !errors.As(err, &e) {
		return err
	}
	switch e.Kind {
	case direct.KindInvalid:
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalidArgument, Field: e.Field, Message: e.Message}
	case direct.KindNotFound:
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: e.Message}
	case direct.KindForbidden:
		return &Error{Status: http.StatusForbidden, Code: CodeForbidden, Field: e.Field, Message: e.Message}
	case direct.KindConflict:
		return &Error{Status: http.StatusConflict, Code: CodeConflict, Field: e.Field, Message: e.Message}
	}
	c.cause = err
	return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: e.Message, RetryAfter: 5}
}

type createSandboxBody struct {
	TTLSeconds  *float64          `json:"ttl_seconds"`
	ExposePorts []int             `json:"expose_ports"`
	Network     string            `json:"network"`
	AllowHosts  []string          `json:"allow_hosts"`
	MemoryMB    int               `json:"memory_mb"`
	Labels      map[string]string `json:"labels"`
	Name        string            `json:"name"`
}

func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body) // bounded by the route's guard
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) && typ.Field != "" {
			// Name the type the field wants, from the Go type it decodes
			// into (decodeError knows the jobs' fields only).
			field, _, _ := strings.Cut(typ.Field, ".")
			return invalid(field, "%s must be %s, not %s", typ.Field, jsonKind(typ.Type), jsonValue(typ.Value))
		}
		return decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			return invalid("", "the request body holds more than one JSON value")
		}
		return decodeError(err)
	}
	return nil
}

// jsonKind names the JSON value a Go type decodes from.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return jsonKind(t.Elem())
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another type"
}

func wholeSeconds(field string, v *float64) (time.Duration, error) {
	if v == nil {
		return 0, nil
	}
	if *v != math.Trunc(*v) || *v < 1 || *v > float64(math.MaxInt32) {
		return 0, invalid(field, "%s must be a whole number of seconds from 1", field)
	}
	return time.Duration(*v) * time.Second, nil
}

// apiURL is sandstep's URL as a sandbox reaches it.
func (s *server) apiURL(r *http.Request) string {
	if s.opts.Sandboxes != nil {
		if u := s.opts.Sandboxes.Config().APIURL; u != "" {
			return strings.TrimRight(u, "/")
		}
	}
	return requestBase(r)
}

// requestBase is the scheme and host the request came to.
func requestBase(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

func (s *server) createSandbox(w http.ResponseWriter, r *http.Request, c *call) error {
	if err := s.sandboxesOn(); err != nil {
		return err
	}
	var body createSandboxBody
	if r.ContentLength != 0 {
		if err := decodeBody(r, &body); err != nil {
			return err
		}
	}
	ttl, err := wholeSeconds("ttl_seconds", body.TTLSeconds)
	if err != nil {
		return err
	}
	sb, err := s.opts.Sandboxes.CreateSandbox(r.Context(), c.caller(), direct.CreateRequest{
		TTL: ttl, ExposePorts: body.ExposePorts, Network: providers.NetworkMode(body.Network), AllowHosts: body.AllowHosts,
		MemoryMB: body.MemoryMB, Labels: body.Labels, Name: body.Name, APIURL: s.apiURL(r),
	})
	if err != nil {
		return directError(c, err)
	}
	status := http.StatusOK
	if sb.Created {
		status = http.StatusCreated
	}
	v := s.viewSandbox(r, sb.DirectSandbox, nil)
	return writeJSON(w, status, v)
}

type directView struct {
	ID           string            `json:"id"`
	Name         string            `json:"name,omitempty"`
	Status       string            `json:"status"`
	ParentID     *string           `json:"parent_id"`
	PublicURLs   map[string]string `json:"public_urls"`
	Network      string            `json:"network,omitempty"`
	Labels       map[string]string `json:"labels"`
	CreatedAt    time.Time         `json:"created_at"`
	ExpiresAt    time.Time         `json:"expires_at"`
	TTLRemaining int64             `json:"ttl_remaining"`
	LastActiveAt time.Time         `json:"last_active_at"`
	Reason       string            `json:"reason,omitempty"`
	Children     []string          `json:"children,omitempty"`
	Links        map[string]string `json:"links"`
}

// publicURLs are the URLs of the exposed ports: the provider's own where it
// serves one publicly, else sandstep's proxy with the URL token.
func (s *server) publicURLs(r *http.Request, d store.DirectSandbox) map[string]string {
	out := map[string]string{}
	for _, p := range d.Ports {
		port := strconv.Itoa(p)
		if u := d.PortURLs[port]; strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://") {
			out[port] = u
			continue
		}
		out[port] = requestBase(r) + "/v1/sandboxes/" + d.ID + "/ports/" + port + "/?token=" + d.URLToken
	}
	return out
}

func (s *server) viewSandbox(r *http.Request, d store.DirectSandbox, children []string) directView {
	v := directView{
		ID: d.ID, Name: d.Name, Status: d.State, Network: d.Network, Labels: d.Labels,
		CreatedAt: d.CreatedAt, ExpiresAt: d.EndsAt, LastActiveAt: d.LastActive, Reason: d.Reason,
		PublicURLs: map[string]string{}, Children: children,
	}
	if v.Labels == nil {
		v.Labels = map[string]string{}
	}
	if d.ParentID != "" {
		v.ParentID = &d.ParentID
	}
	if d.State != store.DirectTerminated {
		v.PublicURLs = s.publicURLs(r, d)
		v.TTLRemaining = max(0, int64(d.EndsAt.Sub(s.opts.Now())/time.Second))
	}
	self := "/v1/sandboxes/" + d.ID
	v.Links = map[string]string{"self": self, "exec": self + "/exec", "files": self + "/files", "events": self + "/events",
		"artifacts": self + "/artifacts?token=" + d.URLToken}
	return v
}

type sandboxList struct {
	Sandboxes  []directView `json:"sandboxes"`
	NextCursor *string      `json:"next_cursor"`
}

func (s *server) listSandboxes(w http.ResponseWriter, r *http.Request, c *call) error {
	if err := s.sandboxesOn(); err != nil {
		return err
	}
	lq, err := listParams(r, cursorSandboxes, c.tenant)
	if err != nil {
		return err
	}
	page, err := s.opts.Sandboxes.List(r.Context(), c.caller(), lq)
	if err != nil {
		return directError(c, err)
	}
	v := sandboxList{Sandboxes: make([]directView, len(page.Sandboxes)), NextCursor: nextCursor(page.Next, cursorSandboxes, c.tenant)}
	for i, d := range page.Sandboxes {
		v.Sandboxes[i] = s.viewSandbox(r, d, nil)
	}
	return writeJSON(w, http.StatusOK, v)
}

func (s *server) getSandbox(w http.ResponseWriter, r *http.Request, c *call) error {
	if err := s.sandboxesOn(); err != nil {
		return err
	}
	d, children, err := s.opts.Sandboxes.Get(r.Context(), c.caller(), r.PathValue("id"))
	if err != nil {
		return directError(c, err)
	}
	v := s.viewSandbox(r, d, children)
	if v.Children == nil {
		v.Children = []string{}
	}
	return writeJSON(w, http.StatusOK, v)
}

func (s *server) terminateSandbox(w http.ResponseWriter, r *http.Request, c *call) error {
	if err := s.sandboxesOn(); err != nil {
		return err
	}
	d, err := s.opts.Sandboxes.TerminateSandbox(r.Context(), c.caller(), r.PathValue("id"))
	if err != nil {
		return directError(c, err)
	}
	return writeJSON(w, http.StatusOK, s.viewSandbox(r, d, nil))
}

func (s *server) sandboxEvents(w http.ResponseWriter, r *http.Request, c *call) error {
	if err := s.sandboxesOn(); err != nil {
		return err
	}
	d, _, err := s.opts.Sandboxes.Get(r.Context(), c.caller(), r.PathValue("id"))
	if err != nil {
		return directError(c, err)
	}
	evs := d.Events
	if evs == nil {
		evs = []store.DirectEvent{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"events": evs})
}

type execBody struct {
	Command        *string           `json:"command"`
	Argv           []string          `json:"argv"`
	Cwd            string            `json:"cwd"`
	Env            map[string]string `json:"env"`
	Stdin          *string           `json:"stdin"`
	StdinBase64    *string           `json:"stdin_base64"`
	TimeoutSeconds *float64          `json:"timeout_seconds"`
	Background     bool              `json:"background"`
	KeepAlive      bool              `json:"keep_alive"`
}

type execView struct {
	ExecID     string            `json:"exec_id"`
	Status     string            `json:"status"`
	ExitCode   *int              `json:"exit_code"`
	TimedOut   bool              `json:"timed_out"`
	Stdout     *string           `json:"stdout"`
	Stderr     *string           `json:"stderr"`
	StdoutSize int64             `json:"stdout_bytes"`
	StderrSize int64             `json:"stderr_bytes"`
	Truncated  bool              `json:"truncated"`
	StartedAt  time.Time         `json:"started_at"`
	Links      map[string]string `json:"links"`
}

func viewExec(id string, res direct.ExecResult) execView {
	v := execView{ExecID: res.ID, Status: "running", TimedOut: res.TimedOut, StdoutSize: res.StdoutLen, StderrSize: res.StderrLen,
		Truncated: res.Truncated, StartedAt: res.StartedAt}
	if res.Done {
		v.Status = "exited"
		code := res.ExitCode
		v.ExitCode = &code
	}
	if res.Inline {
		so, se := string(res.Stdout), string(res.Stderr)
		v.Stdout, v.Stderr = &so, &se
	}
	self := "/v1/sandboxes/" + id + "/execs/" + res.ID
	v.Links = map[string]string{"self": self, "stdout": self + "/output?stream=stdout&offset=0", "stderr": self + "/output?stream=stderr&offset=0"}
	return v
}

func (s *server) execSandbox(w http.ResponseWriter, r *http.Request, c *call) error {
	if err := s.sandboxesOn(); err != nil {
		return err
	}
	var body execBody
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	timeout, err := wholeSeconds("timeout_seconds", body.TimeoutSeconds)
	if err != nil {
		return err
	}
	req := direct.ExecRequest{Argv: body.Argv, Cwd: body.Cwd, Env: body.Env, Timeout: timeout, Background: body.Background, KeepAlive: body.KeepAlive}
	if body.Command != nil {
		req.Command = *body.Command
	}
	switch {
	case body.Stdin != nil && body.StdinBase64 != nil:
		return invalid("stdin_base64", "give stdin or stdin_base64, not both")
	case body.Stdin != nil:
		req.Stdin = []byte(*body.Stdin)
	case body.StdinBase64 != nil:
		if req.Stdin, err = base64.StdEncoding.DecodeString(*body.StdinBase64); err != nil {
			return invalid("stdin_base64", "stdin_base64 is not base64: %v", err)
		}
	}
	id := r.PathValue("id")
	res, err := s.opts.Sandboxes.Exec(r.Context(), c.caller(), id, req)
	if err != nil {
		return directError(c, err)
	}
	status := http.StatusOK
	if !res.Done {
		status = http.StatusAccepted
	}
	return writeJSON(w, status, viewExec(id, res))
}

func (s *server) execStatus(w http.ResponseWriter, r *http.Request, c *call) error {
	if err := s.sandboxesOn(); err != nil {
		return err
	}
	id := r.PathValue("id")
	res, err := s.opts.Sandboxes.Status(r.Context(), c.caller(), id, r.PathValue("eid"))
	if err != nil {
		return directError(c, err)
	}
	return writeJSON(w, http.StatusOK, viewExec(id, res))
}

// Bounds of one output read.
const (
	defaultOutputChunk = 1 << 20
	maxOutputChunk     = 4 << 20
	maxOutputWait      = 25 * time.Second
)

// execOutput answers ?offset=N[&stream=stdout|stderr][&limit=][&wait_ms=]
// with the raw bytes from the offset (application/octet-stream) and where
// to go on: X-Sandstep-Next-Offset, X-Sandstep-Exec-Done and, at the end,
// X-Sandstep-Exit-Code. With Accept: text/event-stream it streams "output"
// events ({"stream","offset","data_base64"}, id = the next offset, so
// Last-Event-ID resumes) and one "exit" event at the end.
func (s *server) execOutput(w http.ResponseWriter, r *http.Request, c *call) error {
	if err := s.sandboxesOn(); err != nil {
		return err
	}
	q := r.URL.Query()
	stream := q.Get("stream")
	if stream == "" {
		stream = direct.StreamStdout
	}
	offset, err := intParam(q.Get("offset"), "offset", 0, math.MaxInt64, 0)
	if err != nil {
		return err
	}
	if lei := r.Header.Get("Last-Event-ID"); lei != "" {
		if offset, err = intParam(lei, "Last-Event-ID", 0, math.MaxInt64, 0); err != nil {
			return err
		}
	}
	limit, err := intParam(q.Get("limit"), "limit", 1, maxOutputChunk, defaultOutputChunk)
	if err != nil {
		return err
	}
	waitMS, err := intParam(q.Get("wait_ms"), "wait_ms", 0, int64(maxOutputWait/time.Millisecond), 0)
	if err != nil {
		return err
	}
	id, eid := r.PathValue("id"), r.PathValue("eid")
	if acceptQ(r.Header.Get("Accept"), "text/event-stream") > 0 {
		return s.streamOutput(w, r, c, id, eid, stream, offset)
	}
	ch, err := s.opts.Sandboxes.Output(r.Context(), c.caller(), id, eid, stream, offset, limit, time.Duration(waitMS)*time.Millisecond)
	if err != nil {
		return directError(c, err)
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.Itoa(len(ch.Data)))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Sandstep-Offset", strconv.FormatInt(ch.Offset, 10))
	h.Set("X-Sandstep-Next-Offset", strconv.FormatInt(ch.Next, 10))
	h.Set("X-Sandstep-Exec-Done", strconv.FormatBool(ch.Done))
	if ch.Done {
		h.Set("X-Sandstep-Exit-Code", strconv.Itoa(ch.ExitCode))
	}
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(ch.Data)
	return err
}

func intParam(v, field string, lo, hi, def int64) (int64, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, invalid(field, "%s must be a whole number from %d to %d, not %q", field, lo, hi, v)
	}
	return n, nil
}

func (s *server) streamOutput(w http.ResponseWriter, r *http.Request, c *call, id, eid, stream string, offset int64) error {
	rc := http.NewResponseController(w)
	started := false
	deadline := time.Now().Add(s.opts.Server.StreamMaxDuration.D())
	for {
		wait := min(s.opts.Server.StreamHeartbeat.D(), maxOutputWait)
		if !s.opts.Streaming {
			wait = 0
		}
		ch, err := s.opts.Sandboxes.Output(r.Context(), c.caller(), id, eid, stream, offset, defaultOutputChunk, wait)
		if err != nil {
			if !started {
				return directError(c, err)
			}
			c.cause = err
			return nil
		}
		if !started {
			h := w.Header()
			h.Set("Content-Type", "text/event-stream")
			h.Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		if len(ch.Data) > 0 {
			b, _ := json.Marshal(map[string]any{"stream": stream, "offset": ch.Offset, "data_base64": ch.Data})
			fmt.Fprintf(w, "id: %d\nevent: output\ndata: %s\n\n", ch.Next, b)
		} else {
			fmt.Fprint(w, ": keep-alive\n\n")
		}
		offset = ch.Next
		if ch.Done {
			b, _ := json.Marshal(map[string]any{"exit_code": ch.ExitCode, "timed_out": ch.TimedOut, "offset": ch.Next})
			fmt.Fprintf(w, "id: %d\nevent: exit\ndata: %s\n\n", ch.Next, b)
			_ = rc.Flush()
			return nil
		}
		if err := rc.Flush(); err != nil || r.Context().Err() != nil {
			return nil
		}
		if !s.opts.Streaming && len(ch.Data) == 0 || time.Now().After(deadline) {
			// The client reconnects with Last-Event-ID.
			return nil
		}
	}
}

func (s *server) putFile(w http.ResponseWriter, r *http.Request, c *call) error {
	if err := s.sandboxesOn(); err != nil {
		return err
	}
	p := r.URL.Query().Get("path")
	var mode uint32
	if m := r.URL.Query().Get("mode"); m != "" {
		n, err := strconv.ParseUint(m, 8, 32)
		if err != nil || n > 0o7777 {
			return invalid("mode", "mode must be octal permission bits such as 644, not %q", m)
		}
		mode = uint32(n)
	}
	if err := s.opts.Sandboxes.WriteFile(r.Context(), c.caller(), r.PathValue("id"), p, mode, r.Body); err != nil {
		var be *bodyError
		if errors.As(err, &be) {
			return be.answer
		}
		return directError(c, err)
	}
	return writeJSON(w, http.StatusOK, map[string]any{"path": p, "written": true})
}

type fileView struct {
	Name    string    `json:"name"`
	Path    string    `json:"path"`
	Size    int64     `json:"size"`
	Mode    string    `json:"mode"`
	IsDir   bool      `json:"is_dir"`
	ModTime time.Time `json:"mod_time"`
}

func (s *server) getFile(w http.ResponseWriter, r *http.Request, c *call) error {
	if err := s.sandboxesOn(); err != nil {
		return err
	}
	q := r.URL.Query()
	p, id := q.Get("path"), r.PathValue("id")
	list := false
	switch q.Get("list") {
	case "1", "true":
		list = true
	case "", "0", "false":
	default:
		return invalid("list", "list must be 1 (list the folder) or 0, not %q", q.Get("list"))
	}
	if list {
		list, err := s.opts.Sandboxes.ListFiles(r.Context(), c.caller(), id, p)
		if err != nil {
			return directError(c, err)
		}
		out := make([]fileView, len(list))
		for i, f := range list {
			out[i] = fileView{Name: f.Name, Path: f.Path, Size: f.Size, Mode: fmt.Sprintf("%o", f.Mode), IsDir: f.IsDir, ModTime: f.ModTime}
		}
		return writeJSON(w, http.StatusOK, map[string]any{"path": p, "files": out})
	}
	lw := &lazyWriter{w: w, start: func(h http.Header) {
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Cache-Control", "no-store")
	}}
	if _, err := s.opts.Sandboxes.ReadFile(r.Context(), c.caller(), id, p, lw); err != nil {
		if lw.started {
			c.cause = err
			return nil
		}
		return directError(c, err)
	}
	lw.begin()
	return nil
}

// lazyWriter sends the headers with the first byte, so that an error found
// before it is still an error answer.
type lazyWriter struct {
	w       http.ResponseWriter
	start   func(http.Header)
	started bool
}

func (l *lazyWriter) begin() {
	if !l.started {
		l.started = true
		l.start(l.w.Header())
		l.w.WriteHeader(http.StatusOK)
	}
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	l.begin()
	return l.w.Write(p)
}

// urlTokenCookie names the cookie that carries a sandbox's URL token after
// a first visit with ?token=.
func urlTokenCookie(id string) string { return "sandstep_" + id }

// publicAccess lets a request on a sandbox's public route in: with the
// sandbox's URL token (query or cookie), or a bearer token that may use
// the sandbox. It returns the sandbox, whose tenant the call is then
// accounted to, and whether the token came in the query (to be turned
// into a cookie).
func (s *server) publicAccess(r *http.Request, c *call, id string) (store.DirectSandbox, bool, error) {
	d, fromQuery, err := s.sandboxByURL(r, c, id)
	if err == nil {
		c.tenant = d.Tenant
	}
	return d, fromQuery, err
}

func (s *server) sandboxByURL(r *http.Request, c *call, id string) (store.DirectSandbox, bool, error) {
	if err := s.sandboxesOn(); err != nil {
		return store.DirectSandbox{}, false, err
	}
	if tok := r.URL.Query().Get("token"); tok != "" {
		if d, ok := s.opts.Sandboxes.URLTokenValid(r.Context(), id, tok); ok {
			return d, true, nil
		}
	}
	if ck, err := r.Cookie(urlTokenCookie(id)); err == nil {
		if d, ok := s.opts.Sandboxes.URLTokenValid(r.Context(), id, ck.Value); ok {
			return d, false, nil
		}
	}
	if h := r.Header.Get("Authorization"); h != "" {
		if tok, ok := bearerToken(h); ok {
			if caller, ok := s.tokenCaller(r, tok); ok {
				c.tenant, c.parent = caller.Tenant, caller.Parent
				d, _, err := s.opts.Sandboxes.Get(r.Context(), caller, id)
				if err != nil {
					return d, false, directError(c, err)
				}
				return d, false, nil
			}
		}
	}
	return store.DirectSandbox{}, false, &Error{Status: http.StatusNotFound, Code: CodeNotFound,
		Message: fmt.Sprintf("sandbox %q not found, or the link's token is not (or no longer) valid", id)}
}

// cursorSandboxes is the cursor kind of the sandboxes' listing.
const cursorSandboxes = 'b'
