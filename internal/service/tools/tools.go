// Package tools describes the sessions' LLM tools, search_docs and
// run_code, the way model loops take them: JSON Schema tool definitions in
// the OpenAI and Anthropic shapes with a short system-prompt addendum, and
// an MCP server (mcp.go). The API serves both; the tools run through the
// same services as the REST routes (package docsearch, package sessions).
package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/docsearch"
	"github.com/sandstep/sandstep/internal/service/sessions"
)

// Tool names.
const (
	SearchDocs = "search_docs"
	RunCode    = "run_code"
)

// MaxQueryChars bounds a search_docs query.
const MaxQueryChars = 1000

// Settings are what the definitions depend on.
type Settings struct {
	// Packages are the configured dependencies' names.
	Packages []string
	// MaxK is [tools] max_k; MaxTimeoutSeconds is [sessions]
	// max_timeout_seconds.
	MaxK              int
	MaxTimeoutSeconds int
}

// SettingsFrom reads the settings from the configuration.
func SettingsFrom(cfg *config.Config) Settings {
	s := Settings{Packages: []string{}, MaxK: cfg.Tools.MaxK, MaxTimeoutSeconds: cfg.Sessions.MaxTimeoutSeconds}
	for _, d := range cfg.Sessions.Dependencies {
		s.Packages = append(s.Packages, docsearch.PackageName(d.Package))
	}
	return s
}

// Definition is one tool: a name, what it is for, and its arguments as a
// JSON Schema (draft 2020-12) object.
type Definition struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Parameters  map[string]any `json:"parameters"`
}

// Definitions returns search_docs and run_code.
func Definitions(s Settings) []Definition {
	search := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"query": map[string]any{"type": "string", "minLength": 1, "maxLength": MaxQueryChars,
				"description": "What to look up, in words or API names, such as \"create an issue\" or \"safeParse\"."},
			"k": map[string]any{"type": "integer", "minimum": 1, "maximum": s.MaxK,
				"description": "How many results to return."},
		},
		"required":             []string{"query"},
		"additionalProperties": false,
	}
	if len(s.Packages) > 0 {
		search["properties"].(map[string]any)["package"] = map[string]any{"type": "string", "enum": s.Packages,
			"description": "Search only this package's documentation (saved code modules are searched either way)."}
	}
	run := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"code": map[string]any{"type": "string", "minLength": 1, "maxLength": sessions.MaxCodeBytes,
				"description": "The program. The value of a TypeScript or JavaScript program's last expression is returned as result."},
			"language": map[string]any{"type": "string", "enum": sessions.Languages,
				"description": "The language of code."},
			"timeout_seconds": map[string]any{"type": "integer", "minimum": 1, "maximum": s.MaxTimeoutSeconds,
				"description": "Stop the code after this many seconds."},
		},
		"required":             []string{"code", "language"},
		"additionalProperties": false,
	}
	return []Definition{
		{Name: SearchDocs, Parameters: search,
			Description: "Search the documentation of the installed packages and the code modules saved in this session's " +
				"workspace. Call it before writing code that uses a package. Returns the best matches: documentation sections " +
				"(kind \"doc\", with package, title and text) and saved modules (kind \"code_module\", with path and usage)."},
		{Name: RunCode, Parameters: run,
			Description: "Run code in this session's sandbox, where the packages are installed. Files under " + sessions.WorkspacePath +
				" persist between calls. Returns success, result (the last expression's value), stdout, stderr and error."},
	}
}

// OpenAI returns the definitions in the shape of OpenAI's Chat
// Completions "tools" parameter.
func OpenAI(defs []Definition) []map[string]any {
	out := make([]map[string]any, len(defs))
	for i, d := range defs {
		out[i] = map[string]any{"type": "function", "function": map[string]any{
			"name": d.Name, "description": d.Description, "parameters": d.Parameters}}
	}
	return out
}

// Anthropic returns the definitions in the shape of Anthropic's Messages
// "tools" parameter.
func Anthropic(defs []Definition) []map[string]any {
	out := make([]map[string]any, len(defs))
	for i, d := range defs {
		out[i] = map[string]any{"name": d.Name, "description": d.Description, "input_schema": d.Parameters}
	}
	return out
}

