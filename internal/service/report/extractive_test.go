package report_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/internal/service/report"
	"github.com/sandstep/sandstep/internal/service/store"
)

// corpus is three crawled pages and a bare search result on solid-state
// batteries, with the chrome and footnote markers real pages have.
var corpus = []store.Source{
	{N: 1, URL: "https://en.wikipedia.org/wiki/Solid-state_battery", Title: "Solid-state battery", Origin: store.OriginCrawl,
		Content: `Solid-state battery
From Wikipedia, the free encyclopedia
A solid-state battery is an electrical battery that uses a solid electrolyte for ionic conductions between the electrodes, instead of the liquid or gel polymer electrolytes found in conventional batteries.[1] Solid-state batteries theoretically offer much higher energy density than the typical lithium-ion or lithium polymer batteries.[2][3]
Challenges
However, solid-state batteries remain expensive to manufacture, and dendrite growth at high current densities is a known limitation.[4] Costs are reported at roughly 8 times those of lithium-ion cells, e.g. for thin-film designs.
It is unclear whether sulfide electrolytes can be produced at scale before 2030.`},
	{N: 2, URL: "https://example.com/ssb-vs-li-ion", Title: "Solid-state vs lithium-ion: a comparison", Origin: store.OriginCrawl,
		Content: `Accept cookies to continue reading this page about batteries and more.
Solid-state batteries are safer than lithium-ion batteries because the solid electrolyte is not flammable.
Compared with lithium-ion cells, solid-state cells charge faster but degrade under mechanical pressure.
Will solid-state batteries replace lithium-ion in electric vehicles by 2030?
Home | About | Contact`},
	{N: 3, URL: "https://news.example.org/toyota", Title: "Toyota plans solid-state EVs", Origin: store.OriginCrawl,
		Content: "Toyota said it plans to launch electric vehicles with solid-state batteries in 2027 or 2028. The company has filed more than 1,000 patents on the technology."},
	{N: 4, URL: "https://blocked.example.net/paper", Title: "A paper behind a wall", Origin: store.OriginSearch,
		Snippet: "We study sulfide solid electrolytes for solid-state lithium batteries and their interfacial stability with"},
	{N: 5, URL: "https://empty.example/", Title: "", Origin: store.OriginSearch},
}

var headings = []string{"## Executive summary", "## Key findings", "## Evidence and context", "## Implications and trade-offs", "## Open questions and next steps", "## Citation check", "## Sources"}

// sections splits a report at its level-2 headings.
func sections(t *testing.T, md string) map[string]string {
	t.Helper()
	out := map[string]string{}
	pos := 0
	for i, h := range headings {
		at := strings.Index(md[pos:], h+"\n")
		if at < 0 {
			t.Fatalf("section %q missing or out of order in:\n%s", h, md)
		}
		start := pos + at + len(h) + 1
		end := len(md)
		if i+1 < len(headings) {
			if next := strings.Index(md[start:], headings[i+1]+"\n"); next >= 0 {
				end = start + next
			}
		}
		out[h] = strings.TrimSpace(md[start:end])
		pos = start
	}
	return out
}

// full builds the whole report from sources without a model, as the Report
// phase does.
func full(query string, sources []store.Source) string {
	given := report.Select(sources, report.PromptOptions{})
	body := report.Extractive(query, given)
	return report.Finish(context.Background(), query, body, given, report.Unused(sources, nil, given), report.FinishOptions{}).Markdown
}

func validOf(sources []store.Source) map[int]bool {
	v := map[int]bool{}
	for _, s := range sources {
		v[s.N] = true
	}
	return v
}

