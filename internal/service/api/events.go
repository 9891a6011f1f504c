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
	"time"

	"github.com/sandstep/sandstep/internal/service/store"
)

// eventsView is a page of events, a job's or a session's: the same shape
// for both.
type eventsView struct {
	Events []map[string]json.RawMessage `json:"events"`
	// NextAfter is the after= value that continues after this page: the
	// seq of its last event, or the after= given when it is empty.
	NextAfter int64 `json:"next_after"`
}

// eventView flattens an event: seq, type and time, then the members of its
// Data object (a job's stage, status, message and optional current, total,
// url; a session's sandbox_id, reason, volume...). Data that is not an
// object (a truncated payload is a string) is kept under "data". seq and
// time are always the event's own; a type in Data wins over Type.
func eventView(seq int64, typ string, at time.Time, data json.RawMessage, truncated bool) map[string]json.RawMessage {
	m := make(map[string]json.RawMessage, 8)
	if len(data) > 0 {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(data, &obj); err == nil && obj != nil {
			for k, v := range obj {
				m[k] = v
			}
		} else if json.Valid(data) {
			m["data"] = data
		}
	}
	if _, ok := m["type"]; !ok && typ != "" {
		m["type"] = mustJSON(typ)
	}
	if truncated {
		m["truncated"] = json.RawMessage("true")
	}
	m["seq"] = json.RawMessage(strconv.FormatInt(seq, 10))
	m["time"] = mustJSON(formatTime(at))
	return m
}

func jobEventView(ev store.Event) map[string]json.RawMessage {
	return eventView(ev.Seq, ev.Type, ev.At, ev.Data, ev.Truncated)
}

