package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/sandstep/sandstep/internal/service/docsearch"
	"github.com/sandstep/sandstep/internal/service/ids"
	"github.com/sandstep/sandstep/internal/service/tools"
)

// The sessions' LLM tools:
//
//	GET  /v1/tools                          search_docs and run_code as tool definitions, and the prompt addendum
//	POST /v1/sessions/{sid}/search_docs     {"query", "package"?, "k"?}: docs and the session's code modules
//	POST /v1/sessions/{sid}/code_modules    {"modules": [{"path", "description", "exports", "usage"}]}
//	POST /mcp?session_id={sid}              the same two tools over MCP (streamable HTTP, stateless)
//
// They are on with the sessions, and answer 404 like them otherwise.

func (s *server) toolRoutes(mux *http.ServeMux) {
	s.handle(mux, "GET /v1/tools", s.listTools)
	s.handle(mux, "POST /v1/sessions/{sid}/search_docs", s.searchDocs)
	s.handle(mux, "POST /v1/sessions/{sid}/code_modules", s.putCodeModules)
	// A run_code call carries code as a run does.
	s.handle(mux, "POST /mcp", s.mcp, s.runBodyLimit("code"))
}

// toolsOn returns the error to answer when the tools are off.
func (s *server) toolsOn() error {
	if s.opts.Sessions == nil || !s.opts.Sessions.Enabled() {
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "sessions are not enabled on this server"}
	}
	if s.opts.Docs == nil {
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "this server has no docs index"}
	}
	return nil
}

type toolsView struct {
	Tools        toolShapes `json:"tools"`
	SystemPrompt string     `json:"system_prompt"`
	Packages     []string   `json:"packages"`
	// SearchMode is "bm25" or "hybrid" (embeddings configured).
	SearchMode string           `json:"search_mode"`
	DocsIndex  docsearch.Status `json:"docs_index"`
	Endpoints  toolEndpoints    `json:"endpoints"`
}

type toolShapes struct {
	OpenAI    []map[string]any `json:"openai"`
	Anthropic []map[string]any `json:"anthropic"`
}

// toolEndpoints say where each tool call goes, {session_id} filled in by
// the application.
type toolEndpoints struct {
	SearchDocs  string `json:"search_docs"`
	RunCode     string `json:"run_code"`
	CodeModules string `json:"code_modules"`
	MCP         string `json:"mcp"`
}

func (s *server) listTools(w http.ResponseWriter, r *http.Request, c *call) error {
	if err := s.toolsOn(); err != nil {
		return err
	}
	status, err := s.opts.Docs.Status(r.Context())
	if err != nil {
		c.cause = err
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "the docs index does not answer", RetryAfter: 5}
	}
	set := s.opts.Tools
	defs := tools.Definitions(set)
	return writeJSON(w, http.StatusOK, toolsView{
		DocsIndex:    status,
		Tools:        toolShapes{OpenAI: tools.OpenAI(defs), Anthropic: tools.Anthropic(defs)},
		SystemPrompt: tools.SystemPrompt(set.Packages),
		Packages:     nonNil(set.Packages),
		SearchMode:   s.opts.Docs.Mode(),
		Endpoints: toolEndpoints{
			SearchDocs: "/v1/sessions/{session_id}/search_docs", RunCode: "/v1/sessions/{session_id}/run",
			CodeModules: "/v1/sessions/{session_id}/code_modules", MCP: "/mcp?session_id={session_id}",
		},
	})
}

func argError(err error) error {
	var ae *tools.ArgError
	if errors.As(err, &ae) {
		return invalid(ae.Field, "%s", ae.Message)
	}
	return err
}

func (s *server) searchDocs(w http.ResponseWriter, r *http.Request, c *call) error {
	if err := s.toolsOn(); err != nil {
		return err
	}
	sid, _, err := s.sessionPath(r)
	if err != nil {
		return err
	}
	raw, err := io.ReadAll(r.Body) // bounded by the route's guard
	if err != nil {
		return decodeError(err)
	}
	q, err := tools.ParseSearch(raw, s.opts.Tools.MaxK)
	if err != nil {
		return argError(err)
	}
	q.Tenant, q.Session = c.tenant, sid
	ans, err := s.opts.Docs.Search(r.Context(), q)
	switch {
	case errors.Is(err, docsearch.ErrUnknownPackage):
		return invalid("package", "package %q is not one of the dependencies %v", q.Package, s.opts.Docs.Packages())
	case err != nil:
		c.cause = err
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "the docs index does not answer", RetryAfter: 5}
	}
	return writeJSON(w, http.StatusOK, ans)
}

type codeModulesBody struct {
	Modules []docsearch.Module `json:"modules"`
}

type codeModulesView struct {
	SessionID string   `json:"session_id"`
	Upserted  []string `json:"upserted"`
	Warning   string   `json:"warning,omitempty"`
}

func (s *server) putCodeModules(w http.ResponseWriter, r *http.Request, c *call) error {
	if err := s.toolsOn(); err != nil {
		return err
	}
	sid, _, err := s.sessionPath(r)
	if err != nil {
		return err
	}
	var body codeModulesBody
	dec := json.NewDecoder(r.Body) // bounded by the route's guard
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid("", "the request body holds more than one JSON value")
	}
	mods, err := docsearch.CleanModules(body.Modules)
	if err != nil {
		return moduleError(err)
	}
	warning, err := s.opts.Docs.PutModules(r.Context(), c.tenant, sid, mods)
	switch {
	case errors.Is(err, docsearch.ErrSessionNotFound):
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: fmt.Sprintf("session %q not found: open it (POST /v1/sessions/%s) and save the modules in its workspace first", sid, sid)}
	case errors.Is(err, docsearch.ErrSessionGone):
		return &Error{Status: http.StatusGone, Code: CodeGone, Message: fmt.Sprintf("session %q was deleted with its volume; its modules are gone", sid)}
	case err != nil:
		if e := moduleError(err); e != err {
			return e
		}
		c.cause = err
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "the docs index does not answer", RetryAfter: 5}
	}
	paths := make([]string, len(mods))
	for i, m := range mods {
		paths[i] = m.Path
	}
	return writeJSON(w, http.StatusOK, codeModulesView{SessionID: sid, Upserted: paths, Warning: warning})
}

func moduleError(err error) error {
	var fe *docsearch.FieldError
	if errors.As(err, &fe) {
		return invalid(fe.Field, "%s", fe.Message)
	}
	return err
}

func (s *server) mcp(w http.ResponseWriter, r *http.Request, c *call) error {
	if err := s.toolsOn(); err != nil {
		return err
	}
	sid := r.URL.Query().Get("session_id")
	if !ids.Valid(sid) {
		return invalid("session_id", "POST /mcp?session_id=<id>: the session the tools act on; an id is 1 to %d characters of A-Z, a-z, 0-9, '.', '_' and '-'", ids.MaxLen)
	}
	tools.ServeMCP(w, r, tools.Binding{Tenant: c.tenant, Session: sid, Docs: s.opts.Docs, Sessions: s.opts.Sessions,
		Settings: s.opts.Tools, Logger: s.log})
	return nil
}