func TestExtractiveSectionsAndCitations(t *testing.T) {
	md := full("Are solid-state batteries better than lithium-ion?", corpus)
	if !strings.HasPrefix(md, "# Are solid-state batteries better than lithium-ion?\n\n") {
		t.Errorf("title: %q", md[:60])
	}
	secs := sections(t, md)
	valid := validOf(corpus)
	for _, n := range report.Cited(md) {
		if !valid[n] {
			t.Errorf("cites [%d], not a source", n)
		}
	}
	if fixed := report.FixCitations(md, valid); fixed != md {
		t.Errorf("FixCitations changed the extractive report:\n%s", fixed)
	}
	// Every bullet quotes one source and cites it.
	bullets := 0
	for _, h := range headings[:5] {
		for line := range strings.SplitSeq(secs[h], "\n") {
			if strings.HasPrefix(line, "- ") {
				bullets++
				if len(report.Cited(line)) != 1 {
					t.Errorf("%s: bullet without exactly one citation: %q", h, line)
				}
			}
		}
	}
	if bullets < 5 {
		t.Errorf("only %d bullets:\n%s", bullets, md)
	}
	// 2 to 4 sentences in the summary: up to 3 quoted and cited, and one
	// saying how the report was made.
	sum := secs["## Executive summary"]
	if c := len(report.Cited(sum)); c < 1 || c > 3 || !strings.HasSuffix(sum, "without a language model.") {
		t.Errorf("summary with %d citations: %q", c, sum)
	}
	// The page's own footnote markers and chrome are not quoted.
	for _, bad := range []string{"cookies", "Home | About", "From Wikipedia", "[2][3]", "conventional batteries.[1]"} {
		if strings.Contains(md, bad) {
			t.Errorf("report quotes %q", bad)
		}
	}
	// The sentences on the question's words come first; trade-offs and open
	// questions land in their sections.
	if !strings.Contains(secs["## Implications and trade-offs"], "expensive to manufacture") ||
		!strings.Contains(secs["## Open questions and next steps"], "It is unclear whether sulfide electrolytes") ||
		!strings.Contains(secs["## Open questions and next steps"], "The pages of sources 4 could not be read") {
		t.Errorf("sections:\n%s", md)
	}
	if !strings.Contains(secs["## Evidence and context"], "**Toyota plans solid-state EVs**: Toyota said") {
		t.Errorf("evidence:\n%s", secs["## Evidence and context"])
	}
	// The sources it was written from, how each was read; the empty
	// search result is not one of them.
	wantList := "- [1] [Solid-state battery](<https://en.wikipedia.org/wiki/Solid-state_battery>): web page, 710 characters\n" +
		"- [2] [Solid-state vs lithium-ion: a comparison](<https://example.com/ssb-vs-li-ion>): web page, 381 characters\n" +
		"- [3] [Toyota plans solid-state EVs](<https://news.example.org/toyota>): web page, 157 characters\n" +
		"- [4] [A paper behind a wall](<https://blocked.example.net/paper>): search result snippet only, 106 characters\n\n" +
		"## Found but not used\n\n- <https://empty.example/>: budget (found by the search, not crawled)\n"
	if !strings.HasSuffix(md, "## Sources\n\n"+wantList) {
		t.Errorf("sources list:\n%s", md[strings.Index(md, "## Sources"):])
	}
	// Quoting its sources, it passes its own citation check.
	if c := secs["## Citation check"]; !strings.HasPrefix(c, "All ") || strings.Contains(md, "unverified") {
		t.Errorf("citation check:\n%s", c)
	}
	if again := full("Are solid-state batteries better than lithium-ion?", corpus); again != md {
		t.Error("the same input gave another report")
	}
}

// Numbers other than the sources' never appear, even when the pages carry
// reference markers of their own and the sources are not numbered from 1.
func TestExtractiveCitesOnlyGivenNumbers(t *testing.T) {
	sources := []store.Source{
		{N: 7, URL: "https://a.example/", Title: "A", Content: "Rust guarantees memory safety without a garbage collector at all.[3] The borrow checker enforces ownership rules at compile time.[12][13]"},
		{N: 12, URL: "https://b.example/", Title: "B [draft]", Content: "Go uses a garbage collector [4] tuned for low latency in servers. Both languages compile to native code for many platforms."},
	}
	md := full("rust vs go memory safety", sources)
	sections(t, md)
	got := report.Cited(md)
	if len(got) == 0 {
		t.Fatalf("no citations:\n%s", md)
	}
	for _, n := range got {
		if n != 7 && n != 12 {
			t.Fatalf("cites [%d]:\n%s", n, md)
		}
	}
	if !strings.Contains(md, `[B \[draft\]](<https://b.example/>)`) {
		t.Errorf("title not escaped:\n%s", md)
	}
}

func TestExtractiveWithoutSources(t *testing.T) {
	md := full("anything", nil)
	secs := sections(t, md)
	if len(report.Cited(md)) != 0 || !strings.Contains(secs["## Executive summary"], "No sources were collected") ||
		secs["## Sources"] != "No source could be read." || !strings.Contains(secs["## Citation check"], "cites no source") {
		t.Fatalf("report:\n%s", md)
	}
}

