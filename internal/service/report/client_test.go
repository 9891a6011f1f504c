package report_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/report"
)

const apiKey = "sk-test-0123456789abcdef-secret"

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// behaviour is how the fake server answers for one model.
type behaviour func(w http.ResponseWriter, r *http.Request, model string)

// fakeOpenAI is an OpenAI-compatible /v1/chat/completions server. It checks
// what a real one checks (path, bearer key, JSON body) and answers each
// model as behaviours says; it records the models asked, in order.
type fakeOpenAI struct {
	*httptest.Server
	mu        sync.Mutex
	asked     []string
	requests  []map[string]any
	behaviour map[string]behaviour
	key       string
}

func newFake(t *testing.T, key string, b map[string]behaviour) *fakeOpenAI {
	t.Helper()
	f := &fakeOpenAI{behaviour: b, key: key}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			http.Error(w, `{"error":{"message":"not found","type":"invalid_request_error"}}`, http.StatusNotFound)
			return
		}
		if auth := r.Header.Get("Authorization"); f.key != "" && auth != "Bearer "+f.key {
			// The worst a server could do: echo the credentials it got.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s","type":"invalid_request_error","code":"invalid_api_key"}}`, strings.TrimPrefix(auth, "Bearer "))
			return
		}
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body["stream"] != true {
			http.Error(w, `{"error":{"message":"bad body"}}`, http.StatusBadRequest)
			return
		}
		model, _ := body["model"].(string)
		f.mu.Lock()
		f.asked = append(f.asked, model)
		f.requests = append(f.requests, body)
		f.mu.Unlock()
		be, ok := f.behaviour[model]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"error":{"message":"The model %s does not exist","type":"invalid_request_error","code":"model_not_found"}}`, model)
			return
		}
		be(w, r, model)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeOpenAI) models() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.asked...)
}

func (f *fakeOpenAI) client(t *testing.T, key string, models ...string) *report.Client {
	t.Helper()
	c, err := report.NewClient(f.URL+"/v1/", key, models, report.Options{MaxTokens: 512, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func event(w http.ResponseWriter, data string) {
	fmt.Fprintf(w, "data: %s\n\n", data)
	w.(http.Flusher).Flush()
}

func sseHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
}

func chunk(model, content string, finish any) string {
	c := map[string]any{
		"id": "chatcmpl-abc", "object": "chat.completion.chunk", "created": 1700000000, "model": model, "system_fingerprint": "fp_1",
		"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": content}, "logprobs": nil, "finish_reason": finish}},
		"usage":   nil,
	}
	b, _ := json.Marshal(c)
	return string(b)
}

// streams answers like OpenAI: a role-only first delta, content pieces, a
// finish chunk, a usage chunk with no choices, then [DONE]; with a
// keep-alive comment and an event: line of the kind proxies add.
func streams(pieces ...string) behaviour {
	return func(w http.ResponseWriter, r *http.Request, model string) {
		sseHeaders(w)
		io.WriteString(w, ": keep-alive\n\n")
		event(w, `{"id":"chatcmpl-abc","object":"chat.completion.chunk","created":1700000000,"model":"`+model+`","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}`)
		for _, p := range pieces {
			event(w, chunk(model, p, nil))
		}
		event(w, `{"id":"chatcmpl-abc","object":"chat.completion.chunk","created":1700000000,"model":"`+model+`","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}`)
		io.WriteString(w, "event: usage\n")
		event(w, `{"id":"chatcmpl-abc","object":"chat.completion.chunk","created":1700000000,"model":"`+model+`","choices":[],"usage":{"prompt_tokens":120,"completion_tokens":7,"total_tokens":127}}`)
		event(w, "[DONE]")
	}
}

func status(code int, body string) behaviour {
	return func(w http.ResponseWriter, r *http.Request, model string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		io.WriteString(w, body)
	}
}

const rateLimited = `{"error":{"message":"Rate limit reached for requests","type":"requests","param":null,"code":"rate_limit_exceeded"}}`

// breaksAfter streams pieces, then the connection dies.
func breaksAfter(pieces ...string) behaviour {
	return func(w http.ResponseWriter, r *http.Request, model string) {
		sseHeaders(w)
		event(w, `{"id":"x","object":"chat.completion.chunk","model":"`+model+`","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`)
		for _, p := range pieces {
			event(w, chunk(model, p, nil))
		}
		panic(http.ErrAbortHandler)
	}
}

