package report

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/version"
)

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Options tune a Client. The zero value is usable.
type Options struct {
	// MaxTokens bounds the answer; 0 leaves it to the server.
	MaxTokens int
	// Timeout bounds one model's whole answer. Default 5 min.
	Timeout time.Duration
	// HTTPClient sends the requests; nil means http.DefaultClient.
	HTTPClient *http.Client
}

// Client talks to an OpenAI-compatible chat-completions API and tries its
// candidate models in order.
type Client struct {
	base   string
	key    string
	models []string
	opt    Options
}

// ErrNoModel is returned by FromConfig when no model is configured: the
// report is to be extractive.
var ErrNoModel = errors.New("report: no model configured (research.llm.base_url is empty)")

// NewClient returns a client of the API at baseURL (the part before
// /chat/completions, such as "https://llm.example.com/v1"). apiKey is sent
// as a bearer token; "" sends none.
func NewClient(baseURL, apiKey string, models []string, opt Options) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		// Not quoted: the URL could hold credentials.
		return nil, errors.New("report: the model base URL must be http(s)://host[/path] without a query or fragment")
	}
	if len(models) == 0 {
		return nil, errors.New("report: no candidate model")
	}
	for _, m := range models {
		if strings.TrimSpace(m) == "" {
			return nil, errors.New("report: empty model name")
		}
	}
	if opt.Timeout <= 0 {
		opt.Timeout = 5 * time.Minute
	}
	if opt.HTTPClient == nil {
		opt.HTTPClient = http.DefaultClient
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), key: apiKey, models: append([]string(nil), models...), opt: opt}, nil
}

// FromConfig returns the client [research.llm] describes, reading the key
// through getenv (os.Getenv when nil) from the variable api_key_env names.
// With no base_url it returns ErrNoModel.
func FromConfig(c config.ResearchLLMConfig, getenv func(string) string) (*Client, error) {
	if c.BaseURL == "" {
		return nil, ErrNoModel
	}
	if getenv == nil {
		getenv = os.Getenv
	}
	var key string
	if c.APIKeyEnv != "" {
		var err error
		if key, err = config.ResearchSecret("research.llm.api_key_env", c.APIKeyEnv, getenv); err != nil {
			return nil, err
		}
	}
	return NewClient(c.BaseURL, key, c.Models, Options{MaxTokens: c.MaxTokens, Timeout: c.Timeout.D()})
}

// Models returns the candidate models in order.
func (c *Client) Models() []string { return append([]string(nil), c.models...) }

// String keeps the key out of %v.
func (c *Client) String() string { return fmt.Sprintf("report.Client(%s, %v)", c.base, c.models) }

// Completion is a model's answer.
type Completion struct {
	// Text is what the model wrote; on a broken-off answer, what it wrote
	// before it broke off.
	Text string
	// Model is the candidate that wrote Text.
	Model string
	// FinishReason is the server's: "stop", or "length" when MaxTokens cut
	// the answer.
	FinishReason string
	// Usage is reported by servers that honour stream_options; nil
	// otherwise.
	Usage *Usage
	// Failed are the candidates that failed before Model answered.
	Failed []*ModelError
	// answered: the server took the request (a 2xx) and so read, and
	// bills, its input, whatever text came of it.
	answered bool
}

// Usage counts tokens.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

var (
	// ErrNoAnswer matches the error of Stream when no candidate wrote
	// anything: the caller builds the extractive report instead.
	ErrNoAnswer = errors.New("no model answered")
	// ErrPartial matches the error of Stream when a model broke off after
	// it had started writing; Completion.Text holds what it wrote.
	ErrPartial = errors.New("the answer broke off")
)

// ModelError is one candidate's failure. Its text never holds the API key.
type ModelError struct {
	Model string
	// Status is the HTTP status; 0 when there was no answer or the failure
	// came inside the stream.
	Status int
	// Partial is set when the model had written something.
	Partial bool
	Detail  string
	err     error
}

func (e *ModelError) Error() string {
	s := "model " + e.Model + ": "
	if e.Status != 0 {
		s += fmt.Sprintf("HTTP %d %s", e.Status, http.StatusText(e.Status))
		if e.Detail != "" {
			s += ": " + e.Detail
		}
	} else {
		s += e.Detail
	}
	if e.Partial {
		s += " (after part of the answer)"
	}
	return s
}

func (e *ModelError) Unwrap() error { return e.err }

func (e *ModelError) Is(target error) bool { return target == ErrPartial && e.Partial }

