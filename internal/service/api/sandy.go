package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandstep/sandstep/internal/service/direct"
	"github.com/sandstep/sandstep/internal/service/store"
)

// The Sandy-compatible facade: Sandy's routes and field shapes
// (../shared/contracts/sandy-api.md) over the same direct sandboxes, so an
// agent written for Sandy points SANDY_BASE_URL at sandstep and gains its
// limits, cascade and cleanup unchanged:
//
//	POST /api/sandboxes                       200 {sandboxId, url, createdAt, timeoutAt, status} (and id, sandbox_id, public_url)
//	GET  /api/sandboxes/{id}                  200 the same, ttl_remaining; 404 {"detail"} once gone
//	POST /api/sandboxes/{id}/exec             {command, cwd, env, timeoutMs | timeout} -> {stdout, stderr, exitCode, exit_code}, when it ended
//	POST /api/sandboxes/{id}/files/write      {path, content[, encoding: "base64"]} -> {success}
//	GET  /api/sandboxes/{id}/files/read?path= {content} (UTF-8), or {content, encoding: "base64"}; at most 32 MiB
//	GET  /api/sandboxes/{id}/files/list?path= {files: [paths relative to path, recursive]}
//	POST /api/sandboxes/{id}/terminate        {status: "terminated"}; 404 when already gone
//
// Errors are FastAPI's {"detail": ...}; a limit is 429 with Retry-After.
// Unknown request fields are ignored, as Sandy ignores them. Relative paths
// are under /workspace.

func (s *server) sandyRoutes(mux *http.ServeMux) {
	s.handle(mux, "POST /api/sandboxes", s.sandy(s.sandyCreate), sandboxScope)
	s.handle(mux, "GET /api/sandboxes/{id}", s.sandy(s.sandyStatus), sandboxScope)
	s.handle(mux, "POST /api/sandboxes/{id}/exec", s.sandy(s.sandyExec), sandboxScope, s.runBodyLimit("command"))
	s.handle(mux, "POST /api/sandboxes/{id}/files/write", s.sandy(s.sandyWrite), sandboxScope, sandyFileBody)
	s.handle(mux, "GET /api/sandboxes/{id}/files/read", s.sandy(s.sandyRead), sandboxScope)
	s.handle(mux, "GET /api/sandboxes/{id}/files/list", s.sandy(s.sandyList), sandboxScope)
	s.handle(mux, "POST /api/sandboxes/{id}/terminate", s.sandy(s.sandyTerminate), sandboxScope)
}

// Bounds of the facade's file routes, whose contents travel inside JSON and
// are held in memory whole: a larger file goes through the streamed
// /v1/sandboxes/{id}/files route.
const (
	maxSandyFileBody = 10 << 20 // API Gateway's own limit of a request
	maxSandyRead     = 32 << 20
	// maxSandyDirs bounds the folders one files/list walks.
	maxSandyDirs = 2000
)

func sandyFileBody(rt *route) { rt.maxBody, rt.bodyKey, rt.bodyField = maxSandyFileBody, "", "content" }

// sandy answers a route's error in Sandy's shape.
func (s *server) sandy(h handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, c *call) error {
		err := s.sandboxesOn()
		if err == nil {
			err = h(w, r, c)
		}
		if err == nil {
			return nil
		}
		e := answerOf(c, directError(c, err))
		if e.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
		}
		return writeJSON(w, e.Status, map[string]string{"detail": e.Message})
	}
}

// sandyGone is Sandy's answer for a sandbox that does not run.
func sandyGone() *Error {
	return &Error{Status: http.StatusNotFound, Message: "Sandbox not found"}
}

// sandyInfo is Sandy's answer about a sandbox, with the snake_case names
// that clients written from Sandy's docs rather than its live answers read
// (seed 004's SandyClient reads id or sandbox_id, and public_url): extra
// fields, which Sandy's own clients ignore.
type sandyInfo struct {
	SandboxID    string    `json:"sandboxId"`
	URL          string    `json:"url"`
	Status       string    `json:"status"`
	CreatedAt    time.Time `json:"createdAt"`
	TimeoutAt    time.Time `json:"timeoutAt"`
	TTLRemaining int64     `json:"ttl_remaining"`
	ID           string    `json:"id"`
	SnakeID      string    `json:"sandbox_id"`
	PublicURL    string    `json:"public_url"`
}