// mustJSON encodes a string, which cannot fail.
func mustJSON(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// eventParams reads ?after= and ?limit=.
func eventParams(r *http.Request) (after int64, limit int, err error) {
	q := r.URL.Query()
	limit = store.DefaultEventPage
	if v := q.Get("after"); v != "" {
		after, err = strconv.ParseInt(v, 10, 64)
		if err != nil || after < 0 {
			return 0, 0, invalid("after", "after must be a whole number, 0 or more (the seq of the last event seen)")
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.MaxEventPage {
			return 0, 0, invalid("limit", "limit must be a whole number from 1 to %d", store.MaxEventPage)
		}
		limit = n
	}
	return after, limit, nil
}

// events is GET /v1/jobs/{id}/events: a page of events as JSON or, where
// streaming is on and the client asks for it, Server-Sent Events.
func (s *server) events(w http.ResponseWriter, r *http.Request, c *call) error {
	after, limit, err := eventParams(r)
	if err != nil {
		return err
	}
	stream := s.opts.Streaming && acceptQ(r.Header.Get("Accept"), "text/event-stream") > 0
	if stream {
		// A reconnecting EventSource sends the id of the last event it got;
		// the URL it reconnects with still carries the original after.
		if after, err = intParam(r.Header.Get("Last-Event-ID"), "Last-Event-ID", 0, math.MaxInt64, after); err != nil {
			return err
		}
	}
	job, err := s.job(r, c)
	if err != nil {
		return err
	}
	if stream {
		return s.stream(w, r, job, after, progressFrames{})
	}
	evs, err := s.opts.Store.ListEvents(r.Context(), job.ID, after, limit)
	if err != nil {
		return err
	}
	v := eventsView{Events: make([]map[string]json.RawMessage, len(evs)), NextAfter: after}
	for i, ev := range evs {
		v.Events[i] = jobEventView(ev)
		v.NextAfter = ev.Seq
	}
	return writeJSON(w, http.StatusOK, v)
}

// reconnectDelay is the retry hint sent to EventSource clients, in ms.
const reconnectDelay = 2000

// frames is how a stream writes events: sandstep's own "progress" and
// "end" events, or OpenAI's chat-completion chunks (openai.go).
type frames interface {
	// begin is written once, first on every connection.
	begin(buf *bytes.Buffer) error
	// event is written for every event, its seq the frame's id.
	event(buf *bytes.Buffer, ev store.Event) error
	// end is written once the job has ended and every event is sent.
	end(ctx context.Context, buf *bytes.Buffer, job store.Job) error
}

// progressFrames are the events routes' own: "progress" events carrying
// the event view, then one "end" event with the job's status.
type progressFrames struct{}

func (progressFrames) begin(buf *bytes.Buffer) error {
	fmt.Fprintf(buf, "retry: %d\n\n", reconnectDelay)
	return nil
}

func (progressFrames) event(buf *bytes.Buffer, ev store.Event) error {
	data, err := json.Marshal(jobEventView(ev))
	if err != nil {
		return err
	}
	fmt.Fprintf(buf, "id: %d\nevent: progress\ndata: %s\n\n", ev.Seq, data)
	return nil
}

func (progressFrames) end(_ context.Context, buf *bytes.Buffer, job store.Job) error {
	data, err := json.Marshal(cancelView{JobID: job.ClientID, Status: viewStatus(job)})
	if err != nil {
		return err
	}
	fmt.Fprintf(buf, "event: end\ndata: %s\n\n", data)
	return nil
}

// stream sends the job's events after seq as Server-Sent Events in the
// given frames, polling the store, until the job has ended and everything
// is sent (then the frames' end), the client goes away or stops reading,
// or stream_max_duration is reached (the client then reconnects with
// Last-Event-ID).
func (s *server) stream(w http.ResponseWriter, r *http.Request, job store.Job, after int64, f frames) error {
	ctx := r.Context()
	rc := http.NewResponseController(w)
	// A stream is exempt from the server's timeouts, by design: its read
	// deadline is lifted (it would cancel the request's context), and each
	// write gets a deadline of its own, so a client that stops reading is
	// let go after one write timeout while a reading one stays, up to
	// the stream's maximum life. Writers that have no deadlines say so,
	// which is fine.
	if err := rc.SetReadDeadline(time.Time{}); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return fmt.Errorf("lift read deadline: %w", err)
	}
	writeTimeout := s.opts.Server.WriteTimeout.D()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // a proxy in front must not hold events back
	w.WriteHeader(http.StatusOK)

	var buf bytes.Buffer
	if err := f.begin(&buf); err != nil {
		return err
	}
	send := func() error {
		if err := rc.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return err
		}
		if buf.Len() > 0 {
			if _, err := w.Write(buf.Bytes()); err != nil {
				return err
			}
			buf.Reset()
		}
		return rc.Flush()
	}

	maxT := time.NewTimer(s.opts.Server.StreamMaxDuration.D())
	defer maxT.Stop()
	heartbeat := time.NewTicker(s.opts.Server.StreamHeartbeat.D())
	defer heartbeat.Stop()
	poll := time.NewTimer(s.opts.PollInterval)
	defer poll.Stop()
	cursor := after
	for {
		// The job is read before the events: when it is terminal here,
		// every event it wrote before ending is in the pages that follow.
		for job.LastEventSeq > cursor {
			evs, err := s.opts.Store.ListEvents(ctx, job.ID, cursor, store.MaxEventPage)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			if len(evs) == 0 {
				break
			}
			for _, ev := range evs {
				if err := f.event(&buf, ev); err != nil {
					return err
				}
				cursor = ev.Seq
			}
			if err := send(); err != nil {
				return nil // the client went away
			}
		}
		if viewStatus(job).Terminal() {
			if err := f.end(ctx, &buf, job); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			_ = send()
			return nil
		}
		if err := send(); err != nil {
			return nil
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-maxT.C:
				// Ended cleanly: the client reconnects with the id of
				// the last event it got and misses nothing.
				buf.WriteString(": the stream reached its maximum duration; reconnect with Last-Event-ID\n\n")
				_ = send()
				return nil
			case <-heartbeat.C:
				buf.WriteString(": keep-alive\n\n")
				if err := send(); err != nil {
					return nil
				}
			case <-poll.C:
				break wait
			}
		}
		poll.Reset(s.opts.PollInterval)
		var err error
		if job, err = s.opts.Store.GetJob(ctx, job.ID); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}