// With snippets only (no sandbox), the report is built from them and says
// so.
func TestExtractiveFromSnippets(t *testing.T) {
	sources := []store.Source{
		{N: 1, URL: "https://en.wikipedia.org/wiki/Go_(programming_language)", Title: "Go (programming language)", Snippet: "Go is a high-level general-purpose programming language that is statically typed and compiled"},
		{N: 2, URL: "https://go.dev/", Title: "The Go Programming Language", Snippet: "Build simple, secure, scalable systems with Go. Go is an open source programming language supported by Google."},
	}
	md := full("go programming language", sources)
	secs := sections(t, md)
	// A snippet cut mid-sentence is marked, and left out of the summary
	// while whole sentences are there.
	if !strings.Contains(secs["## Key findings"], "- Go is a high-level general-purpose programming language that is statically typed and compiled … [1]\n") ||
		strings.Contains(secs["## Executive summary"], "…") ||
		!strings.Contains(secs["## Open questions and next steps"], "Only search results were collected") {
		t.Fatalf("report:\n%s", md)
	}
}

// Text from pages cannot open Markdown structures or raw HTML.
func TestExtractiveEscapesPageText(t *testing.T) {
	sources := []store.Source{{N: 1, URL: "https://x.example/", Title: "X", Content: "# Not a heading but a sentence about widgets and their many uses.\n" +
		"<script>alert(1)</script> widgets are used in many places by many people daily.\n" +
		"1. Widgets are numbered in this list item about widgets and more."}}
	md := full("widgets", sources)
	sections(t, md)
	for _, bad := range []string{"<script>", "\n- # ", "\n# Not", "\n- 1. "} {
		if strings.Contains(md, bad) {
			t.Errorf("report contains %q:\n%s", bad, md)
		}
	}
}

func TestGenerateWithoutModel(t *testing.T) {
	md, _, err := report.Generate(t.Context(), nil, "q", report.Select(corpus, report.PromptOptions{}), nil)
	if md != "" || !errors.Is(err, report.ErrNoModel) {
		t.Fatalf("md %q, err %v", md, err)
	}
}

// BenchmarkExtractive is the report phase's cost without a model at the
// largest budget: 20 sources of 13,200 characters.
func BenchmarkExtractive(b *testing.B) {
	var page strings.Builder
	for i := 0; page.Len() < 13200; i++ {
		fmt.Fprintf(&page, "Sentence %d says that solid-state batteries differ from lithium-ion cells in cost and safety, however the data vary. ", i)
		if i%5 == 4 {
			page.WriteString("\n")
		}
	}
	var sources []store.Source
	for n := 1; n <= 20; n++ {
		sources = append(sources, store.Source{N: n, URL: fmt.Sprintf("https://s%d.example/", n), Title: "Page", Content: strings.ReplaceAll(page.String(), "Sentence", fmt.Sprintf("Page %d sentence", n))})
	}
	for b.Loop() {
		full("solid-state batteries vs lithium-ion", sources)
	}
}

// The summary names as many sources as the report was written from, and
// the sources list below holds that many.
func TestExtractiveNamesTheNumberOfSources(t *testing.T) {
	page := func(n int) store.Source {
		return store.Source{N: n, URL: fmt.Sprintf("https://p%d.example/", n), Title: "Page", Content: "—"}
	}
	for _, c := range []struct {
		sources []store.Source
		want    string
	}{
		{[]store.Source{page(1)}, "No readable text on this question was found in the one collected source. The Sources section below lists it."},
		{[]store.Source{page(1), page(2), page(3)}, "No readable text on this question was found in the 3 collected sources. The Sources section below lists them."},
	} {
		md := full("kestrel migration", c.sources)
		secs := sections(t, md)
		if strings.TrimSpace(secs["## Executive summary"]) != c.want {
			t.Errorf("summary %q, want %q", secs["## Executive summary"], c.want)
		}
		if got := strings.Count(secs["## Sources"], "- ["); got != len(c.sources) {
			t.Errorf("sources list has %d entries, want %d:\n%s", got, len(c.sources), secs["## Sources"])
		}
	}
	one := full("kestrel migration", []store.Source{{N: 1, URL: "https://k.example/", Title: "Kestrels", Content: "Kestrel migration follows the coast in autumn."}})
	if !strings.Contains(one, "The report quotes the one collected source without a language model.") {
		t.Errorf("report of one source:\n%s", one)
	}
}
