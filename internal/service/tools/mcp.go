package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"

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

// The MCP server is the stateless form of the streamable HTTP transport,
// tools only, answering in JSON: every request carries its own bearer token
// and session id, so nothing binds a client to one process (the API runs on
// many Lambdas), and API Gateway buffers responses anyway. That is a few
// JSON-RPC methods, written here rather than linked from the official Go
// SDK, which would add 1.4 MB (its OAuth, JSON Schema and encoding
// dependencies) to the ApiFunction, past its 12 MB budget. The SDK's own
// client is the judge of this server in the tests.

// mcpVersions are the protocol versions this server speaks, newest first:
// all of them carry tools the same way. Newer clients first try the
// stateless server/discover of the next version, get "method not found",
// and fall back to initialize, as that version's specification says.
var mcpVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// JSON-RPC error codes.
const (
	rpcParseError     = -32700
	rpcInvalidRequest = -32600
	rpcMethodNotFound = -32601
	rpcInvalidParams  = -32602
	rpcInternalError  = -32603
)

type rpcRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

// maxMCPBody bounds one message; the API's body guard is the outer bound.
const maxMCPBody = 8 << 20

// ServeMCP answers one MCP request, a POST: the router answers any other
// method with 405, which is the specification's answer for a server that
// offers no stream of its own messages.
func ServeMCP(w http.ResponseWriter, r *http.Request, b Binding) {
	if v := r.Header.Get("Mcp-Protocol-Version"); v != "" && !slices.Contains(mcpVersions, v) {
		http.Error(w, fmt.Sprintf("unsupported Mcp-Protocol-Version %q (supported: %s)", v, strings.Join(mcpVersions, ", ")), http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxMCPBody+1))
	if err != nil {
		http.Error(w, "reading the request: "+err.Error(), http.StatusBadRequest)
		return
	}
	var req rpcRequest
	switch {
	case len(body) > maxMCPBody:
		writeRPC(w, rpcResponse{Error: &rpcError{rpcInvalidRequest, "message too large"}})
		return
	case len(bytes.TrimSpace(body)) > 0 && bytes.TrimSpace(body)[0] == '[':
		writeRPC(w, rpcResponse{Error: &rpcError{rpcInvalidRequest, "batches are not supported"}})
		return
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeRPC(w, rpcResponse{Error: &rpcError{rpcParseError, "not a JSON-RPC message: " + err.Error()}})
		return
	}
	if req.JSONRPC != "2.0" || req.Method == "" {
		if req.Method == "" && len(req.ID) > 0 {
			// A response to a request of ours: this server sends none.
			w.WriteHeader(http.StatusAccepted)
			return
		}
		writeRPC(w, rpcResponse{ID: req.ID, Error: &rpcError{rpcInvalidRequest, `a request needs "jsonrpc": "2.0" and a method`}})
		return
	}
	if len(req.ID) == 0 || string(req.ID) == "null" {
		// A notification (initialized, cancelled): nothing to answer.
		w.WriteHeader(http.StatusAccepted)
		return
	}
	result, rerr := b.call(r.Context(), req)
	writeRPC(w, rpcResponse{ID: req.ID, Result: result, Error: rerr})
}

func writeRPC(w http.ResponseWriter, res rpcResponse) {
	res.JSONRPC = "2.0"
	if res.ID == nil {
		res.ID = json.RawMessage("null")
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(res)
}

func (b Binding) call(ctx context.Context, req rpcRequest) (any, *rpcError) {
	switch req.Method {
	case "initialize":
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		if err := json.Unmarshal(orEmpty(req.Params), &p); err != nil {
			return nil, &rpcError{rpcInvalidParams, "initialize: " + err.Error()}
		}
		v := mcpVersions[0]
		if slices.Contains(mcpVersions, p.ProtocolVersion) {
			v = p.ProtocolVersion
		}
		return map[string]any{
			"protocolVersion": v,
			"capabilities":    map[string]any{"tools": map[string]any{}},
			"serverInfo":      map[string]any{"name": "sandstep", "version": version.Version},
			"instructions":    SystemPrompt(b.Settings.Packages),
		}, nil
	case "ping":
		return map[string]any{}, nil
	case "tools/list":
		defs := Definitions(b.Settings)
		list := make([]map[string]any, len(defs))
		for i, d := range defs {
			list[i] = map[string]any{"name": d.Name, "description": d.Description, "inputSchema": d.Parameters}
		}
		return map[string]any{"tools": list}, nil
	case "tools/call":
		var p struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		if err := json.Unmarshal(orEmpty(req.Params), &p); err != nil {
			return nil, &rpcError{rpcInvalidParams, "tools/call: " + err.Error()}
		}
		switch p.Name {
		case SearchDocs:
			return b.searchDocs(ctx, orEmpty(p.Arguments))
		case RunCode:
			return b.runCode(ctx, orEmpty(p.Arguments))
		}
		return nil, &rpcError{rpcInvalidParams, fmt.Sprintf("unknown tool %q (the tools are %s and %s)", p.Name, SearchDocs, RunCode)}
	}
	return nil, &rpcError{rpcMethodNotFound, fmt.Sprintf("method %q not found", req.Method)}
}

func orEmpty(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return json.RawMessage("{}")
	}
	return raw
}

func (b Binding) searchDocs(ctx context.Context, args json.RawMessage) (any, *rpcError) {
	q, err := ParseSearch(args, b.Settings.MaxK)
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
		return nil, &rpcError{rpcInternalError, "search_docs is unavailable for now; try again"}
	}
	return structured(ans, false)
}

func (b Binding) runCode(ctx context.Context, args json.RawMessage) (any, *rpcError) {
	rr, err := ParseRun(args)
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
		return nil, &rpcError{rpcInternalError, "run_code is unavailable for now; try again"}
	}
	if run.Status == sessions.RunRunning || run.Result == nil {
		return structured(map[string]any{"status": run.Status, "run_id": run.ID,
			"poll": "/v1/sessions/" + b.Session + "/runs/" + run.ID,
			"note": "the run goes on past the API's wait; its result is at poll"}, false)
	}
	return structured(run.Result, !run.Result.Success)
}

// structured answers with v as structured content and as its JSON text,
// for clients that read only text.
func structured(v any, isError bool) (any, *rpcError) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, &rpcError{rpcInternalError, "encode tool result: " + err.Error()}
	}
	res := map[string]any{
		"content":           []map[string]any{{"type": "text", "text": string(raw)}},
		"structuredContent": json.RawMessage(raw),
	}
	if isError {
		res["isError"] = true
	}
	return res, nil
}

// toolError is a call the model can correct: the message says what to
// change.
func toolError(err error) map[string]any {
	return map[string]any{
		"content": []map[string]any{{"type": "text", "text": err.Error()}},
		"isError": true,
	}
}
