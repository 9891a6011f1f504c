package sessions

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCutAtKeepsCharactersWhole(t *testing.T) {
	s := strings.Repeat("é", 10) // two bytes each
	for n := range len(s) + 2 {
		got := cutAt(s, n)
		if len(got) > n || !utf8.ValidString(got) || len(got) < n-1 {
			t.Fatalf("cutAt(%d) = %q", n, got)
		}
	}
}

func TestRedactorReplacesRawAndEscapedForms(t *testing.T) {
	r := newRedactor(map[string]string{"TOKEN": `ab"c\d`, "SHORT": "ab", "EMPTY": ""})
	if got := r.String(`x ab"c\d y ab z`); got != "x [REDACTED:TOKEN] y [REDACTED:SHORT] z" {
		t.Fatalf("String = %q", got)
	}
	raw, _ := json.Marshal(map[string]string{"k": `ab"c\d`})
	if got := string(r.JSON(raw)); got != `{"k":"[REDACTED:TOKEN]"}` {
		t.Fatalf("JSON = %s", got)
	}
	// A secret that was a number leaves no valid JSON behind: the text
	// becomes a string.
	n := newRedactor(map[string]string{"PIN": "1234"})
	if got := string(n.JSON(json.RawMessage(`[1234]`))); got != `"[[REDACTED:PIN]]"` {
		t.Fatalf("JSON of a number = %s", got)
	}
}

func TestCapJSON(t *testing.T) {
	small := json.RawMessage(`{"a":1}`)
	if got, cut := capJSON(small); string(got) != string(small) || cut {
		t.Fatalf("small = %s %v", got, cut)
	}
	big, _ := json.Marshal(strings.Repeat(`"é\`, MaxResultBytes))
	got, cut := capJSON(big)
	var s string
	if !cut || len(got) > MaxResultBytes || json.Unmarshal(got, &s) != nil || !strings.HasPrefix(s, `"\"é\\`) {
		t.Fatalf("capJSON of %d bytes: %d bytes, cut %v", len(big), len(got), cut)
	}
}

func TestSplitVerdict(t *testing.T) {
	const mark = "sandstep-result-00:"
	out, v, ok := splitVerdict([]byte("hello\n"+mark+"fake\nmore\n"+mark+`{"ok":true,"error":null,"truncated":false,"result":[1]}`+"\n"), mark)
	if !ok || string(out) != "hello\n"+mark+"fake\nmore" || !v.OK || string(v.Result) != "[1]" {
		t.Fatalf("out %q, verdict %+v, found %v", out, v, ok)
	}
	if out, _, ok := splitVerdict([]byte("no verdict\n"), mark); ok || string(out) != "no verdict\n" {
		t.Fatalf("without a verdict: %q %v", out, ok)
	}
}
