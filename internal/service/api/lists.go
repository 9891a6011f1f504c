package api

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandstep/sandstep/internal/service/sessions"
	"github.com/sandstep/sandstep/internal/service/store"
)

// The listings: GET /v1/jobs and GET /v1/sessions, the caller's own items,
// newest first, a page at a time:
//
//	?limit=N     1 to 100 (default 20)
//	?cursor=C    the next_cursor of the page before
//	?status=S    jobs: queued, running, succeeded, failed, cancelled (a comma list for several)
//	?state=S     sessions: idle, running, deleting, deleted (likewise)
//
// A page may hold fewer items than the limit with more to come (a filter
// that matches little reads a bounded slice of the history per page): the
// listing ends when next_cursor is null.

// DefaultListLimit is the page size of a listing without ?limit=.
const DefaultListLimit = 20

// jobStatuses are the statuses a job can have, as the API shows them.
var jobStatuses = []store.Status{store.StatusQueued, store.StatusRunning, store.StatusSucceeded, store.StatusFailed, store.StatusCancelled}

var sessionStates = []store.SessionState{store.SessionIdle, store.SessionRunning, store.SessionDeleting, store.SessionDeleted}

// listParams reads ?limit= and ?cursor= for the caller's listing of kind.
func listParams(r *http.Request, kind byte, tenant string) (store.ListQuery, error) {
	q := r.URL.Query()
	lq := store.ListQuery{Limit: DefaultListLimit}
	if q.Has("limit") {
		n, err := strconv.Atoi(q.Get("limit"))
		if err != nil || n < 1 || n > store.MaxListPage {
			return lq, invalid("limit", "limit must be a whole number from 1 to %d", store.MaxListPage)
		}
		lq.Limit = n
	}
	if q.Has("cursor") {
		pos, err := decodeCursor(q.Get("cursor"), kind, tenant)
		if err != nil {
			return lq, invalid("cursor", "cursor is not a next_cursor this listing gave you (%v); list again without it to start from the newest", err)
		}
		lq.After = &pos
	}
	return lq, nil
}

// filterParam reads a comma-separated filter (?status=, ?state=) whose
// values must be among valid; nil when absent.
func filterParam[T ~string](r *http.Request, name string, valid []T) ([]T, error) {
	q := r.URL.Query()
	if !q.Has(name) {
		return nil, nil
	}
	names := make([]string, len(valid))
	for i, v := range valid {
		names[i] = string(v)
	}
	var out []T
	for _, v := range strings.Split(q.Get(name), ",") {
		v = strings.TrimSpace(v)
		if !slices.Contains(names, v) {
			return nil, invalid(name, "%s %q is not one of %s", name, v, strings.Join(names, ", "))
		}
		out = append(out, T(v))
	}
	return out, nil
}

func nextCursor(next *store.ListPosition, kind byte, tenant string) *string {
	if next == nil {
		return nil
	}
	c := encodeCursor(*next, kind, tenant)
	return &c
}

// jobSummary is a job as a listing shows it: what the listing index holds.
// GET /v1/jobs/{id} has the steps.
type jobSummary struct {
	JobID string `json:"job_id"`
	// Type is "research" or "agent".
	Type            string       `json:"type"`
	Status          store.Status `json:"status"`
	Phase           *string      `json:"phase"`
	Query           string       `json:"query"`
	Mode            string       `json:"mode"`
	Optimization    string       `json:"optimization"`
	CreatedAt       string       `json:"created_at"`
	FinishedAt      *string      `json:"finished_at"`
	Error           *string      `json:"error"`
	CancelRequested bool         `json:"cancel_requested"`
	Links           links        `json:"links"`
}

type jobList struct {
	Jobs []jobSummary `json:"jobs"`
	// NextCursor is the cursor= of the next page; null on the last one.
	NextCursor *string `json:"next_cursor"`
}

func summarizeJob(j store.Job) jobSummary {
	v := jobSummary{
		JobID: j.ClientID, Status: viewStatus(j), Phase: optional(j.Phase),
		CreatedAt: formatTime(j.CreatedAt), Error: optional(j.Error),
		CancelRequested: j.CancelRequested, Links: linksOf(j), Type: jobTypeResearch,
	}
	if j.Type == store.JobTypeAgent {
		v.Type = store.JobTypeAgent
	}
	if !j.FinishedAt.IsZero() {
		f := formatTime(j.FinishedAt)
		v.FinishedAt = &f
	}
	// The request as stored (see JobRequest); a record that cannot be read
	// still lists, without it.
	var req struct {
		Query        string `json:"query"`
		Mode         string `json:"mode"`
		Optimization string `json:"optimization"`
		// An agent run's: its prompt is listed as the query, its agent as
		// the mode.
		Prompt string `json:"prompt"`
		Agent  string `json:"agent"`
	}
	if json.Unmarshal(j.Request, &req) == nil {
		v.Query, v.Mode, v.Optimization = req.Query, req.Mode, req.Optimization
		if j.Type == store.JobTypeAgent {
			v.Query, v.Mode = clipRunes(req.Prompt, MaxQueryRunes), req.Agent
		}
	}
	return v
}

