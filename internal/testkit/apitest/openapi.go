package apitest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/sandstep/sandstep/internal/service/api"
)

// The API's description (internal/service/api/openapi.json) is checked
// against the real server: every response a test receives through Serve
// (or Validate) is validated against it with kin-openapi, so the
// description cannot drift from what the handler answers. kin-openapi is
// linked by tests only; no Lambda carries it.

// Validator checks responses against an OpenAPI document.
type Validator struct {
	doc *openapi3.T
	// mux finds the operation of a request as the API's own ServeMux
	// does: OpenAPI path templates are ServeMux patterns.
	mux    *http.ServeMux
	routes map[string]*routers.Route
	// anyMethod are the routes of every method, by ServeMux pattern.
	anyMethod map[string]*routers.Route
	errors    *openapi3.SchemaRef // for answers of no route (404, 405)
}

var (
	specOnce sync.Once
	spec     *Validator
	specErr  error
)

// Spec returns the validator of the API's own description, loaded and
// checked once.
func Spec() (*Validator, error) {
	specOnce.Do(func() { spec, specErr = NewValidator(api.OpenAPI()) })
	return spec, specErr
}

// NewValidator loads an OpenAPI 3.1 document and checks that it is one.
func NewValidator(doc []byte) (*Validator, error) {
	loader := openapi3.NewLoader()
	d, err := loader.LoadFromData(doc)
	if err != nil {
		return nil, fmt.Errorf("load the OpenAPI document: %w", err)
	}
	if !d.IsOpenAPI31OrLater() {
		return nil, fmt.Errorf("the document is OpenAPI %s, not 3.1", d.OpenAPI)
	}
	if err := d.Validate(context.Background(), openapi3.EnableSchemaFormatValidation(), openapi3.EnableExamplesValidation()); err != nil {
		return nil, fmt.Errorf("the OpenAPI document is not valid: %w", err)
	}
	v := &Validator{doc: d, mux: http.NewServeMux(), routes: map[string]*routers.Route{}, anyMethod: map[string]*routers.Route{}}
	for path, item := range d.Paths.Map() {
		mux := MuxPath(path)
		if p, ok := item.Extensions["x-mux-path"].(string); ok {
			mux = p
		}
		// x-any-method: the route takes every method (a proxy); its
		// operations describe what it answers.
		if every, _ := item.Extensions["x-any-method"].(bool); every {
			v.anyMethod[mux] = &routers.Route{Spec: d, Path: path, PathItem: item}
			v.mux.HandleFunc(mux, func(http.ResponseWriter, *http.Request) {})
			continue
		}
		for method, op := range item.Operations() {
			pattern := method + " " + mux
			v.routes[pattern] = &routers.Route{Spec: d, Path: path, PathItem: item, Method: method, Operation: op}
			v.mux.HandleFunc(pattern, func(http.ResponseWriter, *http.Request) {})
		}
	}
	if d.Components == nil || d.Components.Schemas["Error"] == nil {
		return nil, errors.New("the OpenAPI document has no components.schemas.Error")
	}
	v.errors = d.Components.Schemas["Error"]
	return v, nil
}

// MuxPath is the ServeMux pattern path of an OpenAPI path: the same
// template, except that "/" means the root only.
//
// API Gateway writes a greedy segment {name+}, ServeMux {name...}; an
// OpenAPI path cannot say one, so its path item says the ServeMux path in
// x-mux-path.
func MuxPath(path string) string {
	if path == "/" {
		return "/{$}"
	}
	return greedy.ReplaceAllString(path, "{$1...}")
}

var greedy = regexp.MustCompile(`\{(\w+)\+\}`)

// Document is the description, loaded.
func (v *Validator) Document() *openapi3.T { return v.doc }

// Operations lists the document's operations as ServeMux patterns
// ("GET /v1/jobs/{id}", "GET /{$}").
func (v *Validator) Operations() []string {
	out := make([]string, 0, len(v.routes)+len(v.anyMethod))
	for p := range v.routes {
		out = append(out, p)
	}
	for p := range v.anyMethod {
		out = append(out, p)
	}
	return out
}

// Check validates one response to req: its status, headers and body
// against the operation the request reached. A request no operation
// matches must have been answered 404 or 405 in the API's error shape.
func (v *Validator) Check(req *http.Request, status int, header http.Header, body []byte) error {
	req = literalSegments(req)
	_, pattern := v.mux.Handler(req)
	rt := v.routes[pattern]
	if proxy := v.anyMethod[pattern]; proxy != nil {
		// The operation of the request's method, else the path item's
		// only one: a proxy answers every method alike.
		op := proxy.PathItem.GetOperation(req.Method)
		if op == nil {
			for _, o := range proxy.PathItem.Operations() {
				op = o
			}
		}
		r := *proxy
		r.Method, r.Operation = req.Method, op
		rt = &r
	}
	if rt == nil && req.Method == http.MethodHead {
		r := req.Clone(req.Context())
		r.Method = http.MethodGet
		_, pattern = v.mux.Handler(r)
		rt = v.routes[pattern]
	}
	if rt == nil {
		if status != http.StatusNotFound && status != http.StatusMethodNotAllowed {
			return fmt.Errorf("%s %s matches no operation of the description, yet was answered %d", req.Method, req.URL.Path, status)
		}
		var val any
		if err := json.Unmarshal(body, &val); err != nil {
			return fmt.Errorf("%s %s: %d without a JSON error body: %w", req.Method, req.URL.Path, status, err)
		}
		if err := v.errors.Value.VisitJSON(val, openapi3.EnableJSONSchema2020()); err != nil {
			return fmt.Errorf("%s %s: %d does not match components.schemas.Error: %w", req.Method, req.URL.Path, status, err)
		}
		return nil
	}
	params := map[string]string{}
	for _, p := range rt.PathItem.Parameters {
		if p.Value != nil && p.Value.In == openapi3.ParameterInPath {
			params[p.Value.Name] = req.PathValue(p.Value.Name)
		}
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: rt},
		Status:                 status,
		Header:                 header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	in.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(req.Context(), in); err != nil {
		return fmt.Errorf("%s %s (operation %s): %d: %w", req.Method, req.URL.RequestURI(), rt.Operation.OperationID, status, err)
	}
	return nil
}