func (s *server) sandyView(r *http.Request, d store.DirectSandbox) sandyInfo {
	v := s.viewSandbox(r, d, nil)
	url := ""
	for _, p := range d.Ports {
		url = v.PublicURLs[strconv.Itoa(p)]
		break
	}
	return sandyInfo{SandboxID: d.ID, URL: url, Status: d.State, CreatedAt: d.CreatedAt, TimeoutAt: d.EndsAt, TTLRemaining: v.TTLRemaining,
		ID: d.ID, SnakeID: d.ID, PublicURL: url}
}

var sandyPriorities = map[string]bool{"CRITICAL": true, "HIGH": true, "NORMAL": true, "LOW": true}

func (s *server) sandyCreate(w http.ResponseWriter, r *http.Request, c *call) error {
	var body struct {
		Priority    json.RawMessage `json:"priority"`
		TTLSeconds  *float64        `json:"ttl_seconds"`
		ExposePorts []int           `json:"expose_ports"`
	}
	if r.ContentLength != 0 {
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil && !errors.Is(err, io.EOF) {
			return &Error{Status: http.StatusUnprocessableEntity, Message: "the body is not a JSON object: " + err.Error()}
		}
	}
	if len(body.Priority) > 0 && string(body.Priority) != "null" {
		// Sandy takes an int (0 critical ... 3 low) and answers 422 to
		// anything else; the names that clients written from Sandy's docs
		// send (seed 004's "NORMAL") are taken too. Either way sandstep
		// has no priorities: it is checked, not used.
		var p int
		var name string
		if json.Unmarshal(body.Priority, &p) != nil && (json.Unmarshal(body.Priority, &name) != nil || !sandyPriorities[strings.ToUpper(name)]) {
			return &Error{Status: http.StatusUnprocessableEntity, Message: "priority: Input should be a valid integer (or CRITICAL, HIGH, NORMAL, LOW)"}
		}
	}
	var ttl time.Duration
	if body.TTLSeconds != nil {
		ttl = time.Duration(*body.TTLSeconds * float64(time.Second)).Round(time.Second)
	}
	sb, err := s.opts.Sandboxes.CreateSandbox(r.Context(), c.caller(), direct.CreateRequest{TTL: ttl, ExposePorts: body.ExposePorts, APIURL: s.apiURL(r)})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, s.sandyView(r, sb.DirectSandbox))
}

// sandyLive reads a running sandbox, or answers Sandy's 404.
func (s *server) sandyLive(r *http.Request, c *call) (store.DirectSandbox, error) {
	d, _, err := s.opts.Sandboxes.Get(r.Context(), c.caller(), r.PathValue("id"))
	var de *direct.Error
	if errors.As(err, &de) && de.Kind == direct.KindNotFound || err == nil && d.State != store.DirectRunning {
		return d, sandyGone()
	}
	return d, err
}

func (s *server) sandyStatus(w http.ResponseWriter, r *http.Request, c *call) error {
	d, err := s.sandyLive(r, c)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, s.sandyView(r, d))
}

// sandyErr turns the service's answer about a sandbox that ended meanwhile
// into Sandy's 404.
func sandyErr(err error) error {
	var de *direct.Error
	if errors.As(err, &de) && de.Kind == direct.KindConflict {
		return sandyGone()
	}
	return err
}

func sandyPath(p string) string {
	if p != "" && !strings.HasPrefix(p, "/") {
		return path.Join("/workspace", p)
	}
	return p
}

