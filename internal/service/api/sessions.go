package api

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"time"

	"github.com/sandstep/sandstep/internal/service/ids"
	"github.com/sandstep/sandstep/internal/service/sessions"
	"github.com/sandstep/sandstep/internal/service/store"
)

// The run_code sessions:
//
//	GET    /v1/sessions                     the caller's sessions (lists.go)
//	POST   /v1/sessions/{sid}               open (in warm mode, start its sandbox)
//	GET    /v1/sessions/{sid}               the session: volume, last access, expiry, sandbox
//	DELETE /v1/sessions/{sid}               close its sandbox, delete its volume now
//	POST   /v1/sessions/{sid}/run           run code; 200 with the result, or 202 past sync_wait
//	GET    /v1/sessions/{sid}/runs/{run}    a run's status and result
//	GET    /v1/sessions/{sid}/events        created, sandbox started/closed, expiring, expired, deleted
//
// A session belongs to the tenant that made it: another tenant's session of
// the same id is another session, and another tenant's runs are not found.

// CodeGone: the session was deleted, with its files.
const CodeGone = "gone"

func (s *server) sessionRoutes(mux *http.ServeMux) {
	s.handle(mux, "GET /v1/sessions", s.listSessions)
	s.handle(mux, "POST /v1/sessions/{sid}", s.openSession)
	s.handle(mux, "GET /v1/sessions/{sid}", s.getSession)
	s.handle(mux, "DELETE /v1/sessions/{sid}", s.deleteSession)
	// A run carries code of up to sessions.MaxCodeBytes, which JSON
	// escaping may make several times longer.
	s.handle(mux, "POST /v1/sessions/{sid}/run", s.runCode, s.runBodyLimit("code"))
	s.handle(mux, "GET /v1/sessions/{sid}/runs/{run}", s.getRun)
	s.handle(mux, "GET /v1/sessions/{sid}/events", s.sessionEvents)
}

// sessionsOn is the answer to give when sessions are off, or nil.
func (s *server) sessionsOn() error {
	if s.opts.Sessions == nil || !s.opts.Sessions.Enabled() {
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "sessions are not enabled on this server"}
	}
	return nil
}

// sessionPath returns the session id (and run id) of a session route, or
// the error to answer when sessions are off or the id is malformed.
func (s *server) sessionPath(r *http.Request) (sid, run string, err error) {
	if err := s.sessionsOn(); err != nil {
		return "", "", err
	}
	sid = r.PathValue("sid")
	if !ids.Valid(sid) {
		return "", "", invalid("session_id", "the session id %q must be 1 to %d characters of A-Z, a-z, 0-9, '.', '_' and '-' (and not \".\" or \"..\")", sid, ids.MaxLen)
	}
	if run = r.PathValue("run"); run != "" && !ids.Valid(run) {
		return "", "", invalid("run_id", "the run id %q must be 1 to %d characters of A-Z, a-z, 0-9, '.', '_' and '-'", run, ids.MaxLen)
	}
	return sid, run, nil
}

// sessionError turns a sessions error into an answer; the cause is logged,
// never sent.
func sessionError(c *call, err error) error {
	var e *sessions.Error
	if !errors.As(err, &e) {
		return err
	}
	switch e.Kind {
	case sessions.KindInvalid:
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalidArgument, Field: e.Field, Message: e.Message}
	case sessions.KindTooLarge:
		return &Error{Status: http.StatusRequestEntityTooLarge, Code: CodePayloadTooLarge, Field: e.Field, Message: e.Message}
	case sessions.KindNotFound, sessions.KindDisabled:
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: e.Message}
	case sessions.KindGone:
		return &Error{Status: http.StatusGone, Code: CodeGone, Message: e.Message}
	case sessions.KindConflict:
		return &Error{Status: http.StatusConflict, Code: CodeConflict, Message: e.Message, RetryAfter: 1}
	}
	c.cause = err
	retry := 5
	if e.RetryAfter > 0 {
		retry = int((e.RetryAfter + time.Second - 1) / time.Second)
	}
	return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: e.Message, RetryAfter: retry}
}

