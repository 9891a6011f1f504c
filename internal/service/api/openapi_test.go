package api_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sandstep/sandstep/internal/emulation/samtemplate"
	"github.com/sandstep/sandstep/internal/service/api"
	"github.com/sandstep/sandstep/internal/service/sessions"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/apitest"
)

// The description is OpenAPI 3.1 and kin-openapi accepts it whole: every
// $ref resolves, every schema is a JSON Schema 2020-12 schema, every
// example matches.
func TestOpenAPIDescriptionIsValid(t *testing.T) {
	if _, err := apitest.Spec(); err != nil {
		t.Fatal(err)
	}
	// A broken description is refused, so the check above means something.
	for name, doc := range map[string]string{
		"3.0":        `{"openapi":"3.0.3","info":{"title":"x","version":"1"},"paths":{}}`,
		"bad ref":    `{"openapi":"3.1.0","info":{"title":"x","version":"1"},"paths":{"/a":{"get":{"responses":{"200":{"description":"x","content":{"application/json":{"schema":{"$ref":"#/components/schemas/Nope"}}}}}}}},"components":{"schemas":{"Error":{}}}}`,
		"no Error":   `{"openapi":"3.1.0","info":{"title":"x","version":"1"},"paths":{}}`,
		"not a spec": `[]`,
	} {
		if _, err := apitest.NewValidator([]byte(doc)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// GET /v1/openapi.json is public and serves the embedded description.
func TestOpenAPIIsServed(t *testing.T) {
	e := newEnv(t)
	res := e.get("/v1/openapi.json", "")
	wantStatus(t, res, http.StatusOK)
	if !bytes.Equal(res.body, api.OpenAPI()) {
		t.Fatal("GET /v1/openapi.json is not the embedded description")
	}
	if ct := res.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("Content-Type %q", ct)
	}
	again := e.get("/v1/openapi.json", "", "If-None-Match", res.header.Get("ETag"))
	wantStatus(t, again, http.StatusNotModified)
}

// TestOpenAPIDescribesEveryRoute is the drift check: the routes the
// handler registers, the operations of openapi.json and the HttpApi routes
// of template.yaml (through which API Gateway reaches the ApiFunction) are
// the same set.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	v, err := apitest.Spec()
	if err != nil {
		t.Fatal(err)
	}
	mux := api.RoutePatterns()
	spec := v.Operations()
	tpl, err := samtemplate.Load("../../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	events, _ := tpl.Resources()["ApiFunction"]["Properties"].(map[string]any)["Events"].(map[string]any)
	var gateway []string
	for name, ev := range events {
		e, _ := ev.(map[string]any)
		p, _ := e["Properties"].(map[string]any)
		if e["Type"] != "HttpApi" {
			continue
		}
		method, _ := p["Method"].(string)
		path, _ := p["Path"].(string)
		if method == "" || path == "" {
			t.Errorf("ApiFunction event %s has no Method or Path", name)
		}
		if strings.EqualFold(method, "ANY") {
			gateway = append(gateway, apitest.MuxPath(path))
		} else {
			gateway = append(gateway, strings.ToUpper(method)+" "+apitest.MuxPath(path))
		}
	}
	if len(mux) < 20 {
		t.Fatalf("only %d routes registered: %v", len(mux), mux)
	}
	sets := map[string][]string{"the handler": mux, "openapi.json": spec, "template.yaml": gateway}
	for a, as := range sets {
		for b, bs := range sets {
			for _, r := range as {
				if !slices.Contains(bs, r) {
					t.Errorf("%s has %q, %s does not", a, r, b)
				}
			}
		}
	}
}

// recordFailures collects what the validator finds.
type recordFailures struct {
	mu   sync.Mutex
	errs []error
}

func (f *recordFailures) add(err error) { f.mu.Lock(); f.errs = append(f.errs, err); f.mu.Unlock() }

// A response that does not match the description fails validation: the
// check that every end-to-end answer passes is not one that passes
// everything.
func TestOpenAPIRefusesWrongResponses(t *testing.T) {
	v, err := apitest.Spec()
	if err != nil {
		t.Fatal(err)
	}
	steps := `[` + strings.TrimSuffix(strings.Repeat(`{"id":"search","label":"s","status":"complete","current":0,"total":0},`, 8), ",") + `]`
	goodJob := `{"job_id":"j","status":"running","phase":null,"steps":` + steps + `,"created_at":"2026-01-01T00:00:00.000Z",` +
		`"updated_at":"2026-01-01T00:00:00.000Z","error":null,"fallbacks":[],"cancel_requested":false,` +
		`"usage":{"sandbox_seconds":[],"execs":0,"tokens":[],"search_calls":[],"pages_crawled":0,"agent_runs":0},"cost":null,` + jobJLinks + `}`
	for _, tc := range []struct {
		name, method, path, ct string
		status                 int
		body                   string
		want                   string // in the error; "" = valid
	}{
		{"a valid job", "GET", "/v1/jobs/j", "application/json", 200, goodJob, ""},
		{"status of the wrong type", "GET", "/v1/jobs/j", "application/json", 200, strings.Replace(goodJob, `"status":"running"`, `"status":3`, 1), "status"},
		{"a status no job has", "GET", "/v1/jobs/j", "application/json", 200, strings.Replace(goodJob, `"status":"running"`, `"status":"paused"`, 1), "status"},
		{"a field the description lacks", "GET", "/v1/jobs/j", "application/json", 200, strings.Replace(goodJob, `{"job_id"`, `{"surprise":1,"job_id"`, 1), "surprise"},
		{"a time that is no date-time", "GET", "/v1/jobs/j", "application/json", 200, strings.Replace(goodJob, `"created_at":"2026-01-01T00:00:00.000Z"`, `"created_at":"yesterday"`, 1), "created_at"},
		{"steps missing", "GET", "/v1/jobs/j", "application/json", 200, strings.Replace(goodJob, `"steps":`+steps+`,`, ``, 1), "steps"},
		{"an undocumented success", "GET", "/v1/jobs/j", "application/json", 201, goodJob, "error"},
		{"an error without a code", "GET", "/v1/jobs/j", "application/json", 404, `{"error":{"message":"no"}}`, "code"},
		{"an error in text", "GET", "/v1/jobs/j", "text/plain", 404, "not found", "text/plain"},
		{"a valid limit error", "POST", "/v1/jobs", "application/json", 429,
			`{"error":{"code":"limit_exceeded","message":"m","limit":"jobs","max":2,"scope":"tenant"}}`, ""},
		{"a limit error not naming its limit", "POST", "/v1/jobs", "application/json", 429, `{"error":{"code":"limit_exceeded","message":"m"}}`, "limit"},
		{"a valid stream", "GET", "/v1/jobs/j/events", "text/event-stream", 200,
			"retry: 2000\n\nid: 1\nevent: progress\ndata: {\"seq\":1,\"time\":\"2026-01-01T00:00:00.000Z\",\"stage\":\"search\"}\n\n: keep-alive\n\n" +
				"event: end\ndata: {\"job_id\":\"j\",\"status\":\"succeeded\"}\n\n", ""},
		{"a stream event without its seq", "GET", "/v1/jobs/j/events", "text/event-stream", 200,
			"id: 1\nevent: progress\ndata: {\"time\":\"2026-01-01T00:00:00.000Z\"}\n\n", "seq"},
		{"a stream ending with an unknown status", "GET", "/v1/jobs/j/events", "text/event-stream", 200,
			"event: end\ndata: {\"job_id\":\"j\",\"status\":\"done\"}\n\n", "status"},
		{"a stream whose data is not JSON", "GET", "/v1/jobs/j/events", "text/event-stream", 200,
			"id: 1\nevent: progress\ndata: [DONE]\n\n", "JobEventStream"},
		{"a valid OpenAI chunk stream", "GET", "/v1/agent-runs/j/events?format=openai-chunks", "text/event-stream", 200,
			"retry: 2000\n\n" + chunkFrame(`{"role":"assistant","content":""}`, "null", "") +
				"id: 1\n" + chunkFrame(`{"reasoning_content":"2026-01-01T00:00:00.000Z sandbox.created: made\n"}`, "null", `,"sandstep_event":{"seq":1,"time":"2026-01-01T00:00:00.000Z","type":"sandbox.created"}`) +
				chunkFrame(`{"content":"the answer"}`, "null", "") + chunkFrame(`{}`, `"stop"`, "") + "data: [DONE]\n\n", ""},
		{"a chunk that is not a chat.completion.chunk", "GET", "/v1/agent-runs/j/events?format=openai-chunks", "text/event-stream", 200,
			strings.Replace(chunkFrame(`{"content":"x"}`, "null", ""), "chat.completion.chunk", "chat.completion", 1), "chat.completion.chunk"},
		{"a chunk with a finish reason OpenAI has not", "GET", "/v1/agent-runs/j/events?format=openai-chunks", "text/event-stream", 200,
			chunkFrame(`{}`, `"done"`, ""), "finish_reason"},
		{"a stream ending with other text than [DONE]", "GET", "/v1/agent-runs/j/events?format=openai-chunks", "text/event-stream", 200,
			chunkFrame(`{}`, `"stop"`, "") + "data: [END]\n\n", "[DONE]"},
		{"an unknown route answered 200", "GET", "/v1/nothing", "application/json", 200, `{}`, "matches no operation"},
		{"a page of jobs with a numeric cursor", "GET", "/v1/jobs", "application/json", 200, `{"jobs":[],"next_cursor":5}`, "next_cursor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got recordFailures
			h := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.ct)
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			}), got.add)
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(tc.method, tc.path, nil))
			err := errors.Join(got.errs...)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("a valid response failed: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("a wrong response passed")
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("the failure does not name %q: %v", tc.want, err)
			}
		})
	}
}

