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
)

// appendEvents adds progress events numbered from..to to a job, the way the
// phases write them.
func appendEvents(t testing.TB, st *store.Store, jobID string, from, to int) {
	t.Helper()
	var evs []store.Event
	for i := from; i <= to; i++ {
		evs = append(evs, store.Event{
			Key:  fmt.Sprintf("crawl-%d", i),
			Type: "progress",
			Data: json.RawMessage(fmt.Sprintf(`{"stage":"crawl","status":"running","message":"page %d","current":%d,"total":22,"url":"https://example.com/%d?a=1&b=2"}`, i, i, i)),
		})
	}
	seqs, err := st.AppendEvents(ctxFor(t), jobID, evs)
	if err != nil {
		t.Fatal(err)
	}
	if seqs[0] != int64(from) {
		t.Fatalf("seqs %v, want from %d", seqs, from)
	}
}

type eventsPage struct {
	Events []map[string]any `json:"events"`
	Next   int64            `json:"next_after"`
}

func (e *testEnv) eventsPage(query string) eventsPage {
	e.t.Helper()
	res := e.get("/v1/jobs/ev-1/events"+query, tokenAcme)
	wantStatus(e.t, res, http.StatusOK)
	var p eventsPage
	if err := json.Unmarshal(res.body, &p); err != nil {
		e.t.Fatal(err)
	}
	return p
}

func seqsOf(p eventsPage) []int {
	var out []int
	for _, ev := range p.Events {
		out = append(out, int(ev["seq"].(float64)))
	}
	return out
}

func TestEventsPagination(t *testing.T) {
	e := newEnv(t)
	e.submit(tokenAcme, "ev-1")
	if p := e.eventsPage(""); len(p.Events) != 0 || p.Next != 0 {
		t.Fatalf("no events yet: %+v", p)
	}
	appendEvents(t, e.store, acmeKey("ev-1"), 1, 7)

	p := e.eventsPage("?limit=3")
	if got := fmt.Sprint(seqsOf(p)); got != "[1 2 3]" || p.Next != 3 {
		t.Fatalf("first page %s next %d", got, p.Next)
	}
	ev := p.Events[1]
	if ev["stage"] != "crawl" || ev["status"] != "running" || ev["message"] != "page 2" || ev["current"] != 2.0 ||
		ev["total"] != 22.0 || ev["url"] != "https://example.com/2?a=1&b=2" || ev["type"] != "progress" {
		t.Fatalf("event = %v", ev)
	}
	if _, err := time.Parse(time.RFC3339, ev["time"].(string)); err != nil {
		t.Fatalf("time: %v", err)
	}
	p = e.eventsPage(fmt.Sprintf("?after=%d&limit=3", p.Next))
	if got := fmt.Sprint(seqsOf(p)); got != "[4 5 6]" || p.Next != 6 {
		t.Fatalf("second page %s next %d", got, p.Next)
	}
	p = e.eventsPage(fmt.Sprintf("?after=%d&limit=3", p.Next))
	if got := fmt.Sprint(seqsOf(p)); got != "[7]" || p.Next != 7 {
		t.Fatalf("third page %s next %d", got, p.Next)
	}
	p = e.eventsPage("?after=7")
	if len(p.Events) != 0 || p.Next != 7 {
		t.Fatalf("past the end: %+v", p)
	}

	for _, tc := range []struct{ query, field string }{
		{"?after=-1", "after"}, {"?after=x", "after"}, {"?after=1.5", "after"},
		{"?limit=0", "limit"}, {"?limit=1001", "limit"}, {"?limit=ten", "limit"},
	} {
		wantError(t, e.get("/v1/jobs/ev-1/events"+tc.query, tokenAcme), http.StatusBadRequest, "invalid_argument", tc.field)
	}
}

// sseEvent is one block of a text/event-stream.
type sseEvent struct {
	id, event, data string
	comments        []string
	retry           string
}

type sseReader struct{ r *bufio.Reader }

// next reads one block (up to a blank line); io.EOF when the stream ended.
func (s sseReader) next() (sseEvent, error) {
	var ev sseEvent
	seen := false
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			if err == io.EOF && line == "" && !seen {
				return ev, io.EOF
			}
			return ev, fmt.Errorf("stream cut inside a block (%q): %w", line, err)
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			if seen {
				return ev, nil
			}
			continue
		}
		seen = true
		if c, ok := strings.CutPrefix(line, ":"); ok {
			ev.comments = append(ev.comments, strings.TrimSpace(c))
			continue
		}
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimPrefix(v, " ")
		switch k {
		case "id":
			ev.id = v
		case "event":
			ev.event = v
		case "data":
			ev.data += v
		case "retry":
			ev.retry = v
		}
	}
}

// nextEvent skips blocks that only carry comments or the retry hint.
func (s sseReader) nextEvent() (sseEvent, error) {
	for {
		ev, err := s.next()
		if err != nil || ev.event != "" || ev.data != "" {
			return ev, err
		}
	}
}

// openStream starts GET .../events as Server-Sent Events.
func (e *testEnv) openStream(ctx context.Context, path string, headers ...string) (*http.Response, sseReader) {
	e.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tokenAcme)
	req.Header.Set("Accept", "text/event-stream")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { res.Body.Close() })
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(res.Body)
		e.t.Fatalf("stream answered %d %s: %s", res.StatusCode, res.Header.Get("Content-Type"), b)
	}
	return res, sseReader{bufio.NewReader(res.Body)}
}