type sessionView struct {
	SessionID      string         `json:"session_id"`
	State          string         `json:"state"`
	Mode           string         `json:"mode"`
	Volume         volumeView     `json:"volume"`
	Sandbox        *sandboxView   `json:"sandbox"`
	Snapshot       *string        `json:"snapshot"`
	Dependencies   string         `json:"dependencies"`
	CreatedAt      time.Time      `json:"created_at"`
	LastAccessedAt time.Time      `json:"last_accessed_at"`
	ExpiresAt      *time.Time     `json:"expires_at"`
	DeletedAt      *time.Time     `json:"deleted_at,omitempty"`
	Links          sessionLinkSet `json:"links"`
}

type volumeView struct {
	Slug      string `json:"slug"`
	MountPath string `json:"mount_path"`
}

type sandboxView struct {
	ID    string `json:"id"`
	Alive bool   `json:"alive"`
}

type sessionLinkSet struct {
	Self   string `json:"self"`
	Run    string `json:"run"`
	Events string `json:"events"`
}

func sessionLinks(id string) sessionLinkSet {
	self := "/v1/sessions/" + id
	return sessionLinkSet{Self: self, Run: self + "/run", Events: self + "/events"}
}

func viewSession(v sessions.View) sessionView {
	out := sessionView{
		SessionID: v.ID, State: string(v.State), Mode: v.Mode,
		Volume:       volumeView{Slug: v.Volume, MountPath: sessions.WorkspacePath},
		Dependencies: v.Dependencies, CreatedAt: v.CreatedAt, LastAccessedAt: v.LastAccessedAt,
		Links: sessionLinks(v.ID),
	}
	if v.SandboxID != "" {
		out.Sandbox = &sandboxView{ID: v.SandboxID, Alive: v.SandboxAlive}
	}
	if v.Snapshot != "" {
		out.Snapshot = &v.Snapshot
	}
	if !v.ExpiresAt.IsZero() {
		out.ExpiresAt = &v.ExpiresAt
	}
	if v.State == store.SessionDeleted {
		out.DeletedAt = &v.DeletedAt
	}
	return out
}