// chunkFrame is a Server-Sent Events frame of a chat.completion.chunk with
// the given delta, finish_reason and further members.
func chunkFrame(delta, finish, more string) string {
	return `data: {"id":"chatcmpl-j","object":"chat.completion.chunk","created":1767225600,"model":"claude","choices":[{"index":0,"delta":` +
		delta + `,"logprobs":null,"finish_reason":` + finish + `}]` + more + "}\n\n"
}

func ExampleOpenAPI() {
	fmt.Println(bytes.HasPrefix(api.OpenAPI(), []byte(`{`)))
	// Output: true
}

// The limits the description states are the API's own.
func TestOpenAPINamesTheAPILimits(t *testing.T) {
	v, err := apitest.Spec()
	if err != nil {
		t.Fatal(err)
	}
	doc := v.Document()
	submit := doc.Components.Schemas["SubmitJob"].Value.Properties
	if got := submit["query"].Value.MaxLength; got == nil || *got != api.MaxQueryRunes {
		t.Errorf("query maxLength %v, want %d", got, api.MaxQueryRunes)
	}
	if got := submit["seed_urls"].Value.MaxItems; got == nil || *got != api.MaxSeedURLs {
		t.Errorf("seed_urls maxItems %v, want %d", got, api.MaxSeedURLs)
	}
	if got := submit["seed_urls"].Value.Items.Value.MaxLength; got == nil || *got != api.MaxSeedURLBytes {
		t.Errorf("seed_urls items maxLength %v, want %d", got, api.MaxSeedURLBytes)
	}
	if p := submit["job_id"].Value.Pattern; !strings.Contains(p, fmt.Sprintf("{1,%d}", api.MaxJobIDLen)) {
		t.Errorf("job_id pattern %q, want at most %d characters", p, api.MaxJobIDLen)
	}
	limit := doc.Components.Parameters["Limit"].Value.Schema.Value
	if limit.Max == nil || *limit.Max != store.MaxListPage || limit.Default != float64(api.DefaultListLimit) {
		t.Errorf("list limit max %v default %v, want %d and %d", limit.Max, limit.Default, store.MaxListPage, api.DefaultListLimit)
	}
	events := doc.Components.Parameters["EventLimit"].Value.Schema.Value
	if events.Max == nil || *events.Max != store.MaxEventPage || events.Default != float64(store.DefaultEventPage) {
		t.Errorf("event limit max %v default %v, want %d and %d", events.Max, events.Default, store.MaxEventPage, store.DefaultEventPage)
	}
	var langs []string
	for _, l := range doc.Components.Schemas["RunRequest"].Value.Properties["language"].Value.Enum {
		langs = append(langs, l.(string))
	}
	slices.Sort(langs)
	want := slices.Clone(sessions.Languages)
	slices.Sort(want)
	if !slices.Equal(langs, want) {
		t.Errorf("languages %v, want %v", langs, want)
	}
}

