package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/sandstep/sandstep/internal/service/agents"
	"github.com/sandstep/sandstep/internal/service/store"
)

// An agent run's events as OpenAI chat-completion chunks
// (GET /v1/agent-runs/{id}/events?format=openai-chunks), the way Janus
// surfaces a sandboxed agent to a chat client: every event is one chunk
// whose delta's reasoning_content tells it in a line, the agent's final
// answer is the content, and the run's end is the finish_reason. A client
// of the OpenAI API reads it with its streaming API as it would a
// completion it asked for with "stream": true.
//
// The stream is always Server-Sent Events, whatever Accept says (OpenAI's
// clients send Accept: application/json with a streamed request too):
// frames without an event name, an event's chunk with its seq as the id,
// so that Last-Event-ID resumes it, and "data: [DONE]" last. Every
// connection starts with a chunk holding the role, so that a resumed
// stream is a whole message to a client that accumulates one.

const formatOpenAIChunks = "openai-chunks"

// Finish reasons of the last chunk: the run succeeded, or it failed or was
// cancelled (the reasoning before says which, and why).
const (
	finishStop  = "stop"
	finishError = "error"
)

// maxToolInput bounds the tool input a reasoning line quotes.
const maxToolInput = 500

type chatChunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
	// Event is the sandstep event this chunk tells of, as the events
	// route shows it; not an OpenAI member, so OpenAI clients pass it by.
	Event map[string]json.RawMessage `json:"sandstep_event,omitempty"`
}

type chunkChoice struct {
	Index        int        `json:"index"`
	Delta        chunkDelta `json:"delta"`
	Logprobs     *struct{}  `json:"logprobs"`
	FinishReason *string    `json:"finish_reason"`
}

type chunkDelta struct {
	Role             string  `json:"role,omitempty"`
	Content          *string `json:"content,omitempty"`
	ReasoningContent string  `json:"reasoning_content,omitempty"`
}

// openAIFrames writes a run's stream as chat-completion chunks; one
// completion per run: its id, created time and model (the agent's name)
// are the same on every chunk of every connection.
type openAIFrames struct {
	s       *server
	id      string
	created int64
	model   string
}

func (s *server) openAIFramesOf(job store.Job) openAIFrames {
	var req agents.Request
	_ = json.Unmarshal(job.Request, &req) // a run's request, written by submitAgentRun
	return openAIFrames{s: s, id: "chatcmpl-" + job.ClientID, created: job.CreatedAt.Unix(), model: req.Agent}
}

func (f openAIFrames) write(buf *bytes.Buffer, id string, c chatChunk) error {
	c.ID, c.Object, c.Created, c.Model = f.id, "chat.completion.chunk", f.created, f.model
	data, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if id != "" {
		fmt.Fprintf(buf, "id: %s\n", id)
	}
	fmt.Fprintf(buf, "data: %s\n\n", data)
	return nil
}

func oneChoice(d chunkDelta, finish string) []chunkChoice {
	c := chunkChoice{Delta: d}
	if finish != "" {
		c.FinishReason = &finish
	}
	return []chunkChoice{c}
}

func (f openAIFrames) begin(buf *bytes.Buffer) error {
	fmt.Fprintf(buf, "retry: %d\n\n", reconnectDelay)
	empty := ""
	return f.write(buf, "", chatChunk{Choices: oneChoice(chunkDelta{Role: "assistant", Content: &empty}, "")})
}

func (f openAIFrames) event(buf *bytes.Buffer, ev store.Event) error {
	view := jobEventView(ev)
	return f.write(buf, strconv.FormatInt(ev.Seq, 10), chatChunk{
		Choices: oneChoice(chunkDelta{ReasoningContent: reasoningLine(view)}, ""), Event: view,
	})
}

// reasoningLine is an event as a line of reasoning: its time, its type and
// what it says ("2026-01-02T15:04:05.000Z sandbox.created: sandbox x
// created"); a tool use adds its input, cut short.
func reasoningLine(view map[string]json.RawMessage) string {
	str := func(k string) string {
		var s string
		_ = json.Unmarshal(view[k], &s)
		return s
	}
	var b strings.Builder
	b.WriteString(str("time") + " " + str("type"))
	msg := str("message")
	if msg == "" {
		msg = str("data") // a payload cut short is kept as a string
	}
	if msg != "" {
		b.WriteString(": " + msg)
	}
	if in := view["input"]; len(in) > 0 {
		var c bytes.Buffer
		if json.Compact(&c, in) == nil {
			s := c.String()
			if len(s) > maxToolInput {
				s = strings.ToValidUTF8(s[:maxToolInput], "") + "…"
			}
			b.WriteString(" " + s)
		}
	}
	if string(view["truncated"]) == "true" {
		b.WriteString(" (truncated)")
	}
	b.WriteByte('\n')
	return b.String()
}

// end writes the answer as content (what a cancelled or failed run printed
// until then, when it kept that), the finish reason and [DONE].
func (f openAIFrames) end(ctx context.Context, buf *bytes.Buffer, job store.Job) error {
	rep, err := f.s.opts.Store.GetReport(ctx, job.ID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if rep.Markdown != "" {
		answer := rep.Markdown
		if err := f.write(buf, "", chatChunk{Choices: oneChoice(chunkDelta{Content: &answer}, "")}); err != nil {
			return err
		}
	}
	finish := finishError
	if viewStatus(job) == store.StatusSucceeded {
		finish = finishStop
	}
	if err := f.write(buf, "", chatChunk{Choices: oneChoice(chunkDelta{}, finish)}); err != nil {
		return err
	}
	buf.WriteString("data: [DONE]\n\n")
	return nil
}

// openAIChunks is the events route with format=openai-chunks: a live
// stream where the server streams, else (API Gateway buffers answers
// whole) the events there are, up to limit (default the most a page
// holds), as one answer in the same frames, ended with [DONE] only once
// the run has ended and all is sent; the client then asks again with
// Last-Event-ID.
func (s *server) openAIChunks(w http.ResponseWriter, r *http.Request, c *call) error {
	after, limit, err := eventParams(r)
	if err != nil {
		return err
	}
	if r.URL.Query().Get("limit") == "" {
		limit = store.MaxEventPage
	}
	if after, err = intParam(r.Header.Get("Last-Event-ID"), "Last-Event-ID", 0, math.MaxInt64, after); err != nil {
		return err
	}
	job, err := s.job(r, c)
	if err != nil {
		return err
	}
	f := s.openAIFramesOf(job)
	if s.opts.Streaming {
		return s.stream(w, r, job, after, f)
	}
	// The job is read before its events: when it had ended, they are all
	// there.
	evs, err := s.opts.Store.ListEvents(r.Context(), job.ID, after, limit)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := f.begin(&buf); err != nil {
		return err
	}
	for _, ev := range evs {
		if err := f.event(&buf, ev); err != nil {
			return err
		}
	}
	if viewStatus(job).Terminal() && len(evs) < limit {
		if err := f.end(r.Context(), &buf, job); err != nil {
			return err
		}
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf.Bytes())
	return nil
}

// agentEvents is GET /v1/agent-runs/{id}/events: the events routes' pages
// and stream, or with format=openai-chunks the OpenAI view.
func (s *server) agentEvents(w http.ResponseWriter, r *http.Request, c *call) error {
	switch f := r.URL.Query().Get("format"); f {
	case "":
		return s.events(w, r, c)
	case formatOpenAIChunks:
		return s.openAIChunks(w, r, c)
	default:
		return invalid("format", "format %q is not known; the one format is %q (leave it out for sandstep's own events)", f, formatOpenAIChunks)
	}
}