// fallback reports whether the next candidate may do better: anything but a
// refused key, which is the same for every model. A 400 or 404 is often
// model specific (an unknown model, a context too long for this one).
func (e *ModelError) fallback() bool {
	return !e.Partial && e.Status != http.StatusUnauthorized && e.Status != http.StatusForbidden
}

// Error is the failure of every candidate tried.
type Error struct{ Attempts []*ModelError }

func (e *Error) Error() string {
	parts := make([]string, len(e.Attempts))
	for i, a := range e.Attempts {
		parts[i] = a.Error()
	}
	return "report: " + ErrNoAnswer.Error() + ": " + strings.Join(parts, "; ")
}

func (e *Error) Is(target error) bool { return target == ErrNoAnswer }

func (e *Error) Unwrap() []error {
	out := make([]error, len(e.Attempts))
	for i, a := range e.Attempts {
		out[i] = a
	}
	return out
}

// Stream asks the candidates in order for an answer to messages, streamed:
// onChunk (if not nil) gets each piece of text as it comes, so the caller
// can save the answer as it grows. A candidate that fails before writing
// anything (429, 5xx, a connection error, a timeout, an empty answer, or a
// 400/404 that may be its own) hands over to the next; a refused key (401,
// 403) ends the search at once.
//
// Once a model has written something it is not replaced: if it then fails,
// Stream returns what it wrote with an error matching ErrPartial, and the
// caller decides. When nothing was written the error matches ErrNoAnswer.
func (c *Client) Stream(ctx context.Context, messages []Message, onChunk func(text string)) (Completion, error) {
	var failed []*ModelError
	for _, model := range c.models {
		comp, err := c.attempt(ctx, model, messages, onChunk)
		meter(ctx, model, messages, comp)
		if err == nil {
			comp.Failed = failed
			return comp, nil
		}
		if ctx.Err() != nil && !err.Partial {
			failed = append(failed, err)
			return Completion{Failed: failed}, fmt.Errorf("report: %w: %w", ErrNoAnswer, context.Cause(ctx))
		}
		if err.Partial {
			comp.Failed = failed
			return comp, fmt.Errorf("report: %w", err)
		}
		failed = append(failed, err)
		if !err.fallback() {
			break
		}
	}
	return Completion{Failed: failed}, &Error{Attempts: failed}
}

