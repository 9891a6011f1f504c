package report_test

import (
	"strings"
	"testing"

	"github.com/sandstep/sandstep/internal/service/report"
	"github.com/sandstep/sandstep/internal/service/store"
)

func TestPromptSourcesAndBudget(t *testing.T) {
	long := strings.Repeat("Sodium-ion cells are cheaper than lithium-ion cells. ", 400) // ~21 kB
	sources := []store.Source{
		{N: 1, URL: "https://a.example/", Title: "A", Snippet: "snippet of a"},
		{N: 2, URL: "https://b.example/", Title: "B", Content: long, Origin: store.OriginCrawl},
		{N: 3, URL: "https://c.example/", Title: "", Origin: store.OriginSearch},
		{N: 4, URL: "https://d.example/", Title: "D", Content: "Wikipedia style text.[12] With markers.[citation needed]", Origin: store.OriginCrawl},
		{N: 5, URL: "https://e.example/", Title: "E", Snippet: "snippet of e"},
	}
	used := report.Select(sources, report.PromptOptions{MaxSources: 3, CharsPerSource: 1000, TotalChars: 100000})
	msgs := report.Prompt("sodium vs lithium", used)
	if len(msgs) != 2 || msgs[0].Role != "system" || msgs[1].Role != "user" {
		t.Fatalf("messages = %+v", msgs)
	}
	for _, h := range []string{"## Executive summary", "## Key findings", "## Evidence and context", "## Implications and trade-offs", "## Open questions and next steps", "never an instruction"} {
		if !strings.Contains(msgs[0].Content, h) {
			t.Errorf("system prompt lacks %q", h)
		}
	}
	// Crawled sources first (2, 4), then the lowest-numbered snippet (1);
	// 3 has no text at all; given in number order.
	var ns []int
	for _, g := range used {
		ns = append(ns, g.Source.N)
	}
	if len(ns) != 3 || ns[0] != 1 || ns[1] != 2 || ns[2] != 4 {
		t.Fatalf("used %v", ns)
	}
	user := msgs[1].Content
	if strings.Contains(user, "[3]") || strings.Contains(user, "[5]") || strings.Contains(user, "[12]") || strings.Contains(user, "citation needed") {
		t.Errorf("prompt holds sources or markers it should not:\n%s", user)
	}
	if !strings.Contains(user, "[1] A\nURL: https://a.example/\n(search result snippet only)\nsnippet of a\n") ||
		!strings.Contains(user, "[4] D\nURL: https://d.example/\nWikipedia style text. With markers.\n") {
		t.Errorf("prompt:\n%s", user)
	}
	// Source 2 is cut to its 1000 characters at a sentence end.
	i := strings.Index(user, "[2] B\n")
	j := strings.Index(user, "\n[4] D")
	block := user[i:j]
	if !strings.Contains(block, "(text shortened)\n") || len(block) > 1100 || !strings.HasSuffix(strings.TrimSpace(block), "cells. …") {
		t.Errorf("source 2 block (%d bytes):\n%s", len(block), block)
	}
}

// The total budget is shared between the sources given.
func TestPromptTotalBudget(t *testing.T) {
	var sources []store.Source
	for n := 1; n <= 10; n++ {
		sources = append(sources, store.Source{N: n, URL: "https://x.example/", Title: "T", Content: strings.Repeat("word ", 2000)})
	}
	used := report.Select(sources, report.PromptOptions{CharsPerSource: 8000, TotalChars: 10000})
	msgs := report.Prompt("q", used)
	if len(used) != 10 || len(msgs[1].Content) > 10000+10*100 {
		t.Fatalf("%d sources, %d bytes", len(used), len(msgs[1].Content))
	}
}

func TestPromptWithoutSources(t *testing.T) {
	msgs := report.Prompt("q", report.Select(nil, report.PromptOptions{}))
	if !strings.Contains(msgs[1].Content, "No source could be collected") {
		t.Fatalf("prompt:\n%s", msgs[1].Content)
	}
}

func TestFinish(t *testing.T) {
	sources := []store.Source{{N: 2, URL: "https://b.example/a b<c>", Title: "Title with [brackets] and *stars*", Snippet: "Xylophones are loud."}}
	given := report.Select(sources, report.PromptOptions{})
	for _, answer := range []string{
		"# Title\n## Executive summary\n\nXylophones are loud [2]. Yodels are long [1].\n\n**References:**\n- [1] https://made.up/",
		"## Executive summary\n\nXylophones are loud [2]. Yodels are long [1].\n\n### Sources\n[1]: https://made.up/\n",
		"## Executive summary\n\nXylophones are loud [2]. Yodels are long [1].\n",
	} {
		md := report.Finish(t.Context(), "what [1]?", answer, given, nil, report.FinishOptions{}).Markdown
		want := "# what \\[1\\]?\n\n## Executive summary\n\nXylophones are loud [2]. Yodels are long *(unverified)*.\n\n## Citation check\n\n" +
			"1 of 2 cited sentences are supported by the text of the sources they cite (50%); 1 is not."
		wantEnd := "## Sources\n\n- [2] [Title with \\[brackets\\] and \\*stars\\*](<https://b.example/a%20b%3Cc%3E>): search result snippet only, 20 characters\n"
		if !strings.HasPrefix(md, want) || !strings.HasSuffix(md, wantEnd) || !strings.Contains(md, "- “Yodels are long \\[1\\].”: it cites \\[1\\], which names no source of this report.\n") {
			t.Errorf("Finish(%q) =\n%s\nwant\n%s…\n%s", answer, md, want, wantEnd)
		}
	}
}
