package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/api"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/openaiclient"
)

// agentRuns turns agent runs on, with one agent "claude", on the test's
// recording executor.
func agentRuns() func(*api.Options) {
	return func(o *api.Options) {
		o.Agents = config.AgentsConfig{"claude": {Command: "claude", Output: config.AgentOutputStreamJSON,
			Timeout: config.Duration(5 * time.Minute), MaxTimeout: config.Duration(time.Hour)}}
		o.AgentExecutor = &recordingExecutor{}
	}
}

func (e *testEnv) submitAgentRun(id string) {
	e.t.Helper()
	res := e.post("/v1/agent-runs", tokenAcme, fmt.Sprintf(`{"agent":"claude","prompt":"How do kestrels hover?","job_id":%q}`, id))
	wantStatus(e.t, res, http.StatusAccepted)
}

// agentEvent appends one event of an agent run, as its phases write them.
func (e *testEnv) agentEvent(id, key, typ, data string) {
	e.t.Helper()
	if _, err := e.store.AppendEvents(ctxFor(e.t), acmeKey(id), []store.Event{{Key: key, Type: typ, Data: json.RawMessage(data)}}); err != nil {
		e.t.Fatal(err)
	}
}

// endRun writes the run's answer and closes it with status.
func (e *testEnv) endRun(id, answer string, status store.Status) {
	e.t.Helper()
	ctx := ctxFor(e.t)
	if err := e.store.WriteReport(ctx, acmeKey(id), store.Report{Markdown: answer, Complete: status == store.StatusSucceeded, Details: []byte(`{}`)}); err != nil {
		e.t.Fatal(err)
	}
	e.agentEvent(id, "job:finished", "job."+string(status), fmt.Sprintf(`{"status":%q,"message":"job %s"}`, status, status))
	for _, st := range []store.Status{store.StatusRunning, status} {
		if _, err := e.store.SetStatus(ctx, acmeKey(id), nil, st); err != nil {
			e.t.Fatal(err)
		}
	}
}

