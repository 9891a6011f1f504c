package agents

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/store"
)

// Event types an agent's output becomes.
const (
	EventMessage    = "agent.message"
	EventToolUse    = "agent.tool_use"
	EventToolResult = "agent.tool_result"
	EventResult     = "agent.result"
	// EventBudget: the run reached its budget and the agent was stopped.
	EventBudget = "budget.exhausted"
)

// maxText bounds the text one event carries; the store truncates beyond
// its own limit anyway, but a message should stay readable.
const maxText = 16 << 10

// progress is one event from one line of the agent's stdout.
type progress struct {
	typ  string
	data map[string]any
}

// parseLine turns a line of output into events: every line is a message in
// "text"; in "stream-json" the JSON lines of Claude Code's stream-json
// (system, assistant, user, result) become messages, tool uses, tool
// results and the result, and any other line is a message.
func parseLine(format string, line []byte) []progress {
	line = bytes.TrimRight(line, "\r")
	if len(bytes.TrimSpace(line)) == 0 {
		return nil
	}
	text := func(s string) progress {
		return progress{EventMessage, map[string]any{"message": clip(s)}}
	}
	if format != config.AgentOutputStreamJSON {
		return []progress{text(string(line))}
	}
	var m struct {
		Type    string `json:"type"`
		Subtype string `json:"subtype"`
		Model   string `json:"model"`
		Message struct {
			Content json.RawMessage `json:"content"`
		} `json:"message"`
		Result   *string  `json:"result"`
		IsError  bool     `json:"is_error"`
		NumTurns int      `json:"num_turns"`
		Cost     *float64 `json:"total_cost_usd"`
		Duration int64    `json:"duration_ms"`
	}
	if err := json.Unmarshal(line, &m); err != nil || m.Type == "" {
		return []progress{text(string(line))}
	}
	switch m.Type {
	case "system":
		msg := "agent session started"
		if m.Model != "" {
			msg += " (model " + m.Model + ")"
		}
		return []progress{{EventMessage, map[string]any{"message": msg, "subtype": m.Subtype}}}
	case "assistant", "user":
		var blocks []struct {
			Type      string          `json:"type"`
			Text      string          `json:"text"`
			Name      string          `json:"name"`
			ID        string          `json:"id"`
			Input     json.RawMessage `json:"input"`
			ToolUseID string          `json:"tool_use_id"`
			Content   json.RawMessage `json:"content"`
			IsError   bool            `json:"is_error"`
		}
		if json.Unmarshal(m.Message.Content, &blocks) != nil {
			var s string
			if json.Unmarshal(m.Message.Content, &s) == nil && m.Type == "assistant" {
				return []progress{text(s)}
			}
			return nil
		}
		var out []progress
		for _, b := range blocks {
			switch b.Type {
			case "text":
				if m.Type == "assistant" && strings.TrimSpace(b.Text) != "" {
					out = append(out, text(b.Text))
				}
			case "tool_use":
				d := map[string]any{"tool": b.Name, "tool_use_id": b.ID, "message": "using " + b.Name}
				if len(b.Input) > 0 && len(b.Input) <= maxText {
					d["input"] = b.Input
				}
				out = append(out, progress{EventToolUse, d})
			case "tool_result":
				out = append(out, progress{EventToolResult, map[string]any{"tool_use_id": b.ToolUseID, "is_error": b.IsError, "message": clip(contentText(b.Content))}})
			}
		}
		return out
	case "result":
		d := map[string]any{"subtype": m.Subtype, "is_error": m.IsError, "num_turns": m.NumTurns, "duration_ms": m.Duration}
		if m.Result != nil {
			d["message"] = clip(*m.Result)
		}
		if m.Cost != nil {
			d["total_cost_usd"] = *m.Cost
		}
		return []progress{{EventResult, d}}
	}
	return []progress{text(string(line))}
}

// contentText is a tool result's content as text: a string, or the text
// blocks of a list.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &blocks)
	parts := make([]string, 0, len(blocks))
	for _, b := range blocks {
		parts = append(parts, b.Text)
	}
	return strings.Join(parts, "\n")
}

func clip(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > maxText {
		s = strings.ToValidUTF8(s[:maxText], "") + "…"
	}
	return s
}

// finalAnswer is the agent's answer from the end of its output: the last
// result of stream-json (or, without one, the last message), the text
// itself otherwise.
func finalAnswer(format string, out []byte) (answer string, isError bool) {
	if format != config.AgentOutputStreamJSON {
		return strings.TrimSpace(strings.ToValidUTF8(string(out), "")), false
	}
	lastMessage, result, found := "", "", false
	for _, line := range bytes.Split(out, []byte("\n")) {
		for _, p := range parseLine(format, line) {
			switch p.typ {
			case EventResult:
				result, _ = p.data["message"].(string)
				isError, _ = p.data["is_error"].(bool)
				found = true
			case EventMessage:
				lastMessage, _ = p.data["message"].(string)
			}
		}
	}
	if found {
		return result, isError
	}
	return lastMessage, false
}

// resultTokens reads the model tokens a stream-json result line reports
// (Claude Code's: per model in modelUsage; without it, the session's usage,
// counted under fallback, the agent's name). ok is false for any other
// line, and for a result that reports no tokens. The agent's own count is
// the only one: its model calls go through the egress proxy encrypted, so
// nothing else sees them.
func resultTokens(format string, line []byte, fallback string) (u store.Usage, ok bool) {
	if format != config.AgentOutputStreamJSON || !bytes.Contains(line, []byte(`"result"`)) {
		return u, false
	}
	var m struct {
		Type  string `json:"type"`
		Usage *struct {
			Input      int64 `json:"input_tokens"`
			Output     int64 `json:"output_tokens"`
			CacheWrite int64 `json:"cache_creation_input_tokens"`
			CacheRead  int64 `json:"cache_read_input_tokens"`
		} `json:"usage"`
		ModelUsage map[string]struct {
			Input      int64 `json:"inputTokens"`
			Output     int64 `json:"outputTokens"`
			CacheRead  int64 `json:"cacheReadInputTokens"`
			CacheWrite int64 `json:"cacheCreationInputTokens"`
		} `json:"modelUsage"`
	}
	if json.Unmarshal(bytes.TrimRight(line, "\r"), &m) != nil || m.Type != "result" {
		return u, false
	}
	u.Tokens = map[string]store.TokenCount{}
	for model, t := range m.ModelUsage {
		if model == "" || t.Input < 0 || t.Output < 0 || t.CacheRead < 0 || t.CacheWrite < 0 {
			continue
		}
		u.Add(store.Usage{Tokens: map[string]store.TokenCount{model: {Input: t.Input, Output: t.Output, CacheRead: t.CacheRead, CacheWrite: t.CacheWrite}}})
	}
	if len(m.ModelUsage) == 0 && m.Usage != nil && m.Usage.Input >= 0 && m.Usage.Output >= 0 && m.Usage.CacheRead >= 0 && m.Usage.CacheWrite >= 0 {
		u.Tokens[fallback] = store.TokenCount{Input: m.Usage.Input, Output: m.Usage.Output, CacheRead: m.Usage.CacheRead, CacheWrite: m.Usage.CacheWrite}
	}
	for k, t := range u.Tokens {
		if t == (store.TokenCount{}) {
			delete(u.Tokens, k)
		}
	}
	if len(u.Tokens) == 0 {
		return store.Usage{}, false
	}
	return u, true
}