func (s *server) sandyExec(w http.ResponseWriter, r *http.Request, c *call) error {
	var body struct {
		Command   string            `json:"command"`
		Cwd       string            `json:"cwd"`
		Env       map[string]string `json:"env"`
		TimeoutMs *float64          `json:"timeoutMs"`
		// Timeout in seconds is what clients written from Sandy's docs
		// send (Sandy itself ignores it); timeoutMs wins.
		Timeout *float64 `json:"timeout"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		return &Error{Status: http.StatusUnprocessableEntity, Message: "the body is not a JSON object: " + err.Error()}
	}
	if _, err := s.sandyLive(r, c); err != nil {
		return err
	}
	timeout := direct.DefaultExecTimeout
	switch {
	case body.TimeoutMs != nil && *body.TimeoutMs > 0:
		timeout = max(time.Second, time.Duration(*body.TimeoutMs*float64(time.Millisecond)).Round(time.Second))
	case body.Timeout != nil && *body.Timeout > 0:
		timeout = max(time.Second, time.Duration(*body.Timeout*float64(time.Second)).Round(time.Second))
	}
	req := direct.ExecRequest{Command: body.Command, Cwd: sandyPath(body.Cwd), Env: body.Env, Timeout: min(timeout, direct.MaxExecTimeout)}
	res, err := s.opts.Sandboxes.RunToEnd(r.Context(), c.caller(), r.PathValue("id"), req)
	if err != nil {
		return sandyErr(err)
	}
	stderr := string(res.Stderr)
	if res.TimedOut {
		stderr += "Command timed out\n"
	}
	// exit_code beside Sandy's exitCode, for the clients that read it.
	return writeJSON(w, http.StatusOK, map[string]any{"stdout": string(res.Stdout), "stderr": stderr, "exitCode": res.ExitCode, "exit_code": res.ExitCode})
}

func (s *server) sandyWrite(w http.ResponseWriter, r *http.Request, c *call) error {
	var body struct {
		Path     string `json:"path"`
		Content  string `json:"content"`
		Encoding string `json:"encoding"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		return &Error{Status: http.StatusUnprocessableEntity, Message: "the body is not a JSON object: " + err.Error()}
	}
	data := []byte(body.Content)
	if strings.EqualFold(body.Encoding, "base64") {
		var err error
		if data, err = base64.StdEncoding.DecodeString(body.Content); err != nil {
			return &Error{Status: http.StatusUnprocessableEntity, Message: "content: not base64"}
		}
	}
	if _, err := s.sandyLive(r, c); err != nil {
		return err
	}
	if err := s.opts.Sandboxes.WriteFile(r.Context(), c.caller(), r.PathValue("id"), sandyPath(body.Path), 0, bytes.NewReader(data)); err != nil {
		return sandyErr(err)
	}
	return writeJSON(w, http.StatusOK, map[string]bool{"success": true})
}

func (s *server) sandyRead(w http.ResponseWriter, r *http.Request, c *call) error {
	if _, err := s.sandyLive(r, c); err != nil {
		return err
	}
	var b bytes.Buffer
	p := sandyPath(r.URL.Query().Get("path"))
	if _, err := s.opts.Sandboxes.ReadFile(r.Context(), c.caller(), r.PathValue("id"), p, &capped{w: &b, left: maxSandyRead}); err != nil {
		if errors.Is(err, errTooLarge) {
			return &Error{Status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("%s is larger than %d bytes: read it with GET /v1/sandboxes/%s/files?path=", p, maxSandyRead, r.PathValue("id"))}
		}
		return sandyErr(err)
	}
	if utf8.Valid(b.Bytes()) {
		return writeJSON(w, http.StatusOK, map[string]string{"content": b.String()})
	}
	return writeJSON(w, http.StatusOK, map[string]string{"content": base64.StdEncoding.EncodeToString(b.Bytes()), "encoding": "base64"})
}

var errTooLarge = errors.New("the file is too large for this route")

// capped writes at most left bytes to w, then fails with errTooLarge.
type capped struct {
	w    io.Writer
	left int64
}

func (c *capped) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		return 0, errTooLarge
	}
	c.left -= int64(len(p))
	return c.w.Write(p)
}

// maxSandyList bounds a files/list answer.
const maxSandyList = 10000

func (s *server) sandyList(w http.ResponseWriter, r *http.Request, c *call) error {
	if _, err := s.sandyLive(r, c); err != nil {
		return err
	}
	root := sandyPath(r.URL.Query().Get("path"))
	if root == "" {
		root = "/workspace"
	}
	files := []string{}
	dirs := 0
	var walk func(dir, rel string) error
	walk = func(dir, rel string) error {
		if dirs++; dirs > maxSandyDirs {
			return nil
		}
		list, err := s.opts.Sandboxes.ListFiles(r.Context(), c.caller(), r.PathValue("id"), dir)
		if err != nil {
			return err
		}
		for _, f := range list {
			if len(files) >= maxSandyList {
				return nil
			}
			name := path.Join(rel, f.Name)
			if f.IsDir {
				if err := walk(path.Join(dir, f.Name), name); err != nil {
					return err
				}
				continue
			}
			files = append(files, name)
		}
		return nil
	}
	if err := walk(root, ""); err != nil {
		return sandyErr(err)
	}
	return writeJSON(w, http.StatusOK, map[string][]string{"files": files})
}

func (s *server) sandyTerminate(w http.ResponseWriter, r *http.Request, c *call) error {
	if _, err := s.sandyLive(r, c); err != nil {
		return err
	}
	if _, err := s.opts.Sandboxes.TerminateSandbox(r.Context(), c.caller(), r.PathValue("id")); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]string{"status": "terminated"})
}
