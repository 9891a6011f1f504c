package sandy

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
)

// The decoders of Sandy's answers read what a remote service, or the
// helper scripts inside a sandbox, send back: none of them may panic on
// anything, and what they accept must mean what it says.

// FuzzParseExec decodes exec answers (camelCase or snake_case).
func FuzzParseExec(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := parseExec(b)
		if err != nil {
			if a != (execAnswer{}) {
				t.Fatalf("a refused answer gave %+v", a)
			}
			return
		}
		_ = warmupQuirk(a)
	})
}

// FuzzParseSandbox decodes create and status answers, with times in any of
// the forms Sandy has used.
func FuzzParseSandbox(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := parseSandbox(b)
		if err != nil && s != (sandboxInfo{}) {
			t.Fatalf("a refused answer gave %+v", s)
		}
	})
}

// FuzzDetailOf makes error answers readable: one line, bounded.
func FuzzDetailOf(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		d := detailOf(b)
		if len(d) > 303 || strings.ContainsAny(d, "\n\r\t") {
			t.Fatalf("detail %q is not one short line", d)
		}
	})
}

// FuzzParseReport reads the exec helper's report; what it accepts, written
// again in the helper's format, reads back the same.
func FuzzParseReport(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		rep, err := parseReport(s)
		if err != nil || rep.gone {
			return
		}
		again, err := parseReport(formatReport(rep))
		if err != nil {
			t.Fatalf("the report of %+v, written again, does not parse: %v", rep, err)
		}
		if again.status != rep.status || again.outSize != rep.outSize || again.errSize != rep.errSize ||
			!bytes.Equal(again.out, rep.out) || !bytes.Equal(again.err, rep.err) {
			t.Fatalf("report changed on a trip: %+v -> %+v", rep, again)
		}
	})
}

// formatReport writes a report as execScript prints it.
func formatReport(r report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "S %s %d %d\n", r.status, r.outSize, r.errSize)
	if len(r.out) > 0 {
		b.WriteString(base64.StdEncoding.EncodeToString(r.out) + "\n")
	}
	b.WriteString("E\n")
	if len(r.err) > 0 {
		b.WriteString(base64.StdEncoding.EncodeToString(r.err) + "\n")
	}
	b.WriteString("Z\n")
	return b.String()
}

// FuzzParseListing reads listScript's answer, GNU find or stat records.
func FuzzParseListing(f *testing.F) {
	f.Fuzz(func(t *testing.T, answer, dir string) {
		files, err := parseListing(strings.Split(answer, "\n"), dir)
		if err != nil {
			return
		}
		for _, fi := range files {
			if fi.Mode > 0o7777 && !strings.HasPrefix(answer, "ok gnu") {
				t.Fatalf("stat mode %o keeps type bits", fi.Mode)
			}
		}
	})
}

// FuzzFileContent decodes files/read answers: raw bytes or JSON content,
// as text or base64.
func FuzzFileContent(f *testing.F) {
	f.Fuzz(func(t *testing.T, ctype string, body []byte) {
		data, err := fileContent(ctype, body)
		if err == nil && !strings.Contains(ctype, "json") && !bytes.Equal(data, body) {
			t.Fatal("a raw answer was changed")
		}
	})
}