func (s *server) openSession(w http.ResponseWriter, r *http.Request, c *call) error {
	sid, _, err := s.sessionPath(r)
	if err != nil {
		return err
	}
	v, created, err := s.opts.Sessions.Open(r.Context(), c.tenant, sid)
	if err != nil {
		return sessionError(c, err)
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return writeJSON(w, status, viewSession(v))
}

func (s *server) getSession(w http.ResponseWriter, r *http.Request, c *call) error {
	sid, _, err := s.sessionPath(r)
	if err != nil {
		return err
	}
	v, err := s.opts.Sessions.Get(r.Context(), c.tenant, sid)
	if err != nil {
		return sessionError(c, err)
	}
	return writeJSON(w, http.StatusOK, viewSession(v))
}

func (s *server) deleteSession(w http.ResponseWriter, r *http.Request, c *call) error {
	sid, _, err := s.sessionPath(r)
	if err != nil {
		return err
	}
	v, err := s.opts.Sessions.Delete(r.Context(), c.tenant, sid)
	if err != nil {
		return sessionError(c, err)
	}
	return writeJSON(w, http.StatusOK, viewSession(v))
}

// runBody is POST /v1/sessions/{sid}/run as sent.
type runBody struct {
	Code           *string  `json:"code"`
	Language       string   `json:"language"`
	TimeoutSeconds *float64 `json:"timeout_seconds"`
	Stateful       bool     `json:"stateful"`
}

type runView struct {
	RunID      string             `json:"run_id"`
	SessionID  string             `json:"session_id"`
	Status     sessions.RunStatus `json:"status"`
	Language   string             `json:"language"`
	Stateful   bool               `json:"stateful,omitempty"`
	CreatedAt  time.Time          `json:"created_at"`
	FinishedAt *time.Time         `json:"finished_at,omitempty"`
	*sessions.Result
	Links runLinks `json:"links"`
}

type runLinks struct {
	Self    string `json:"self"`
	Session string `json:"session"`
}

func viewRun(run sessions.Run) runView {
	session := "/v1/sessions/" + run.SessionID
	v := runView{
		RunID: run.ID, SessionID: run.SessionID, Status: run.Status, Language: run.Language, Stateful: run.Stateful,
		CreatedAt: run.CreatedAt, Result: run.Result,
		Links: runLinks{Self: session + "/runs/" + run.ID, Session: session},
	}
	if !run.FinishedAt.IsZero() {
		v.FinishedAt = &run.FinishedAt
	}
	return v
}

func decodeRun(w http.ResponseWriter, r *http.Request) (sessions.RunRequest, error) {
	var body runBody
	dec := json.NewDecoder(r.Body) // bounded by the route's guard
	dec.DisallowUnknownFields()
	err := dec.Decode(&body)
	if err == nil {
		if _, err = dec.Token(); err == io.EOF {
			err = nil
		} else if err == nil {
			return sessions.RunRequest{}, invalid("", "the request body holds more than one JSON value")
		}
	}
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &typ) && typ.Field == "timeout_seconds":
		return sessions.RunRequest{}, invalid("timeout_seconds", "timeout_seconds must be a whole number of seconds, not %s", jsonValue(typ.Value))
	case err != nil:
		return sessions.RunRequest{}, decodeError(err)
	}
	req := sessions.RunRequest{Language: body.Language, Stateful: body.Stateful}
	if body.Code != nil {
		req.Code = *body.Code
	}
	if t := body.TimeoutSeconds; t != nil {
		if *t != math.Trunc(*t) || *t < 1 || *t > float64(math.MaxInt32) {
			return req, invalid("timeout_seconds", "timeout_seconds must be a whole number of seconds from 1")
		}
		req.Timeout = time.Duration(*t) * time.Second
	}
	return req, nil
}

func (s *server) runCode(w http.ResponseWriter, r *http.Request, c *call) error {
	sid, _, err := s.sessionPath(r)
	if err != nil {
		return err
	}
	req, err := decodeRun(w, r)
	if err != nil {
		return err
	}
	run, err := s.opts.Sessions.Run(r.Context(), c.tenant, sid, req)
	if err != nil {
		return sessionError(c, err)
	}
	v := viewRun(run)
	if run.Status == sessions.RunRunning {
		// Past sync_wait: the run goes on; poll its link.
		w.Header().Set("Location", v.Links.Self)
		return writeJSON(w, http.StatusAccepted, v)
	}
	return writeJSON(w, http.StatusOK, v)
}

func (s *server) getRun(w http.ResponseWriter, r *http.Request, c *call) error {
	sid, runID, err := s.sessionPath(r)
	if err != nil {
		return err
	}
	run, err := s.opts.Sessions.GetRun(r.Context(), c.tenant, sid, runID)
	if err != nil {
		return sessionError(c, err)
	}
	if run.Status == sessions.RunRunning {
		w.Header().Set("Retry-After", "1")
	}
	return writeJSON(w, http.StatusOK, viewRun(run))
}

func (s *server) sessionEvents(w http.ResponseWriter, r *http.Request, c *call) error {
	sid, _, err := s.sessionPath(r)
	if err != nil {
		return err
	}
	after, limit, err := eventParams(r)
	if err != nil {
		return err
	}
	evs, err := s.opts.Sessions.Events(r.Context(), c.tenant, sid, after)
	if err != nil {
		return sessionError(c, err)
	}
	if len(evs) > limit {
		evs = evs[:limit]
	}
	v := eventsView{Events: make([]map[string]json.RawMessage, len(evs)), NextAfter: after}
	for i, ev := range evs {
		v.Events[i] = eventView(ev.Seq, ev.Type, ev.At, ev.Data, false)
		v.NextAfter = ev.Seq
	}
	return writeJSON(w, http.StatusOK, v)
}