// jobJLinks are the links of job "j" as its answers carry them.
const jobJLinks = `"links":{"self":"/v1/jobs/j","events":"/v1/jobs/j/events","report":"/v1/jobs/j/report","cancel":"/v1/jobs/j/cancel","artifacts":"/v1/jobs/j/artifacts"}`

var mergeOpenAPI = flag.Bool("merge-openapi", false, "fold the openapi.*.json fragments into openapi.json and write it in its canonical form")

// TestOpenAPIFragmentsAreMerged: a branch that adds routes brings
// openapi.<area>.json, a fragment of the description; until it is folded
// into openapi.json this fails and says how:
//
//	go test ./internal/service/api -run TestOpenAPIFragmentsAreMerged -args -merge-openapi
//
// which deep-merges every fragment (objects member by member, string lists
// as unions, the fragment winning elsewhere, each such conflict logged)
// and rewrites openapi.json canonically. The other OpenAPI tests then check
// the result against the handler and template.yaml.
func TestOpenAPIFragmentsAreMerged(t *testing.T) {
	raw, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := apitest.DecodeJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	frags, err := filepath.Glob("openapi.*.json")
	if err != nil {
		t.Fatal(err)
	}
	merged := spec
	for _, f := range frags {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		frag, err := apitest.DecodeJSON(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		merged = apitest.Merge(merged, frag, func(s string) { t.Logf("%s: %s", f, s) })
	}
	if *mergeOpenAPI {
		out, err := apitest.Canonical(merged)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile("openapi.json", out, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("merged %v into openapi.json (%d bytes)", frags, len(out))
		return
	}
	if !reflect.DeepEqual(merged, spec) {
		t.Errorf("openapi.json lacks what %v add: go test ./internal/service/api -run TestOpenAPIFragmentsAreMerged -args -merge-openapi", frags)
	}
	canon, err := apitest.Canonical(spec)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(canon, raw) {
		t.Errorf("openapi.json is not in its canonical form (one member per line, keys sorted): the same command rewrites it")
	}
}

func TestOpenAPIMerge(t *testing.T) {
	base, _ := apitest.DecodeJSON([]byte(`{"paths":{"/a":{"get":{"x":1}}},"components":{"schemas":{"Job":{"required":["a"],"properties":{"a":{}}}}}}`))
	frag, _ := apitest.DecodeJSON([]byte(`{"paths":{"/b":{"get":{}}},"components":{"schemas":{"Job":{"required":["usage"],"properties":{"usage":{"type":"object"}}}}}}`))
	var notes []string
	got, _ := apitest.Canonical(apitest.Merge(base, frag, func(s string) { notes = append(notes, s) }))
	want := "{\n\"components\":{\n\"schemas\":{\n\"Job\":{\n\"properties\":{\n\"a\":{},\n\"usage\":{\n\"type\":\"object\"\n}\n},\n\"required\":[\n\"a\",\n\"usage\"\n]\n}\n}\n},\n" +
		"\"paths\":{\n\"/a\":{\n\"get\":{\n\"x\":1\n}\n},\n\"/b\":{\n\"get\":{}\n}\n}\n}\n"
	if string(got) != want || len(notes) != 0 {
		t.Errorf("merged:\n%s\nnotes %v", got, notes)
	}
	conflict, _ := apitest.DecodeJSON([]byte(`{"paths":{"/a":{"get":{"x":2}}}}`))
	apitest.Merge(base, conflict, func(s string) { notes = append(notes, s) })
	if len(notes) != 1 || !strings.Contains(notes[0], "/paths/a/get/x") && !strings.Contains(notes[0], "/paths//a/get/x") {
		t.Errorf("conflict notes %v", notes)
	}
}

// BenchmarkOpenAPICheck is what validating one answer costs the tests: a
// job's status checked against the description, next to decoding the same
// body as JSON (the baseline).
func BenchmarkOpenAPICheck(b *testing.B) {
	v, err := apitest.Spec()
	if err != nil {
		b.Fatal(err)
	}
	steps := `[` + strings.TrimSuffix(strings.Repeat(`{"id":"crawl","label":"s","status":"complete","current":3,"total":3},`, 8), ",") + `]`
	body := []byte(`{"job_id":"j","status":"succeeded","phase":null,"steps":` + steps + `,"created_at":"2026-01-01T00:00:00.000Z",` +
		`"updated_at":"2026-01-01T00:00:00.000Z","error":null,"fallbacks":["http_mode"],"cancel_requested":false,` +
		`"usage":{"sandbox_seconds":[],"execs":0,"tokens":[],"search_calls":[],"pages_crawled":0,"agent_runs":0},"cost":null,` + jobJLinks + `}`)
	header := http.Header{"Content-Type": {"application/json; charset=utf-8"}}
	req := httptest.NewRequest(http.MethodGet, "/v1/jobs/j", nil)
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			var m map[string]any
			if err := json.Unmarshal(body, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("validate", func(b *testing.B) {
		for b.Loop() {
			if err := v.Check(req, http.StatusOK, header, body); err != nil {
				b.Fatal(err)
			}
		}
	})
}
