package agents

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/sandstep/sandstep/internal/service/artifacts"
	"slices"
	"strconv"
	"strings"

	"github.com/sandstep/sandstep/internal/service/direct"
	"github.com/sandstep/sandstep/internal/service/store"
)

// Result is what a run ended with, kept with the job beside the agent's
// final answer (the job's report: Markdown is the answer, Details this).
type Result struct {
	Agent string `json:"agent"`
	// ExitCode is the agent's exit status; nil when it had not ended
	// (cancelled, or its sandbox was lost).
	ExitCode *int `json:"exit_code"`
	TimedOut bool `json:"timed_out"`
	// IsError is the agent's own verdict (stream-json's is_error).
	IsError   bool           `json:"is_error"`
	Artifacts []ArtifactInfo `json:"artifacts"`
	Skipped   []ArtifactInfo `json:"skipped"`
}

// ArtifactInfo is an artifact as listed; Reason says why one was skipped.
type ArtifactInfo struct {
	Path        string `json:"path"`
	Size        int64  `json:"size"`
	ContentType string `json:"content_type,omitempty"`
	Reason      string `json:"reason,omitempty"`
}

// answerBytes is how much of the end of stdout the final answer is read
// from.
const answerBytes = 1 << 20

// collect ends a finished run: the artifacts and the result go to the
// store, then an agent that failed fails the job.
func (c *call) collect(ctx context.Context, in Input) (Output, error) {
	stopped := slices.Contains(c.job.Fallbacks, FallbackBudgetExhausted)
	res, err := c.gather(ctx, in.SandboxID, in.ExecID, !stopped)
	if err != nil {
		return Output{}, err
	}
	out := Output{SandboxID: in.SandboxID, ExecID: in.ExecID, Done: true}
	switch {
	case stopped:
		limit := "its budget"
		if b := c.req.Budget; b != nil {
			limit = fmt.Sprintf("its budget (budget.max_sandbox_seconds %d)", b.MaxSandboxSeconds)
		}
		return out, &AgentFailed{Message: "the run reached " + limit + " and the agent was stopped; what it wrote until then is its result"}
	case res.TimedOut:
		return out, &AgentFailed{Message: fmt.Sprintf("the agent did not finish within timeout_seconds (%d)", c.req.TimeoutSeconds)}
	case res.ExitCode != nil && *res.ExitCode != 0:
		msg := fmt.Sprintf("the agent exited with status %d", *res.ExitCode)
		if e := c.stderrTail(ctx, in.SandboxID, in.ExecID); e != "" {
			msg += "; its stderr ends: " + e
		}
		return out, &AgentFailed{Message: msg}
	case res.IsError:
		return out, &AgentFailed{Message: "the agent reported an error as its result"}
	}
	if res.ExitCode != nil {
		out.ExitCode = *res.ExitCode
	}
	return out, nil
}

// stderrBytes is how much of the end of a failed agent's stderr its
// error shows (the sandbox holds only placeholders of keys, so no secret
// can be in it).
const stderrBytes = 600

func (c *call) stderrTail(ctx context.Context, sandbox, eid string) string {
	st, err := c.r.o.Direct.Status(ctx, c.caller, sandbox, eid)
	if err != nil {
		return ""
	}
	ch, err := c.r.o.Direct.Output(ctx, c.caller, sandbox, eid, direct.StreamStderr, max(0, st.StderrLen-stderrBytes), stderrBytes, 0)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(tail(ch.Data, stderrBytes))
}

// gather copies the sandbox's artifacts into the store (file.written for
// each) and writes the result with the final answer; complete is false for
// a run that did not end on its own, whose answer is what it printed so
// far.
func (c *call) gather(ctx context.Context, sandbox, eid string, complete bool) (Result, error) {
	res := Result{Agent: c.req.Agent, Artifacts: []ArtifactInfo{}, Skipped: []ArtifactInfo{}}
	if err := c.artifacts(ctx, sandbox, &res); err != nil {
		return res, err
	}
	answer := ""
	if direct.ValidExecID(eid) {
		st, err := c.r.o.Direct.Status(ctx, c.caller, sandbox, eid)
		if err != nil {
			return res, fmt.Errorf("the agent's exec: %w", err)
		}
		if st.Done {
			code := st.ExitCode
			res.ExitCode, res.TimedOut = &code, st.TimedOut
		}
		from := max(0, st.StdoutLen-answerBytes)
		ch, err := c.r.o.Direct.Output(ctx, c.caller, sandbox, eid, direct.StreamStdout, from, answerBytes, 0)
		if err != nil {
			return res, fmt.Errorf("read the agent's output: %w", err)
		}
		answer, res.IsError = finalAnswer(c.r.o.Agents[c.req.Agent].Output, ch.Data)
	}
	details, err := json.Marshal(res)
	if err != nil {
		return res, err
	}
	if err := c.r.o.Store.WriteReport(ctx, c.job.ID, store.Report{Markdown: answer, Complete: complete, Details: details}); err != nil {
		return res, fmt.Errorf("store the result: %w", err)
	}
	return res, nil
}

// artifacts lists artifacts.Dir in the sandbox and stores every regular
// file within the limits; the others are listed as skipped.
func (c *call) artifacts(ctx context.Context, sandbox string, res *Result) error {
	list, err := c.r.o.Direct.RunToEnd(ctx, c.caller, sandbox, direct.ExecRequest{Command: artifacts.ListCommand(artifacts.Dir)})
	if err != nil {
		return fmt.Errorf("list the artifacts: %w", err)
	}
	// A listing cut at its limit holds thousands of files, far past the
	// MaxFiles kept: those it leaves out would be skipped anyway.
	files, _ := artifacts.Parse(list.Stdout)
	for _, f := range files {
		name := f.Path
		a := ArtifactInfo{Path: name, Size: f.Size, ContentType: artifacts.ContentType(name)}
		if a.Reason = artifacts.SkipReason(len(res.Artifacts), f.Size); a.Reason != "" {
			res.Skipped = append(res.Skipped, a)
			continue
		}
		var b bytes.Buffer
		if _, err := c.r.o.Direct.ReadFile(ctx, c.caller, sandbox, artifacts.Dir+"/"+name, &b); err != nil {
			return fmt.Errorf("read artifact %s: %w", name, err)
		}
		if b.Len() > store.MaxArtifactBytes {
			// It grew since it was listed.
			a.Size, a.Reason = int64(b.Len()), artifacts.SkipReason(0, int64(b.Len()))
			res.Skipped = append(res.Skipped, a)
			continue
		}
		a.Size = int64(b.Len())
		if err := c.r.o.Store.PutArtifact(ctx, c.job.ID, store.Artifact{Path: name, ContentType: a.ContentType, Data: b.Bytes()}); err != nil {
			return err
		}
		res.Artifacts = append(res.Artifacts, a)
		if err := c.event(ctx, "file:"+name+":"+strconv.FormatInt(a.Size, 10), "file.written", map[string]any{
			"path": name, "size": a.Size, "content_type": a.ContentType, "message": "artifact " + name + " kept",
		}); err != nil {
			return err
		}
	}
	return nil
}