// literalSegments hands "." and ".." segments to the mux escaped, as the
// API's router does: there they are ids (refused as such), not steps up to
// another route.
func literalSegments(r *http.Request) *http.Request {
	segs := strings.Split(r.URL.EscapedPath(), "/")
	dots := false
	for i, seg := range segs {
		if seg == "." || seg == ".." {
			segs[i], dots = strings.Repeat("%2E", len(seg)), true
		}
	}
	if !dots {
		return r
	}
	r = r.Clone(r.Context())
	r.URL.RawPath = strings.Join(segs, "/")
	return r
}

// Validate wraps an API handler so that every response it gives is
// checked against the API's description; a response that does not match
// fails t. Streams are checked frame by frame once they end.
func Validate(t testing.TB, h http.Handler) http.Handler {
	t.Helper()
	v, err := Spec()
	if err != nil {
		t.Fatal(err)
	}
	return v.Middleware(h, func(err error) { t.Errorf("OpenAPI: %v", err) })
}

// CheckResponse checks one response given otherwise than through a test
// server (a Lambda's answer to an API Gateway event) against the API's
// description; a mismatch fails t.
func CheckResponse(t testing.TB, req *http.Request, status int, header http.Header, body []byte) {
	t.Helper()
	v, err := Spec()
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Check(req, status, header, body); err != nil {
		t.Errorf("OpenAPI: %v\n  body: %.600s", err, body)
	}
}

// Middleware wraps h so that fail hears of every response that does not
// match the description.
func (v *Validator) Middleware(h http.Handler, fail func(error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tw := &teeWriter{ResponseWriter: w}
		// What the validator sees of the request must not be what the
		// handler read or changed.
		req := r.Clone(context.WithoutCancel(r.Context()))
		h.ServeHTTP(tw, r)
		if tw.status == 0 {
			tw.status = http.StatusOK
			tw.header = w.Header().Clone()
		}
		if err := v.Check(req, tw.status, tw.header, tw.body.Bytes()); err != nil {
			fail(fmt.Errorf("%w\n  body: %.600s", err, tw.body.Bytes()))
		}
	})
}

// teeWriter keeps what a handler sent: the status, the headers as they
// were when it was sent, and the body as far as the client took it.
type teeWriter struct {
	http.ResponseWriter
	status int
	header http.Header
	body   bytes.Buffer
}

func (w *teeWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status, w.header = code, w.ResponseWriter.Header().Clone()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *teeWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(b)
	w.body.Write(b[:n])
	return n, err
}

// Flush lets Server-Sent Events through as they are written.
func (w *teeWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// Unwrap lets http.ResponseController reach the deadlines of the real
// writer, which the API's body guard and streams set.
func (w *teeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func init() {
	// The API's text answers are strings to the description.
	for _, ct := range []string{"text/markdown", "text/html", "text/css", "text/javascript", "image/svg+xml"} {
		openapi3filter.RegisterBodyDecoder(ct, openapi3filter.PlainBodyDecoder)
	}
	openapi3filter.RegisterBodyDecoder("text/event-stream", decodeEventStream)
}

// decodeEventStream reads Server-Sent Events as the description's array of
// frames: {"event", "id", "data"} with data parsed as JSON (or the text
// itself when it is not JSON). Frames without
// data (retry:, comments) are not events; a frame cut short by the end of
// the stream (the client left) is not one either.
func decodeEventStream(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	raw, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	text := strings.ReplaceAll(string(raw), "\r\n", "\n")
	frames := strings.Split(text, "\n\n")
	frames = frames[:len(frames)-1] // the last is unterminated (or empty)
	out := []any{}
	for _, f := range frames {
		frame := map[string]any{}
		var data []string
		sc := bufio.NewScanner(strings.NewReader(f))
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		for sc.Scan() {
			line := sc.Text()
			if line == "" || strings.HasPrefix(line, ":") {
				continue
			}
			k, val, _ := strings.Cut(line, ":")
			val = strings.TrimPrefix(val, " ")
			switch k {
			case "data":
				data = append(data, val)
			case "event", "id":
				frame[k] = val
			case "retry":
			default:
				return nil, fmt.Errorf("event stream: unknown field %q in frame %q", k, f)
			}
		}
		if len(data) == 0 {
			continue
		}
		// Data that is not JSON stays a string for the schema to judge:
		// OpenAI's streams end with "data: [DONE]".
		var v any = strings.Join(data, "\n")
		if s := v.(string); json.Valid([]byte(s)) {
			_ = json.Unmarshal([]byte(s), &v)
		}
		if _, ok := frame["event"]; !ok {
			frame["event"] = "message"
		}
		frame["data"] = v
		out = append(out, frame)
	}
	return out, nil
}
