package report_test

import (
	"reflect"
	"testing"

	"github.com/sandstep/sandstep/internal/service/report"
)

func TestFixCitations(t *testing.T) {
	valid := map[int]bool{1: true, 2: true, 3: true, 5: true}
	for _, tc := range []struct{ in, want string }{
		// Valid citations stay exactly as written.
		{"A [1].", "A [1]."},
		{"A [1,2] and B [ 3 ].", "A [1,2] and B [ 3 ]."},
		{"A [1-3].", "A [1-3]."},
		{"A [3–1].", "A [3–1]."},
		{"A [1][2][5].", "A [1][2][5]."},
		// Invalid ones go, with the space before them.
		{"A [9].", "A."},
		{"A [9] and B.", "A and B."},
		{"A [0].", "A."},
		{"A [9, 10].", "A."},
		{"A [9]", "A"},
		{"A [9]\nB [4], C [1].", "A\nB, C [1]."},
		{"Café [9]. Über [2].", "Café. Über [2]."},
		{"word[9].", "word."},
		// Mixed groups keep their valid numbers.
		{"A [1, 9].", "A [1]."},
		{"A [1; 9].", "A [1]."},
		{"A [9, 2, 2].", "A [2]."},
		{"A [1-4].", "A [1, 2, 3]."},
		{"A [4-5].", "A [5]."},
		{"A [2-4, 9].", "A [2, 3]."},
		{"A [1 – 2].", "A [1 – 2]."},
		// Adjacent groups: each on its own.
		{"A [1][9].", "A [1]."},
		{"A [9][1].", "A [1]."},
		{"A [9] [1].", "A [1]."},
		{"A [9][8].", "A."},
		// At the start of a line or list item.
		{"[9] Starts here.", "Starts here."},
		{"- [9] bullet [2]", "- bullet [2]"},
		{"1. [4] item", "1. item"},
		// A range too long to be a citation goes.
		{"A [1-1000].", "A."},
		// Link forms: the address goes, the number stays if valid.
		{"A [2](https://fake.example/x).", "A [2]."},
		{"A [9](https://en.wikipedia.org/wiki/Go_(programming_language)).", "A."},
		{"A [1, 9](https://x.example/).", "A [1]."},
		// Numbered reference definitions go, valid or not.
		{"Text [1].\n\n[1]: https://example.com/\n[9]: https://fake.example/\n", "Text [1].\n\n"},
		// Not citations: links, words, footnotes, escaped brackets, code.
		{"See [the docs](https://go.dev/) and [note] and [^9].", "See [the docs](https://go.dev/) and [note] and [^9]."},
		{`A \[9] literal.`, `A \[9] literal.`},
		{"Use `arr[9]` here [9].", "Use `arr[9]` here."},
		{"Use ``a ` [9]`` here.", "Use ``a ` [9]`` here."},
		{"An unclosed ` tick [9].", "An unclosed ` tick."},
		{"```go\nx := a[9]\n```\nAfter [9].", "```go\nx := a[9]\n```\nAfter."},
		{"~~~\n[9]\n~~~~\n[9] x", "~~~\n[9]\n~~~~\nx"},
		{"    ```\nindented [9]", "    ```\nindented"},
		{"", ""},
		{"No citations at all.\n", "No citations at all.\n"},
	} {
		got := report.FixCitations(tc.in, valid)
		if got != tc.want {
			t.Errorf("FixCitations(%q)\n got  %q\n want %q", tc.in, got, tc.want)
		}
		if again := report.FixCitations(got, valid); again != got {
			t.Errorf("FixCitations is not idempotent on %q: %q", got, again)
		}
	}
}

func TestFixCitationsWithNoValidSource(t *testing.T) {
	got := report.FixCitations("## Key findings\n\n- Fast [1][2].\n- Safe [3, 4].\n", nil)
	if want := "## Key findings\n\n- Fast.\n- Safe.\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestCited(t *testing.T) {
	got := report.Cited("A [3][1, 3]. B [5-7] `[8]` and [2](https://x/).\n```\n[9]\n```\n[4]: https://y/\n\\[10] [1-1000]")
	if want := []int{3, 1, 5, 6, 7, 2}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Cited = %v, want %v", got, want)
	}
}

func BenchmarkFixCitations(b *testing.B) {
	md := full("Are solid-state batteries better than lithium-ion?", corpus)
	for range 5 {
		md += md
	}
	valid := map[int]bool{1: true, 3: true}
	b.SetBytes(int64(len(md)))
	for b.Loop() {
		report.FixCitations(md, valid)
	}
}