func streaming(poll time.Duration) func(*api.Options) {
	return func(o *api.Options) {
		o.Streaming = true
		o.PollInterval = poll
	}
}

func TestEventsStreamResumesAndEnds(t *testing.T) {
	e := newEnv(t, streaming(20*time.Millisecond))
	ctx := ctxFor(t)
	e.submit(tokenAcme, "sse-1")
	appendEvents(t, e.store, acmeKey("sse-1"), 1, 3)

	// Last-Event-ID wins over after: a reconnecting EventSource keeps its
	// original URL.
	_, sse := e.openStream(ctx, "/v1/jobs/sse-1/events?after=0", "Last-Event-ID", "1")
	for _, want := range []string{"2", "3"} {
		ev, err := sse.nextEvent()
		if err != nil {
			t.Fatal(err)
		}
		var data map[string]any
		if err := json.Unmarshal([]byte(ev.data), &data); err != nil {
			t.Fatalf("data %q: %v", ev.data, err)
		}
		if ev.id != want || ev.event != "progress" || fmt.Sprint(data["seq"]) != want || data["message"] != "page "+want {
			t.Fatalf("event %+v, want id %s", ev, want)
		}
	}

	// The job goes on and ends while the client listens.
	appendEvents(t, e.store, acmeKey("sse-1"), 4, 4)
	if _, err := e.store.SetStatus(ctx, acmeKey("sse-1"), nil, store.StatusRunning); err != nil {
		t.Fatal(err)
	}
	appendEvents(t, e.store, acmeKey("sse-1"), 5, 5)
	if _, err := e.store.SetStatus(ctx, acmeKey("sse-1"), nil, store.StatusSucceeded); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"4", "5"} {
		ev, err := sse.nextEvent()
		if err != nil || ev.id != want || ev.event != "progress" {
			t.Fatalf("event %+v (%v), want id %s", ev, err, want)
		}
	}
	ev, err := sse.nextEvent()
	if err != nil || ev.event != "end" || ev.id != "" || ev.data != `{"job_id":"sse-1","status":"succeeded"}` {
		t.Fatalf("end event %+v (%v)", ev, err)
	}
	if ev, err := sse.next(); err != io.EOF {
		t.Fatalf("after end: %+v, %v; want the stream closed", ev, err)
	}

	// A client reconnecting after the end gets the remaining events (none)
	// and the end at once.
	_, sse = e.openStream(ctx, "/v1/jobs/sse-1/events", "Last-Event-ID", "4")
	if ev, err := sse.nextEvent(); err != nil || ev.id != "5" {
		t.Fatalf("resumed at %+v (%v), want 5", ev, err)
	}
	if ev, err := sse.nextEvent(); err != nil || ev.event != "end" {
		t.Fatalf("got %+v (%v), want end", ev, err)
	}

	wantError(t, e.get("/v1/jobs/sse-1/events", tokenAcme, "Accept", "text/event-stream", "Last-Event-ID", "x"),
		http.StatusBadRequest, "invalid_argument", "Last-Event-ID")

	// Without streaming (the Lambda), the same request gets JSON.
	lambdaLike := newEnvOn(t, e.store)
	res := lambdaLike.get("/v1/jobs/sse-1/events?after=3", tokenAcme, "Accept", "text/event-stream")
	wantStatus(t, res, http.StatusOK)
	var p eventsPage
	if err := json.Unmarshal(res.body, &p); err != nil || fmt.Sprint(seqsOf(p)) != "[4 5]" || p.Next != 5 {
		t.Fatalf("JSON events = %s (%v)", res.body, err)
	}
}

func TestEventsStreamHeartbeatAndClientGone(t *testing.T) {
	e := newEnv(t, streaming(time.Hour), func(o *api.Options) { api.SetHeartbeat(o, 10*time.Millisecond) })
	e.submit(tokenAcme, "hb-1")
	ctx, cancel := context.WithCancel(ctxFor(t))
	_, sse := e.openStream(ctx, "/v1/jobs/hb-1/events")
	ev, err := sse.next()
	if err != nil || ev.retry == "" {
		t.Fatalf("first block %+v (%v), want the retry hint", ev, err)
	}
	for {
		ev, err := sse.next()
		if err != nil {
			t.Fatal(err)
		}
		if len(ev.comments) > 0 && ev.comments[0] == "keep-alive" {
			break
		}
		if ev.event != "" {
			t.Fatalf("unexpected event %+v", ev)
		}
	}
	cancel()
	// The handler notices the client left and logs the request as done.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(e.logs.String(), `"path":"/v1/jobs/hb-1/events"`) {
		if time.Now().After(deadline) {
			t.Fatalf("the stream did not end after the client left; logs:\n%s", e.logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestEventsStreamBoundedDuration(t *testing.T) {
	e := newEnv(t, streaming(20*time.Millisecond), func(o *api.Options) { o.Server.StreamMaxDuration = config.Duration(200 * time.Millisecond) })
	e.submit(tokenAcme, "max-1")
	appendEvents(t, e.store, acmeKey("max-1"), 1, 2)
	_, sse := e.openStream(ctxFor(t), "/v1/jobs/max-1/events")
	var ids []string
	for {
		ev, err := sse.nextEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.event == "end" {
			t.Fatalf("end sent for a job that has not ended")
		}
		ids = append(ids, ev.id)
	}
	if strings.Join(ids, ",") != "1,2" {
		t.Fatalf("events before the stream closed: %v", ids)
	}
}