// SystemPrompt is the addendum to an application's system prompt (the
// seed's section 7): a few lines, no API documentation, which the model
// finds with search_docs. It is empty without packages: a session without
// dependencies needs no tools.
func SystemPrompt(packages []string) string {
	if len(packages) == 0 {
		return ""
	}
	return "You can run code in a sandbox where these packages are installed: " + strings.Join(packages, ", ") + ".\n" +
		"Before writing code that uses a package, call search_docs to look up its API; do not guess names or signatures.\n" +
		"Call run_code to execute code. Files you write under " + sessions.WorkspacePath + " stay for the rest of the session.\n" +
		"When you save a reusable module under " + sessions.WorkspacePath + ", end your answer with one JSON line describing it:\n" +
		`{"type":"code_modules","modules":[{"path":"lib/example.ts","description":"what it does","exports":["fn"],"usage":"import { fn } from './lib/example.ts'"}]}` + "\n"
}

// ArgError is a tool argument that cannot be used, naming it.
type ArgError struct {
	Field   string
	Message string
}

func (e *ArgError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

// searchArgs is search_docs' arguments as sent.
type searchArgs struct {
	Query   *string  `json:"query"`
	Package string   `json:"package"`
	K       *float64 `json:"k"`
}

// ParseSearch reads search_docs arguments (a JSON object) into a query;
// a problem is an *ArgError. The REST route and the MCP tool both use it.
func ParseSearch(raw []byte, maxK int) (docsearch.Query, error) {
	var a searchArgs
	if err := strictDecode(raw, &a); err != nil {
		return docsearch.Query{}, err
	}
	switch {
	case a.Query == nil || strings.TrimSpace(*a.Query) == "":
		return docsearch.Query{}, &ArgError{Field: "query", Message: "query is required: what to look up"}
	case utf8.RuneCountInString(*a.Query) > MaxQueryChars:
		return docsearch.Query{}, &ArgError{Field: "query", Message: fmt.Sprintf("query is at most %d characters", MaxQueryChars)}
	}
	q := docsearch.Query{Text: *a.Query, Package: a.Package}
	if a.K != nil {
		if *a.K != math.Trunc(*a.K) || *a.K < 1 || *a.K > float64(maxK) {
			return q, &ArgError{Field: "k", Message: fmt.Sprintf("k must be a whole number from 1 to %d", maxK)}
		}
		q.K = int(*a.K)
	}
	return q, nil
}

// runArgs is run_code's arguments as sent.
type runArgs struct {
	Code           *string  `json:"code"`
	Language       string   `json:"language"`
	TimeoutSeconds *float64 `json:"timeout_seconds"`
}

// ParseRun reads run_code arguments into a run request; the sessions
// service checks the rest (sizes, language, the timeout's bound).
func ParseRun(raw []byte) (sessions.RunRequest, error) {
	var a runArgs
	if err := strictDecode(raw, &a); err != nil {
		return sessions.RunRequest{}, err
	}
	req := sessions.RunRequest{Language: a.Language}
	if a.Code != nil {
		req.Code = *a.Code
	}
	if t := a.TimeoutSeconds; t != nil {
		if *t != math.Trunc(*t) || *t < 1 || *t > float64(math.MaxInt32) {
			return req, &ArgError{Field: "timeout_seconds", Message: "timeout_seconds must be a whole number of seconds from 1"}
		}
		req.Timeout = time.Duration(*t) * time.Second
	}
	return req, nil
}

// strictDecode decodes one JSON object, refusing unknown fields and type
// mismatches with the field named.
func strictDecode(raw []byte, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			return &ArgError{Message: "the arguments hold more than one JSON value"}
		}
		return nil
	}
	var typ *json.UnmarshalTypeError
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &typ):
		return &ArgError{Field: typ.Field, Message: fmt.Sprintf("%s must be a %s, not a JSON %s", typ.Field, jsonKind(typ.Type.Kind().String()), typ.Value)}
	case errors.As(err, &syn):
		return &ArgError{Message: "the arguments are not valid JSON: " + err.Error()}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return &ArgError{Field: f, Message: fmt.Sprintf("unknown field %q", f)}
	}
	return &ArgError{Message: "the arguments must be a JSON object: " + err.Error()}
}

func jsonKind(k string) string {
	switch k {
	case "ptr", "string":
		return "string"
	case "float64", "int":
		return "number"
	}
	return k
}