// chunk is a chat.completion.chunk as it is on the wire.
type chunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Role             *string `json:"role"`
			Content          *string `json:"content"`
			ReasoningContent *string `json:"reasoning_content"`
		} `json:"delta"`
		Logprobs     any     `json:"logprobs"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Event map[string]any `json:"sandstep_event"`
}

// chunks reads frames until [DONE] and the stream's end, or until the
// stream ends without it (done false).
func chunks(t *testing.T, sse sseReader) (ids []string, cs []chunk, done bool) {
	t.Helper()
	for {
		ev, err := sse.nextEvent()
		if err == io.EOF {
			return ids, cs, false
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.event != "" {
			t.Fatalf("frame with event %q: OpenAI's clients read only frames without a name as chunks", ev.event)
		}
		if ev.data == "[DONE]" {
			if ev, err := sse.next(); err != io.EOF {
				t.Fatalf("after [DONE]: %+v, %v; want the stream closed", ev, err)
			}
			return ids, cs, true
		}
		var c chunk
		if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
			t.Fatalf("data %q: %v", ev.data, err)
		}
		ids, cs = append(ids, ev.id), append(cs, c)
	}
}

func reasoning(c chunk) string {
	if len(c.Choices) != 1 || c.Choices[0].Delta.ReasoningContent == nil {
		return ""
	}
	return *c.Choices[0].Delta.ReasoningContent
}

// TestAgentRunOpenAIChunks: ?format=openai-chunks streams the run's events
// as OpenAI chat-completion chunks, whatever Accept says: the role first,
// one chunk per event with the event told in reasoning_content and its seq
// as the frame's id, the answer as content, finish_reason, [DONE]. It
// follows the run live, resumes from Last-Event-ID, ends a failed or
// cancelled run with finish_reason "error", and is served whole, without
// [DONE] until the end, where answers are buffered.
func TestAgentRunOpenAIChunks(t *testing.T) {
	e := newEnv(t, streaming(20*time.Millisecond), agentRuns())
	e.submitAgentRun("oa-1")
	e.agentEvent("oa-1", "sandbox.created", "sandbox.created", `{"type":"sandbox.created","sandbox_id":"sb1","message":"sandbox sb1 created"}`)
	e.agentEvent("oa-1", "exec.started", "exec.started", `{"type":"exec.started","message":"agent claude started"}`)
	e.agentEvent("oa-1", "out:0:0", "agent.tool_use", `{"type":"agent.tool_use","tool":"Write","message":"using Write","input":{"file_path":"/workspace/artifacts/report.md"}}`)

	ctx, cancel := context.WithTimeout(ctxFor(t), 30*time.Second)
	defer cancel()
	// As OpenAI's clients ask: Accept: application/json.
	_, sse := e.openStream(ctx, "/v1/agent-runs/oa-1/events?format=openai-chunks", "Accept", "application/json")
	if ev, err := sse.next(); err != nil || ev.retry == "" {
		t.Fatalf("first block %+v (%v), want the retry hint", ev, err)
	}
	first, err := sse.nextEvent()
	if err != nil || first.id != "" || first.data == "" {
		t.Fatalf("first chunk %+v (%v)", first, err)
	}
	var role chunk
	if err := json.Unmarshal([]byte(first.data), &role); err != nil || len(role.Choices) != 1 || role.Choices[0].Delta.Role == nil ||
		*role.Choices[0].Delta.Role != "assistant" || role.Choices[0].FinishReason != nil {
		t.Fatalf("first chunk %s (%v), want the role", first.data, err)
	}
	for i, want := range []string{"sandbox.created: sandbox sb1 created\n", "exec.started: agent claude started\n",
		`agent.tool_use: using Write {"file_path":"/workspace/artifacts/report.md"}` + "\n"} {
		ev, err := sse.nextEvent()
		if err != nil {
			t.Fatal(err)
		}
		var c chunk
		if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
			t.Fatal(err)
		}
		if ev.id != fmt.Sprint(i+1) || !strings.HasSuffix(reasoning(c), " "+want) || c.Event["seq"] != float64(i+1) {
			t.Fatalf("chunk %d: id %q %s, want reasoning ending %q", i+1, ev.id, ev.data, want)
		}
		at, err := time.Parse(time.RFC3339Nano, strings.Fields(reasoning(c))[0])
		if err != nil || at.Format("2006-01-02T15:04:05.000Z") != c.Event["time"] {
			t.Fatalf("chunk %d: reasoning %q does not start with the event's time %v", i+1, reasoning(c), c.Event["time"])
		}
	}

	// The run goes on and ends while the client listens.
	e.agentEvent("oa-1", "out:100:0", "agent.result", `{"type":"agent.result","message":"Done: they face the wind"}`)
	e.agentEvent("oa-1", "sandbox.terminated", "sandbox.terminated", `{"type":"sandbox.terminated","message":"sandbox sb1 terminated"}`)
	e.endRun("oa-1", "Done: they face the wind", store.StatusSucceeded)
	ids, cs, done := chunks(t, sse)
	if !done || strings.Join(ids, ",") != "4,5,6,," || len(cs) != 5 {
		t.Fatalf("the rest: ids %q, %d chunks, done %v", ids, len(cs), done)
	}
	if !strings.HasSuffix(reasoning(cs[2]), " job.succeeded: job succeeded\n") {
		t.Errorf("the last event's chunk: %q", reasoning(cs[2]))
	}
	answer, finish := cs[3].Choices[0], cs[4].Choices[0]
	if answer.Delta.Content == nil || *answer.Delta.Content != "Done: they face the wind" || answer.FinishReason != nil {
		t.Errorf("the answer chunk: %+v", cs[3])
	}
	if finish.FinishReason == nil || *finish.FinishReason != "stop" || finish.Delta.Content != nil || finish.Delta.ReasoningContent != nil {
		t.Errorf("the last chunk: %+v", cs[4])
	}
	for _, c := range append(cs, role) {
		if c.ID != "chatcmpl-oa-1" || c.Object != "chat.completion.chunk" || c.Model != "claude" || c.Created == 0 || c.Created != role.Created ||
			len(c.Choices) != 1 || c.Choices[0].Index != 0 || c.Choices[0].Logprobs != nil {
			t.Errorf("chunk %+v: not one chat.completion.chunk of one completion", c)
		}
	}
	job, err := e.store.GetJob(ctx, acmeKey("oa-1"))
	if err != nil || role.Created != job.CreatedAt.Unix() {
		t.Errorf("created %d, want the run's submission %v (%v)", role.Created, job.CreatedAt, err)
	}

	// Resumed from Last-Event-ID: a role again (each stream is a whole
	// message), then what followed.
	_, sse = e.openStream(ctx, "/v1/agent-runs/oa-1/events?format=openai-chunks", "Last-Event-ID", "5")
	ids, cs, done = chunks(t, sse)
	if !done || strings.Join(ids, ",") != ",6,," || cs[0].Choices[0].Delta.Role == nil || !strings.Contains(reasoning(cs[1]), "job.succeeded") {
		t.Fatalf("resumed: ids %q done %v %+v", ids, done, cs)
	}

	// A cancelled run ends with finish_reason "error" and what it printed.
	e.submitAgentRun("oa-2")
	e.agentEvent("oa-2", "out:0:0", "agent.message", `{"type":"agent.message","message":"waiting"}`)
	e.endRun("oa-2", "waiting", store.StatusCancelled)
	_, sse = e.openStream(ctx, "/v1/agent-runs/oa-2/events?format=openai-chunks")
	ids, cs, done = chunks(t, sse)
	if last := cs[len(cs)-1].Choices[0]; !done || last.FinishReason == nil || *last.FinishReason != "error" ||
		*cs[len(cs)-2].Choices[0].Delta.Content != "waiting" || !strings.Contains(reasoning(cs[len(cs)-3]), "job.cancelled") {
		t.Fatalf("cancelled: ids %q done %v %+v", ids, done, cs)
	}

	// Refusals: an unknown format names the parameter; a research job is
	// no agent run.
	wantError(t, e.get("/v1/agent-runs/oa-1/events?format=openai", tokenAcme), http.StatusBadRequest, "invalid_argument", "format")
	wantError(t, e.get("/v1/agent-runs/oa-1/events?format=openai-chunks", tokenAcme, "Last-Event-ID", "x"), http.StatusBadRequest, "invalid_argument", "Last-Event-ID")
	e.submit(tokenAcme, "research-1")
	wantError(t, e.get("/v1/agent-runs/research-1/events?format=openai-chunks", tokenAcme), http.StatusNotFound, "not_found", "")
	wantError(t, e.get("/v1/agent-runs/oa-1/events?format=openai-chunks", tokenGlobex), http.StatusNotFound, "not_found", "")

	// Where answers are buffered (the Lambda): the events there are, and
	// [DONE] only once the run has ended and all is sent.
	lambdaLike := newEnvOn(t, e.store, agentRuns())
	lambdaLike.submitAgentRun("oa-3")
	lambdaLike.agentEvent("oa-3", "sandbox.created", "sandbox.created", `{"type":"sandbox.created","message":"sandbox sb3 created"}`)
	page := func(query string, headers ...string) ([]string, []chunk, bool) {
		res := lambdaLike.get("/v1/agent-runs/oa-3/events?format=openai-chunks"+query, tokenAcme, headers...)
		wantStatus(t, res, http.StatusOK)
		if ct := res.header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
			t.Fatalf("Content-Type %q", ct)
		}
		return chunks(t, sseReaderOf(string(res.body)))
	}
	if ids, _, done := page(""); done || strings.Join(ids, ",") != ",1" {
		t.Fatalf("a running run, buffered: ids %q done %v", ids, done)
	}
	lambdaLike.agentEvent("oa-3", "exec.started", "exec.started", `{"type":"exec.started","message":"agent claude started"}`)
	lambdaLike.endRun("oa-3", "the answer", store.StatusFailed)
	if ids, _, done := page("&limit=1", "Last-Event-ID", "1"); done || strings.Join(ids, ",") != ",2" {
		t.Fatalf("a page of an ended run: ids %q done %v", ids, done)
	}
	ids, cs, done = page("", "Last-Event-ID", "2")
	if !done || strings.Join(ids, ",") != ",3,," || *cs[2].Choices[0].Delta.Content != "the answer" || *cs[3].Choices[0].FinishReason != "error" {
		t.Fatalf("the end of a failed run, buffered: ids %q done %v %+v", ids, done, cs)
	}
}

func sseReaderOf(s string) sseReader { return sseReader{bufio.NewReader(strings.NewReader(s))} }

// TestAgentRunOpenAIChunksOfficialClient: OpenAI's own client (the npm
// package openai) reads the view with its streaming API while the run goes
// on, and accumulates a completion from it: role assistant, the answer as
// content, finish_reason stop; every event reached it as reasoning_content
// in order. Resumed from Last-Event-ID it is a whole completion too.
func TestAgentRunOpenAIChunksOfficialClient(t *testing.T) {
	e := newEnv(t, streaming(20*time.Millisecond), agentRuns())
	e.submitAgentRun("sdk-1")
	e.agentEvent("sdk-1", "sandbox.created", "sandbox.created", `{"type":"sandbox.created","message":"sandbox sb1 created"}`)
	ctx, cancel := context.WithTimeout(ctxFor(t), 50*time.Second)
	defer cancel()
	var lines []string
	final := openaiclient.Read(ctx, t, e.srv.URL, tokenAcme, "sdk-1", "", func(c openaiclient.Chunk) {
		if len(c.Choices) != 1 {
			t.Fatalf("chunk %+v", c)
		}
		if r := c.Choices[0].Delta.ReasoningContent; r != "" {
			lines = append(lines, r)
		}
		if len(lines) == 1 && c.Event["seq"] == float64(1) {
			// The client has the first event: the run goes on and ends
			// while it listens.
			e.agentEvent("sdk-1", "out:0:0", "agent.message", `{"type":"agent.message","message":"The model says: hover"}`)
			e.endRun("sdk-1", "Kestrels face the wind.", store.StatusSucceeded)
		}
	})
	got := strings.Join(lines, "")
	for _, want := range []string{"sandbox.created: sandbox sb1 created\n", "agent.message: The model says: hover\n", "job.succeeded: job succeeded\n"} {
		i := strings.Index(got, want)
		if i < 0 {
			t.Fatalf("reasoning %q lacks %q", got, want)
		}
		got = got[i+len(want):]
	}
	if final.ID != "chatcmpl-sdk-1" || final.Model != "claude" || len(final.Choices) != 1 || final.Choices[0].Message.Role != "assistant" ||
		final.Choices[0].Message.Content == nil || *final.Choices[0].Message.Content != "Kestrels face the wind." || final.Choices[0].FinishReason != "stop" {
		t.Errorf("the client's completion: %+v", final)
	}
	lines = nil
	resumed := openaiclient.Read(ctx, t, e.srv.URL, tokenAcme, "sdk-1", "2", func(c openaiclient.Chunk) {
		if r := c.Choices[0].Delta.ReasoningContent; r != "" {
			lines = append(lines, r)
		}
	})
	if len(lines) != 1 || !strings.Contains(lines[0], "job.succeeded") || resumed.Choices[0].FinishReason != "stop" {
		t.Errorf("resumed after 2: %q, %+v", lines, resumed)
	}
}
