package report

import (
	"slices"
	"testing"
)

func TestSentenceSpans(t *testing.T) {
	for text, want := range map[string][]string{
		"Dr. Smith measured 3.5 kg [1]. Growth rose 4% e.g. in 2020 [2][3]. Next one.[4] Done": {"Dr. Smith measured 3.5 kg [1].", "Growth rose 4% e.g. in 2020 [2][3].", "Next one.[4]", "Done"},
		"It rose. [3] Then it fell [4].":                                                                 {"It rose. [3]", "Then it fell [4]."},
		"The U.S. economy grew by 2.1 percent in Q3. J. R. R. Tolkien wrote it.":                         {"The U.S. economy grew by 2.1 percent in Q3.", "J. R. R. Tolkien wrote it."},
		`He said "stop." Then left. Is it? Yes! The end…`:                                                {`He said "stop."`, "Then left.", "Is it?", "Yes!", "The end…"},
		"Version 1.2.3 shipped (see the notes, etc.) on time. lower case after a period. does not split": {"Version 1.2.3 shipped (see the notes, etc.) on time. lower case after a period. does not split"},
		"A claim [1, 2]. **Bold start** of the next.":                                                    {"A claim [1, 2].", "**Bold start** of the next."},
		"": nil,
	} {
		var got []string
		for _, sp := range sentenceSpans(text) {
			got = append(got, text[sp.start:sp.end])
		}
		if !slices.Equal(got, want) {
			t.Errorf("sentenceSpans(%q)\n got %q\nwant %q", text, got, want)
		}
	}
}

func TestMarkdownSentences(t *testing.T) {
	md := "# Title [1]\n\n## Section\n\nFirst sentence [1]. Second one runs\nover two lines [2].\n\n" +
		"- A bullet [3].\n- Another bullet\n  continued [4].\n1. Numbered [5].\n> Quoted claim [6].\n\n" +
		"```\ncode [7]. More code.\n```\n\n| cell [8] | cell |\n---\n[9]: https://x/\nLast.\n"
	var got []string
	for _, sp := range markdownSentences(md) {
		got = append(got, md[sp.start:sp.end])
	}
	want := []string{
		"First sentence [1].", "Second one runs\nover two lines [2].",
		"A bullet [3].", "Another bullet\n  continued [4].", "Numbered [5].", "Quoted claim [6].",
		"| cell [8] | cell |", "Last.",
	}
	if !slices.Equal(got, want) {
		t.Errorf("markdownSentences\n got %q\nwant %q", got, want)
	}
}

func TestTokens(t *testing.T) {
	var terms []string
	tokens("The 4,200 kilometres, 3.5 tags, 1,5 and 007 birds; eleven days (2019–2021) at 61% — one bird.", func(tk token) {
		if tk.term != "" {
			terms = append(terms, tk.term)
		}
	})
	want := []string{"4200", "kilome", "3.5", "tag", "1,5", "7", "bird", "11", "day", "2019", "2021", "61", "one", "bird"}
	if !slices.Equal(terms, want) {
		t.Errorf("terms\n got %q\nwant %q", terms, want)
	}
	for w, s := range map[string]string{"nests": "nest", "counted": "count", "cities": "city", "migration": "migrat", "migrating": "migrat", "boxes": "box", "status": "status", "analysis": "analys"} {
		if got := stem(w); got != s {
			t.Errorf("stem(%q) = %q, want %q", w, got, s)
		}
	}
	if q := quotedPhrases(`He called it “the nest box effect” and "Phase 2", not "".`); len(q) != 2 || !slices.Equal(q[0], []string{"phase", "2"}) || !slices.Equal(q[1], []string{"the", "nest", "box", "effect"}) {
		t.Errorf("quotes = %q", q)
	}
}