// jobTypeResearch is how the API names the type of a deep-research job.
const jobTypeResearch = "research"

// clipRunes cuts s to at most n runes.
func clipRunes(s string, n int) string {
	i := 0
	for pos := range s {
		if i == n {
			return s[:pos]
		}
		i++
	}
	return s
}

// listJobs is GET /v1/jobs.
func (s *server) listJobs(w http.ResponseWriter, r *http.Request, c *call) error {
	statuses, err := filterParam(r, "status", jobStatuses)
	if err != nil {
		return err
	}
	lq, err := listParams(r, cursorJobs, c.tenant)
	if err != nil {
		return err
	}
	types, err := filterParam(r, "type", []string{jobTypeResearch, store.JobTypeAgent})
	if err != nil {
		return err
	}
	var keep func(store.Job) bool
	if statuses != nil || types != nil {
		// On the status the API shows (a job whose start failed is
		// failed), which is why the filter is not the store's.
		keep = func(j store.Job) bool {
			typ := jobTypeResearch
			if j.Type == store.JobTypeAgent {
				typ = store.JobTypeAgent
			}
			return (statuses == nil || slices.Contains(statuses, viewStatus(j))) && (types == nil || slices.Contains(types, typ))
		}
	}
	page, err := s.opts.Store.ListTenantJobs(r.Context(), c.tenant, lq, keep)
	if err != nil {
		return err
	}
	v := jobList{Jobs: make([]jobSummary, len(page.Jobs)), NextCursor: nextCursor(page.Next, cursorJobs, c.tenant)}
	for i, j := range page.Jobs {
		v.Jobs[i] = summarizeJob(j)
	}
	return writeJSON(w, http.StatusOK, v)
}

// sessionSummary is a session as a listing shows it. GET
// /v1/sessions/{sid} also says whether its sandbox is alive, which takes a
// question to the provider.
type sessionSummary struct {
	SessionID      string         `json:"session_id"`
	State          string         `json:"state"`
	Volume         volumeView     `json:"volume"`
	SandboxID      *string        `json:"sandbox_id"`
	CreatedAt      time.Time      `json:"created_at"`
	LastAccessedAt time.Time      `json:"last_accessed_at"`
	ExpiresAt      *time.Time     `json:"expires_at"`
	DeletedAt      *time.Time     `json:"deleted_at,omitempty"`
	Links          sessionLinkSet `json:"links"`
}

type sessionList struct {
	Sessions   []sessionSummary `json:"sessions"`
	NextCursor *string          `json:"next_cursor"`
}

func summarizeSession(ss store.Session) sessionSummary {
	v := sessionSummary{
		SessionID: ss.ClientID, State: string(ss.State),
		Volume:    volumeView{Slug: ss.VolumeSlug, MountPath: sessions.WorkspacePath},
		SandboxID: optional(ss.SandboxID), CreatedAt: ss.CreatedAt, LastAccessedAt: ss.LastAccessedAt,
		Links: sessionLinks(ss.ClientID),
	}
	if ss.State == store.SessionDeleted {
		v.DeletedAt = &ss.DeletedAt
	} else if !ss.IdleExpiresAt.IsZero() {
		v.ExpiresAt = &ss.IdleExpiresAt
	}
	return v
}

// listSessions is GET /v1/sessions.
func (s *server) listSessions(w http.ResponseWriter, r *http.Request, c *call) error {
	if err := s.sessionsOn(); err != nil {
		return err
	}
	states, err := filterParam(r, "state", sessionStates)
	if err != nil {
		return err
	}
	lq, err := listParams(r, cursorSessions, c.tenant)
	if err != nil {
		return err
	}
	var keep func(store.Session) bool
	if states != nil {
		keep = func(ss store.Session) bool { return slices.Contains(states, ss.State) }
	}
	page, err := s.opts.Store.ListTenantSessions(r.Context(), c.tenant, lq, keep)
	if err != nil {
		return err
	}
	v := sessionList{Sessions: make([]sessionSummary, len(page.Sessions)), NextCursor: nextCursor(page.Next, cursorSessions, c.tenant)}
	for i, ss := range page.Sessions {
		v.Sessions[i] = summarizeSession(ss)
	}
	return writeJSON(w, http.StatusOK, v)
}