type chatRequest struct {
	Model         string    `json:"model"`
	Messages      []Message `json:"messages"`
	Stream        bool      `json:"stream"`
	MaxTokens     int       `json:"max_tokens,omitempty"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// streamChunk is one server-sent event of a streamed completion; a
// non-streamed answer has the same shape with message instead of delta.
type streamChunk struct {
	Choices []struct {
		Delta        struct{ Content string } `json:"delta"`
		Message      struct{ Content string } `json:"message"`
		FinishReason *string                  `json:"finish_reason"`
	} `json:"choices"`
	Usage *Usage `json:"usage"`
	// Some servers report a failure inside a 200 stream.
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

const maxEventBytes = 1 << 20

func (c *Client) attempt(ctx context.Context, model string, messages []Message, onChunk func(string)) (Completion, *ModelError) {
	ctx, cancel := context.WithTimeout(ctx, c.opt.Timeout)
	defer cancel()
	comp := Completion{Model: model}
	var text strings.Builder
	fail := func(status int, detail string, cause error) (Completion, *ModelError) {
		if c.key != "" {
			detail = strings.ReplaceAll(detail, c.key, "[redacted]")
		}
		comp.Text = text.String()
		return comp, &ModelError{Model: model, Status: status, Partial: text.Len() > 0, Detail: detail, err: cause}
	}
	body := chatRequest{Model: model, Messages: messages, Stream: true, MaxTokens: c.opt.MaxTokens}
	body.StreamOptions.IncludeUsage = true
	payload, err := json.Marshal(body)
	if err != nil {
		return fail(0, err.Error(), err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/chat/completions", bytes.NewReader(payload))
	if err != nil {
		return fail(0, err.Error(), nil)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("User-Agent", "sandstep/"+version.Version+" (+https://github.com/sandstep/sandstep)")
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	resp, err := c.opt.HTTPClient.Do(req)
	if err != nil {
		// Transport errors quote the URL, never headers; the cause is kept
		// only for context errors.
		return fail(0, err.Error(), ctx.Err())
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return fail(resp.StatusCode, errorDetail(b), nil)
	}
	comp.answered = true
	emit := func(s string) {
		if s == "" {
			return
		}
		text.WriteString(s)
		if onChunk != nil {
			onChunk(s)
		}
	}
	if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(ct, "application/json") {
		// The server ignored stream:true and sent the whole answer.
		var ch streamChunk
		if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&ch); err != nil {
			return fail(0, "undecodable answer: "+err.Error(), ctx.Err())
		}
		if ch.Error != nil {
			return fail(0, "error in the answer: "+shorten(ch.Error.Message, 300), nil)
		}
		for _, choice := range ch.Choices[:min(1, len(ch.Choices))] {
			emit(choice.Message.Content)
			if choice.FinishReason != nil {
				comp.FinishReason = *choice.FinishReason
			}
		}
		comp.Usage = ch.Usage
		if text.Len() == 0 {
			return fail(0, "empty answer", nil)
		}
		comp.Text = text.String()
		return comp, nil
	}

	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventBytes)
	var (
		data     []string
		done     bool
		finished bool
	)
	dispatch := func() *string {
		if len(data) == 0 {
			return nil
		}
		ev := strings.Join(data, "\n")
		data = data[:0]
		if strings.TrimSpace(ev) == "[DONE]" {
			done = true
			return nil
		}
		var ch streamChunk
		if err := json.Unmarshal([]byte(ev), &ch); err != nil {
			s := "undecodable stream event: " + shorten(ev, 200)
			return &s
		}
		if ch.Error != nil {
			s := "error in the stream: " + shorten(ch.Error.Message, 300)
			return &s
		}
		if len(ch.Choices) > 0 {
			emit(ch.Choices[0].Delta.Content)
			if fr := ch.Choices[0].FinishReason; fr != nil && *fr != "" {
				comp.FinishReason, finished = *fr, true
			}
		}
		if ch.Usage != nil {
			comp.Usage = ch.Usage
		}
		return nil
	}
	for !done && sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if msg := dispatch(); msg != nil {
				return fail(0, *msg, nil)
			}
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
		// Comments (": keep-alive"), event: and id: lines carry nothing
		// for us.
	}
	if !done {
		if msg := dispatch(); msg != nil {
			return fail(0, *msg, nil)
		}
	}
	if err := sc.Err(); err != nil && !done {
		return fail(0, "reading the stream: "+err.Error(), ctx.Err())
	}
	switch {
	case text.Len() == 0:
		return fail(0, "empty answer", nil)
	case !done && !finished:
		return fail(0, "the stream ended before [DONE]", ctx.Err())
	}
	comp.Text = text.String()
	return comp, nil
}

// errorDetail picks the message out of an OpenAI-style error body
// ({"error":{"message":...}}, {"detail":...}, {"message":...}) or else
// returns the start of the text.
func errorDetail(b []byte) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Detail  json.RawMessage `json:"detail"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(b, &v) == nil {
		var o struct{ Message string }
		var s string
		switch {
		case json.Unmarshal(v.Error, &o) == nil && o.Message != "":
			return shorten(o.Message, 300)
		case json.Unmarshal(v.Error, &s) == nil && s != "":
			return shorten(s, 300)
		case json.Unmarshal(v.Detail, &s) == nil && s != "":
			return shorten(s, 300)
		case v.Message != "":
			return shorten(v.Message, 300)
		}
	}
	return shorten(string(bytes.ToValidUTF8(b, nil)), 300)
}

// Meter is told the tokens of every answer a model wrote (whole or broken
// off): as the server's usage reports them, or, from a server that reports
// none, estimated from the text (about four characters a token).
type Meter func(model string, input, output int64, estimated bool)

type meterKey struct{}

// WithMeter returns a context whose Stream calls report to m: the job
// that asked for them counts its tokens, whichever client serves it.
func WithMeter(ctx context.Context, m Meter) context.Context {
	return context.WithValue(ctx, meterKey{}, m)
}

func meter(ctx context.Context, model string, messages []Message, comp Completion) {
	m, _ := ctx.Value(meterKey{}).(Meter)
	if m == nil {
		return
	}
	if u := comp.Usage; u != nil {
		m(model, int64(u.PromptTokens), int64(u.CompletionTokens), false)
		return
	}
	if comp.Text == "" && !comp.answered {
		return // refused or failed before the server took it: nothing billed
	}
	// An empty answer was still read: its input counts.
	in := 0
	for _, msg := range messages {
		in += len(msg.Content)
	}
	m(model, int64(estimateTokens(in)), int64(estimateTokens(len(comp.Text))), true)
}

// estimateTokens is the usual rough count of tokens in n bytes of text.
func estimateTokens(n int) int { return (n + 3) / 4 }