func TestStreamParsesSSE(t *testing.T) {
	f := newFake(t, apiKey, map[string]behaviour{"m1": streams("Solid", "-state ", "batteries [1].")})
	var got []string
	comp, err := f.client(t, apiKey, "m1").Stream(ctx(t), []report.Message{{Role: "user", Content: "hi"}}, func(s string) { got = append(got, s) })
	if err != nil {
		t.Fatal(err)
	}
	if comp.Text != "Solid-state batteries [1]." || comp.Model != "m1" || comp.FinishReason != "stop" || len(comp.Failed) != 0 {
		t.Errorf("completion = %+v", comp)
	}
	if !reflect.DeepEqual(got, []string{"Solid", "-state ", "batteries [1]."}) {
		t.Errorf("chunks = %q", got)
	}
	if comp.Usage == nil || *comp.Usage != (report.Usage{PromptTokens: 120, CompletionTokens: 7, TotalTokens: 127}) {
		t.Errorf("usage = %+v", comp.Usage)
	}
	req := f.requests[0]
	if req["max_tokens"] != float64(512) || req["stream_options"].(map[string]any)["include_usage"] != true {
		t.Errorf("request = %v", req)
	}
}

func TestRateLimitedModelHandsOver(t *testing.T) {
	f := newFake(t, apiKey, map[string]behaviour{
		"a": status(http.StatusTooManyRequests, rateLimited),
		"b": streams("from b"),
	})
	comp, err := f.client(t, apiKey, "a", "b").Stream(ctx(t), []report.Message{{Role: "user", Content: "q"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if comp.Text != "from b" || comp.Model != "b" || len(comp.Failed) != 1 || comp.Failed[0].Model != "a" || comp.Failed[0].Status != 429 {
		t.Fatalf("completion = %+v", comp)
	}
	if got := comp.Failed[0].Error(); got != "model a: HTTP 429 Too Many Requests: Rate limit reached for requests" {
		t.Errorf("error = %s", got)
	}
	if !reflect.DeepEqual(f.models(), []string{"a", "b"}) {
		t.Errorf("asked %v", f.models())
	}
}

// 5xx, an error event, an empty answer and an unknown model all hand over
// before any output.
func TestFailuresBeforeOutputHandOver(t *testing.T) {
	errorEvent := func(w http.ResponseWriter, r *http.Request, model string) {
		sseHeaders(w)
		event(w, `{"error":{"message":"Model overloaded","type":"server_error"}}`)
	}
	f := newFake(t, apiKey, map[string]behaviour{
		"down":    status(http.StatusServiceUnavailable, `{"detail":"No instances available"}`),
		"broken":  status(http.StatusInternalServerError, "<html>oops</html>"),
		"errorev": errorEvent,
		"empty":   streams(),
		"good":    streams("ok"),
	})
	comp, err := f.client(t, apiKey, "down", "broken", "errorev", "empty", "missing", "good").Stream(ctx(t), nil, nil)
	if err != nil || comp.Text != "ok" || comp.Model != "good" {
		t.Fatalf("completion %+v, err %v", comp, err)
	}
	var got []string
	for _, e := range comp.Failed {
		got = append(got, e.Error())
	}
	want := []string{
		"model down: HTTP 503 Service Unavailable: No instances available",
		"model broken: HTTP 500 Internal Server Error: <html>oops</html>",
		"model errorev: error in the stream: Model overloaded",
		"model empty: empty answer",
		"model missing: HTTP 404 Not Found: The model missing does not exist",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("failures:\n%s", strings.Join(got, "\n"))
	}
}

// A model that does not answer within the timeout hands over too.
func TestSilentModelTimesOut(t *testing.T) {
	hang := func(w http.ResponseWriter, r *http.Request, model string) { <-r.Context().Done() }
	f := newFake(t, apiKey, map[string]behaviour{"a": hang, "b": hang})
	c, err := report.NewClient(f.URL+"/v1", apiKey, []string{"a", "b"}, report.Options{Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	comp, err := c.Stream(ctx(t), nil, nil)
	if !errors.Is(err, report.ErrNoAnswer) || len(comp.Failed) != 2 || comp.Failed[0].Model != "a" || comp.Failed[1].Model != "b" {
		t.Fatalf("comp %+v, err %v", comp, err)
	}
	for _, e := range comp.Failed {
		if !errors.Is(e, context.DeadlineExceeded) {
			t.Errorf("%v is not a deadline", e)
		}
	}
}

// Once a model has written something it is not replaced: what it wrote
// comes back with an error the caller can tell apart.
func TestFailureAfterOutputReturnsPartialText(t *testing.T) {
	for name, be := range map[string]behaviour{
		"connection dies": breaksAfter("## Executive ", "summary\n\nPartial"),
		"stream ends early": func(w http.ResponseWriter, r *http.Request, model string) {
			sseHeaders(w)
			event(w, chunk(model, "## Executive ", nil))
			event(w, chunk(model, "summary\n\nPartial", nil))
		},
		"error event": func(w http.ResponseWriter, r *http.Request, model string) {
			sseHeaders(w)
			event(w, chunk(model, "## Executive summary\n\nPartial", nil))
			event(w, `{"error":{"message":"upstream disconnected"}}`)
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t, apiKey, map[string]behaviour{"a": be, "b": streams("never asked")})
			var streamed strings.Builder
			comp, err := f.client(t, apiKey, "a", "b").Stream(ctx(t), nil, func(s string) { streamed.WriteString(s) })
			if !errors.Is(err, report.ErrPartial) || errors.Is(err, report.ErrNoAnswer) {
				t.Fatalf("err = %v", err)
			}
			var me *report.ModelError
			if !errors.As(err, &me) || !me.Partial || me.Model != "a" {
				t.Fatalf("err = %#v", err)
			}
			if comp.Text != "## Executive summary\n\nPartial" || comp.Model != "a" || streamed.String() != comp.Text {
				t.Fatalf("completion %+v, streamed %q", comp, streamed.String())
			}
			if !reflect.DeepEqual(f.models(), []string{"a"}) {
				t.Errorf("asked %v", f.models())
			}
		})
	}
}

// When every candidate fails the caller gets ErrNoAnswer and no text, and
// builds the extractive report.
func TestEveryModelFailing(t *testing.T) {
	f := newFake(t, apiKey, map[string]behaviour{
		"a": status(http.StatusTooManyRequests, rateLimited),
		"b": status(http.StatusBadGateway, "Bad Gateway"),
	})
	c := f.client(t, apiKey, "a", "b")
	md, comp, err := report.Generate(ctx(t), c, "solid-state batteries", report.Select(corpus, report.PromptOptions{}), nil)
	if !errors.Is(err, report.ErrNoAnswer) || errors.Is(err, report.ErrPartial) || md != "" || comp.Text != "" {
		t.Fatalf("md %q, comp %+v, err %v", md, comp, err)
	}
	var all *report.Error
	if !errors.As(err, &all) || len(all.Attempts) != 2 || all.Attempts[0].Status != 429 || all.Attempts[1].Status != 502 {
		t.Fatalf("err = %#v", err)
	}
	if want := "report: no model answered: model a: HTTP 429 Too Many Requests: Rate limit reached for requests; model b: HTTP 502 Bad Gateway: Bad Gateway"; err.Error() != want {
		t.Errorf("err = %s", err)
	}
	md = full("solid-state batteries", corpus)
	if !strings.Contains(md, "## Key findings") {
		t.Fatal("no extractive report")
	}
}

// A refused key is the same for every model: no other is asked, and the
// key is not in the error even when the server echoes it.
func TestRefusedKeyStopsAndNeverLeaks(t *testing.T) {
	f := newFake(t, apiKey, map[string]behaviour{"a": streams("x"), "b": streams("y")})
	const wrong = "sk-wrong-0000-must-not-leak"
	c := f.client(t, wrong, "a", "b")
	comp, err := c.Stream(ctx(t), nil, nil)
	if !errors.Is(err, report.ErrNoAnswer) || len(comp.Failed) != 1 {
		t.Fatalf("comp %+v, err %v", comp, err)
	}
	if strings.Contains(err.Error(), wrong) || !strings.Contains(err.Error(), "HTTP 401 Unauthorized: Incorrect API key provided: [redacted]") {
		t.Fatalf("err = %v", err)
	}
	if s := fmt.Sprintf("%v %+v %s", c, c, c); strings.Contains(s, wrong) {
		t.Fatalf("the client prints its key: %s", s)
	}
	if len(f.models()) != 0 {
		t.Errorf("asked %v", f.models())
	}
}

// A server that ignores stream:true and sends the whole answer works too.
func TestNonStreamingAnswer(t *testing.T) {
	f := newFake(t, apiKey, map[string]behaviour{"a": func(w http.ResponseWriter, r *http.Request, model string) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","object":"chat.completion","model":"a","choices":[{"index":0,"message":{"role":"assistant","content":"whole answer"},"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`)
	}})
	var streamed string
	comp, err := f.client(t, apiKey, "a").Stream(ctx(t), nil, func(s string) { streamed += s })
	if err != nil || comp.Text != "whole answer" || streamed != comp.Text || comp.FinishReason != "length" || comp.Usage.TotalTokens != 5 {
		t.Fatalf("comp %+v, err %v", comp, err)
	}
}

func TestCancelledContext(t *testing.T) {
	f := newFake(t, apiKey, map[string]behaviour{"a": streams("x")})
	c, cancel := context.WithCancel(ctx(t))
	cancel()
	_, err := f.client(t, apiKey, "a", "b").Stream(c, nil, nil)
	if !errors.Is(err, report.ErrNoAnswer) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

// Generate gives the model the sources with their numbers; Finish makes
// its answer the report: our title, its own title and references gone,
// invented citations removed, the citation check and our sources list
// appended.
func TestGenerate(t *testing.T) {
	answer := "# My title\n\n## Executive summary\n\nThey are safer [2] and offer a higher energy density [1][9].\n\n## Key findings\n\n- Costly [1, 7].\n- Made up [8].\n\n" +
		"## Evidence and context\n\nSee [2](https://made.up/).\n\n## Implications and trade-offs\n\nCost.\n\n## Open questions and next steps\n\nScale.\n\n## References\n\n1. https://made.up/\n"
	f := newFake(t, apiKey, map[string]behaviour{"m": streams(answer[:40], answer[40:])})
	var streamed strings.Builder
	given := report.Select(corpus, report.PromptOptions{MaxSources: 3})
	body, comp, err := report.Generate(ctx(t), f.client(t, apiKey, "m"), "Solid-state batteries?", given, func(s string) { streamed.WriteString(s) })
	if err != nil || comp.Model != "m" || streamed.String() != answer {
		t.Fatalf("comp %+v, err %v", comp, err)
	}
	if strings.Contains(body, "My title") || strings.Contains(body, "References") || !strings.Contains(body, "density [1][9]") {
		t.Fatalf("body:\n%s", body)
	}
	res := report.Finish(ctx(t), "Solid-state batteries?", body, given, nil, report.FinishOptions{})
	md := res.Markdown
	wantBody := "# Solid-state batteries?\n\n## Executive summary\n\nThey are safer [2] and offer a higher energy density [1].\n\n## Key findings\n\n- Costly [1] *(unverified)*.\n- Made up *(unverified)*.\n\n" +
		"## Evidence and context\n\nSee [2].\n\n## Implications and trade-offs\n\nCost.\n\n## Open questions and next steps\n\nScale.\n\n## Citation check\n\n"
	wantList := "## Sources\n\n" +
		"- [1] [Solid-state battery](<https://en.wikipedia.org/wiki/Solid-state_battery>): web page, 710 characters\n" +
		"- [2] [Solid-state vs lithium-ion: a comparison](<https://example.com/ssb-vs-li-ion>): web page, 381 characters\n" +
		"- [3] [Toyota plans solid-state EVs](<https://news.example.org/toyota>): web page, 157 characters\n"
	if !strings.HasPrefix(md, wantBody) || !strings.HasSuffix(md, wantList) {
		t.Fatalf("report:\n%s\nwant:\n%s…\n%s", md, wantBody, wantList)
	}
	// "They are safer [2]" and "higher energy density [1][9]" are claims the sources
	// make; "Costly [1, 7]" is not what [1] says ("expensive"), and "Made
	// up [8]" cites nothing that exists. "See [2]." says nothing.
	c := res.Details.Citations
	if c.Total != 3 || c.Supported != 1 || c.Unsupported != 2 || c.Removed != 3 || *c.Accuracy != 0.3333 {
		t.Errorf("citations = %+v", c)
	}
	// The prompt: system instructions, then the question and the three
	// crawled sources (MaxSources prefers them) with their numbers.
	msgs := f.requests[0]["messages"].([]any)
	user := msgs[1].(map[string]any)["content"].(string)
	if msgs[0].(map[string]any)["role"] != "system" || !strings.HasPrefix(user, "Question: Solid-state batteries?\n\nSources:\n\n[1] Solid-state battery\nURL: https://en.wikipedia.org/wiki/Solid-state_battery\n") ||
		!strings.Contains(user, "\n[3] Toyota plans solid-state EVs\n") || strings.Contains(user, "[4]") {
		t.Errorf("prompt:\n%s", user)
	}
}

func TestFromConfig(t *testing.T) {
	if _, err := report.FromConfig(config.ResearchLLMConfig{}, nil); !errors.Is(err, report.ErrNoModel) {
		t.Fatalf("no base URL: %v", err)
	}
	f := newFake(t, "", map[string]behaviour{"m": func(w http.ResponseWriter, r *http.Request, model string) {
		if r.Header.Get("Authorization") != "" {
			http.Error(w, "unexpected key", http.StatusBadRequest)
			return
		}
		streams("local model")(w, r, model)
	}})
	cfg := config.ResearchLLMConfig{BaseURL: f.URL + "/v1", APIKeyEnv: "TEST_LLM_KEY", Models: []string{"m"}, Timeout: config.Duration(time.Minute), MaxTokens: 100}
	_, err := report.FromConfig(cfg, func(string) string { return "" })
	if err == nil || !strings.Contains(err.Error(), "TEST_LLM_KEY is not set") {
		t.Fatalf("missing key: %v", err)
	}
	cfg.APIKeyEnv = "" // a local server without keys
	c, err := report.FromConfig(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if comp, err := c.Stream(ctx(t), nil, nil); err != nil || comp.Text != "local model" {
		t.Fatalf("comp %+v, err %v", comp, err)
	}
}

func TestNewClientRefusesBadSettings(t *testing.T) {
	for _, tc := range []struct {
		base   string
		models []string
	}{
		{"ftp://x", []string{"m"}},
		{"https://x.example/v1?key=" + apiKey, []string{"m"}},
		{"https://x.example/v1", nil},
		{"https://x.example/v1", []string{""}},
	} {
		_, err := report.NewClient(tc.base, apiKey, tc.models, report.Options{})
		if err == nil || strings.Contains(err.Error(), apiKey) {
			t.Errorf("NewClient(%q, %q) = %v", tc.base, tc.models, err)
		}
	}
}

// noUsage streams pieces and ends as a server that reports no usage does
// (many OpenAI-compatible servers ignore stream_options).
func noUsage(pieces ...string) behaviour {
	return func(w http.ResponseWriter, r *http.Request, model string) {
		sseHeaders(w)
		for _, p := range pieces {
			event(w, chunk(model, p, nil))
		}
		event(w, chunk(model, "", "stop"))
		event(w, "[DONE]")
	}
}

// emptyWithUsage answers nothing but reports the prompt's tokens.
func emptyWithUsage(prompt int) behaviour {
	return func(w http.ResponseWriter, r *http.Request, model string) {
		sseHeaders(w)
		event(w, chunk(model, "", "stop"))
		event(w, fmt.Sprintf(`{"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":0,"total_tokens":%d}}`, prompt, prompt))
		event(w, "[DONE]")
	}
}

// The meter gets each model's tokens as the server reports them; from a
// server that reports none, an estimate from the text (four bytes a token)
// marked estimated, also for an answer broken off; nothing for a model
// that refused before answering.
func TestMeterCountsReportedAndEstimatedTokens(t *testing.T) {
	type count struct {
		model         string
		input, output int64
		estimated     bool
	}
	msgs := []report.Message{{Role: "system", Content: strings.Repeat("s", 40)}, {Role: "user", Content: strings.Repeat("u", 39)}}
	for _, tc := range []struct {
		name   string
		b      map[string]behaviour
		models []string
		want   []count
	}{
		{"reported", map[string]behaviour{"m1": streams("Solid", "-state")}, []string{"m1"}, []count{{"m1", 120, 7, false}}},
		{"estimated", map[string]behaviour{"m1": noUsage("Solid", "-state ", "cells")}, []string{"m1"}, []count{{"m1", 20, 5, true}}},
		{"broken off", map[string]behaviour{"m1": breaksAfter("abcdefgh")}, []string{"m1"}, []count{{"m1", 20, 2, true}}},
		{"refused, then another", map[string]behaviour{"m1": status(429, rateLimited), "m2": noUsage("ok")}, []string{"m1", "m2"}, []count{{"m2", 20, 1, true}}},
		// An empty answer read the prompt all the same: its input counts.
		{"empty, then another", map[string]behaviour{"m1": noUsage(), "m2": noUsage("ok")}, []string{"m1", "m2"}, []count{{"m1", 20, 0, true}, {"m2", 20, 1, true}}},
		{"empty with usage", map[string]behaviour{"m1": emptyWithUsage(33), "m2": noUsage("ok")}, []string{"m1", "m2"}, []count{{"m1", 33, 0, false}, {"m2", 20, 1, true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, apiKey, tc.b)
			var got []count
			c := report.WithMeter(ctx(t), func(model string, in, out int64, est bool) { got = append(got, count{model, in, out, est}) })
			_, _ = f.client(t, apiKey, tc.models...).Stream(c, msgs, nil)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("metered %+v, want %+v", got, tc.want)
			}
		})
	}
}
