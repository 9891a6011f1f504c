package agents

import (
	"testing"

	"github.com/sandstep/sandstep/config"
)

// TestParseLine: Claude Code's stream-json lines become messages, tool uses,
// tool results and the result; anything else, and every line of "text", is
// a message; blank lines are nothing.
func TestParseLine(t *testing.T) {
	for _, c := range []struct {
		format, line string
		want         []string
	}{
		{config.AgentOutputText, `{"type":"result"}`, []string{EventMessage}},
		{config.AgentOutputText, "  ", nil},
		{config.AgentOutputStreamJSON, `{"type":"system","subtype":"init","model":"m"}`, []string{EventMessage}},
		{config.AgentOutputStreamJSON, `{"type":"assistant","message":{"content":[{"type":"text","text":"hi"},{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}]}}`, []string{EventMessage, EventToolUse}},
		{config.AgentOutputStreamJSON, `{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"a"}]}]}}`, []string{EventToolResult}},
		{config.AgentOutputStreamJSON, `{"type":"result","subtype":"success","result":"done","is_error":false}`, []string{EventResult}},
		{config.AgentOutputStreamJSON, `not json`, []string{EventMessage}},
		{config.AgentOutputStreamJSON, `{"no":"type"}`, []string{EventMessage}},
	} {
		var got []string
		for _, p := range parseLine(c.format, []byte(c.line)) {
			got = append(got, p.typ)
		}
		if len(got) != len(c.want) {
			t.Errorf("%s %q: %v, want %v", c.format, c.line, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s %q: %v, want %v", c.format, c.line, got, c.want)
			}
		}
	}
	answer, isErr := finalAnswer(config.AgentOutputStreamJSON, []byte(
		`{"type":"result","result":"first","is_error":true}`+"\n"+`{"type":"assistant","message":{"content":"later"}}`+"\n"+`{"type":"result","result":"last","is_error":false}`+"\n"))
	if answer != "last" || isErr {
		t.Errorf("finalAnswer = %q %v, want the last result", answer, isErr)
	}
	if answer, _ := finalAnswer(config.AgentOutputStreamJSON, []byte(`{"type":"assistant","message":{"content":[{"type":"text","text":"only text"}]}}`)); answer != "only text" {
		t.Errorf("finalAnswer without a result = %q", answer)
	}
}
