package agents

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/sandstep/sandstep/internal/service/direct"
	"github.com/sandstep/sandstep/internal/service/store"
)

// MaxProgressEvents bounds the events a run's output becomes.
const MaxProgressEvents = 20000

// readBytes is the most output one read takes.
const readBytes = 256 << 10

// stopGrace is how long past its timeout an agent may still be seen
// running before the run stops waiting for it: timeout(1) in the sandbox
// ends it first.
const stopGrace = 30 * time.Second

// run supervises the agent for one slice: it reads stdout from the offset
// the state machine carries, turns each complete line into events (keyed by
// offset, so a retried slice adds none twice), and returns done once the
// agent ended and its output is read. A cancel request stops it; so does
// the run's budget, which stops the agent and reads what it wrote until
// then. The model tokens the slice's lines report are its usage record,
// keyed by the slice's number (a retried slice replaces it).
func (c *call) run(ctx context.Context, in Input) (out Output, err error) {
	out = Output{SandboxID: in.SandboxID, ExecID: in.ExecID, Offset: in.Offset, Slice: in.Slice + 1}
	if in.SandboxID == "" || !direct.ValidExecID(in.ExecID) {
		return out, &BadInput{Message: "run needs the sandbox_id and exec_id provision returned"}
	}
	ag := c.r.o.Agents[c.req.Agent]
	var used store.Usage
	defer func() {
		if uerr := c.putUsage(ctx, usageRun(in.Slice), used); uerr != nil && err == nil {
			err = uerr
		}
	}()
	sliceEnd := c.r.o.Now().Add(c.r.o.Slice)
	st, err := c.r.o.Direct.Status(ctx, c.caller, in.SandboxID, in.ExecID)
	if err != nil {
		return out, fmt.Errorf("the agent's exec: %w", err)
	}
	hardEnd := st.StartedAt.Add(c.timeout() + stopGrace)
	var checked time.Time
	for {
		if err := c.cancelled(ctx); err != nil {
			return out, err
		}
		if now := c.r.o.Now(); !st.Done && now.Sub(checked) >= budgetCheck {
			checked = now
			if err := c.budget(ctx, in); err != nil {
				return out, err
			}
		}
		ch, err := c.r.o.Direct.Output(ctx, c.caller, in.SandboxID, in.ExecID, direct.StreamStdout, out.Offset, readBytes, c.r.o.Poll)
		if err != nil {
			return out, fmt.Errorf("read the agent's output: %w", err)
		}
		st.Done = ch.Done
		n := len(ch.Data)
		if !ch.Done {
			// Only whole lines: the rest is read again with what follows,
			// unless one line fills a whole read.
			if i := bytes.LastIndexByte(ch.Data, '\n'); i >= 0 {
				n = i + 1
			} else if n < readBytes {
				n = 0
			}
		}
		if err := c.lineEvents(ctx, ag.Output, out.Offset, ch.Data[:n]); err != nil {
			return out, err
		}
		for _, line := range bytes.Split(ch.Data[:n], []byte{'\n'}) {
			if u, ok := resultTokens(ag.Output, line, c.req.Agent); ok {
				used.Add(u)
			}
		}
		out.Offset += int64(n)
		if ch.Done && out.Offset >= ch.Next {
			out.Done, out.ExitCode, out.TimedOut = true, ch.ExitCode, ch.TimedOut
			return out, nil
		}
		now := c.r.o.Now()
		if now.After(hardEnd) {
			out.Done, out.TimedOut, out.ExitCode = true, true, -1
			return out, nil
		}
		if now.After(sliceEnd) {
			return out, nil
		}
	}
}

// budget stops the agent once the run's budget is reached: the job
// records budget_exhausted (once) and the agent's processes end, so the
// slice reads the rest of its output and returns done; collect then keeps
// what it wrote and fails the run, naming the limit. A run stopped before
// is stopped again (a retried slice), which is harmless.
func (c *call) budget(ctx context.Context, in Input) error {
	over := ""
	if slices.Contains(c.job.Fallbacks, FallbackBudgetExhausted) {
		over = "reached before"
	} else {
		var err error
		if over, err = c.overBudget(ctx, in.SandboxID); err != nil || over == "" {
			return err
		}
		if _, err := c.r.o.Store.UpdateJob(ctx, c.job.ID, store.JobUpdate{AddFallbacks: []string{FallbackBudgetExhausted}}); err != nil {
			return err
		}
		if err := c.event(ctx, "budget:exhausted", EventBudget, map[string]any{
			"limit": over, "message": "the run's budget is reached (" + over + "): the agent is stopped; what it wrote so far is kept",
		}); err != nil {
			return err
		}
		c.log.Info("agent run budget reached", "limit", over)
	}
	return c.stopAgent(ctx, in.SandboxID, in.ExecID)
}

// lineEvents appends the events of the lines in data, which starts at
// offset of stdout.
func (c *call) lineEvents(ctx context.Context, format string, offset int64, data []byte) error {
	if c.job.LastEventSeq >= MaxProgressEvents {
		// The output is still read (the answer is at its end) but no
		// longer kept as events: one says so.
		if len(data) == 0 {
			return nil
		}
		return c.event(ctx, "events-capped", EventMessage, map[string]any{
			"message": fmt.Sprintf("more output than %d events: the rest is not shown as events", MaxProgressEvents), "truncated_at": offset,
		})
	}
	var evs []store.Event
	now := c.r.o.Now()
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line = data[:i]
		}
		for n, p := range parseLine(format, line) {
			p.data["type"] = p.typ
			b, err := json.Marshal(p.data)
			if err != nil {
				return err
			}
			evs = append(evs, store.Event{Key: fmt.Sprintf("out:%d:%d", offset, n), Type: p.typ, Data: b, At: now})
		}
		offset += int64(len(line)) + 1
		data = data[min(len(line)+1, len(data)):]
	}
	if len(evs) == 0 {
		return nil
	}
	_, err := c.r.o.Store.AppendEvents(ctx, c.job.ID, evs)
	return err
}
