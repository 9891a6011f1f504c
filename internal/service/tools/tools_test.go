package tools

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseSearch(t *testing.T) {
	q, err := ParseSearch([]byte(`{"query":"create issue","package":"zod","k":3}`), 20)
	if err != nil || q.Text != "create issue" || q.Package != "zod" || q.K != 3 {
		t.Fatalf("%+v, %v", q, err)
	}
	for raw, field := range map[string]string{
		``: "query", `{}`: "query", `{"query":" "}`: "query", `{"query":["a"]}`: "query",
		`{"query":"x","k":21}`: "k", `{"query":"x","k":"3"}`: "k", `{"query":"x","limit":3}`: "limit",
		`[1]`: "", `{"query":"x"}{}`: "",
	} {
		_, err := ParseSearch([]byte(raw), 20)
		var ae *ArgError
		if !errors.As(err, &ae) || ae.Field != field || ae.Message == "" {
			t.Errorf("%s: %v, want a problem with field %q", raw, err, field)
		}
	}
}

func TestParseRun(t *testing.T) {
	r, err := ParseRun([]byte(`{"code":"1+1","language":"typescript","timeout_seconds":30}`))
	if err != nil || r.Code != "1+1" || r.Language != "typescript" || r.Timeout != 30*time.Second {
		t.Fatalf("%+v, %v", r, err)
	}
	for raw, field := range map[string]string{`{"code":1}`: "code", `{"code":"x","timeout_seconds":0.5}`: "timeout_seconds", `{"code":"x","description":"y"}`: "description"} {
		_, err := ParseRun([]byte(raw))
		var ae *ArgError
		if !errors.As(err, &ae) || ae.Field != field {
			t.Errorf("%s: %v, want field %q", raw, err, field)
		}
	}
}

func TestShapesAndPrompt(t *testing.T) {
	defs := Definitions(Settings{Packages: []string{"zod"}, MaxK: 7, MaxTimeoutSeconds: 60})
	o, a := OpenAI(defs), Anthropic(defs)
	if len(o) != 2 || o[0]["type"] != "function" || o[0]["function"].(map[string]any)["name"] != SearchDocs ||
		a[1]["name"] != RunCode || a[1]["input_schema"] == nil {
		t.Fatalf("openai %v\nanthropic %v", o, a)
	}
	if SystemPrompt(nil) != "" {
		t.Fatal("a session without packages gets no addendum")
	}
	p := SystemPrompt([]string{"zod", "requests"})
	if !strings.Contains(p, "zod, requests") || !strings.Contains(p, "search_docs") || strings.Count(p, "\n") > 6 {
		t.Fatalf("prompt:\n%s", p)
	}
	// Without packages search_docs has no package enum (an empty enum
	// would accept nothing).
	s := Definitions(Settings{MaxK: 5, MaxTimeoutSeconds: 60})[0].Parameters["properties"].(map[string]any)
	if _, ok := s["package"]; ok {
		t.Fatal("package offered with no packages")
	}
}
