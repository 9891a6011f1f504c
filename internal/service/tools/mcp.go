package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandstep/sandstep/internal/service/docsearch"
	"github.com/sandstep/sandstep/internal/service/sessions"
	"github.com/sandstep/sandstep/internal/service/version"
)

// Binding is what one MCP request's tool calls act on: a tenant's session
// and the services that run the tools.
type Binding struct {
	Tenant   string
	Session  string
	Docs     *docsearch.Service
	Sessions *sessions.Service
	Settings Settings
	Logger   *slog.Logger
}

// ServeMCP answers one MCP request over the streamable HTTP transport, in
// its stateless form: every request carries its own bearer token and
// session id, so nothing binds a client to one process (the API runs on
// many Lambdas) and answers are plain JSON rather than event streams
// (API Gateway buffers responses). The official Go SDK
// (github.com/modelcontextprotocol/go-sdk) speaks the protocol.
func ServeMCP(w http.ResponseWriter, r *http.Request, b Binding) {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return newServer(b) },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true, Logger: b.Logger})
	h.ServeHTTP(w, r)
}

func newServer(b Binding) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "sandstep", Version: version.Version}, &mcp.ServerOptions{
		Instructions: SystemPrompt(b.Settings.Packages),
		Logger:       b.Logger,
	})
	for _, d := range Definitions(b.Settings) {
		tool := &mcp.Tool{Name: d.Name, Description: d.Description, InputSchema: d.Parameters}
		switch d.Name {
		case SearchDocs:
			srv.AddTool(tool, b.searchDocs)
		case RunCode:
			srv.AddTool(tool, b.runCode)
		}
	}
	return srv
}

func (b Binding) searchDocs(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	q, err := ParseSearch(req.Params.Arguments, b.Settings.MaxK)
	if err != nil {
		return toolError(err), nil
	}
	q.Tenant, q.Session = b.Tenant, b.Session
	ans, err := b.Docs.Search(ctx, q)
	switch {
	case errors.Is(err, docsearch.ErrUnknownPackage):
		return toolError(&ArgError{Field: "package", Message: fmt.Sprintf("%q is not one of the packages %v", q.Package, b.Settings.Packages)}), nil
	case err != nil:
		b.Logger.Error("mcp search_docs", "session", b.Session, "err", err)
		return nil, errors.New("search_docs is unavailable for now; try again")
	}
	return structured(ans)
}

func (b Binding) runCode(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	rr, err := ParseRun(req.Params.Arguments)
	if err != nil {
		return toolError(err), nil
	}
	run, err := b.Sessions.Run(ctx, b.Tenant, b.Session, rr)
	var se *sessions.Error
	switch {
	case errors.As(err, &se) && se.Kind != sessions.KindUnavailable:
		return toolError(&ArgError{Field: se.Field, Message: se.Message}), nil
	case err != nil:
		b.Logger.Error("mcp run_code", "session", b.Session, "err", err)
		return nil, errors.New("run_code is unavailable for now; try again")
	}
	if run.Status == sessions.RunRunning || run.Result == nil {
		return structured(map[string]any{"status": run.Status, "run_id": run.ID,
			"poll": "/v1/sessions/" + b.Session + "/runs/" + run.ID,
			"note": "the run goes on past the API's wait; its result is at poll"})
	}
	res, err := structured(run.Result)
	if err == nil && !run.Result.Success {
		res.IsError = true
	}
	return res, err
}

// structured answers with v as structured content and as its JSON text,
// for clients that read only text.
func structured(v any) (*mcp.CallToolResult, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode tool result: %w", err)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}, StructuredContent: json.RawMessage(b)}, nil
}

// toolError is a call the model can correct: the message says what to
// change.
func toolError(err error) *mcp.CallToolResult {
	r := &mcp.CallToolResult{}
	r.SetError(err)
	return r
}
