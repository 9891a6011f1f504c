package crawler

import (
	"strings"
	"testing"

	"github.com/sandstep/sandstep/internal/service/crawler/spec"
	"github.com/sandstep/sandstep/internal/testkit/fixturesite"
	"github.com/sandstep/sandstep/internal/testkit/testbin"
)

func requirePDFToText(t *testing.T) {
	t.Helper()
	testbin.RequireTool(t, "pdftotext", "poppler-utils")
}

func TestPDFSourceIsRead(t *testing.T) {
	requirePDFToText(t)
	site := fixturesite.Start(t, fixturesite.Options{})
	alpha := site.Hosts[0]
	out, lines := run(t, t.Context(), Input{Sources: []Source{{N: 4, URL: alpha.Page(fixturesite.PathPaper), Title: "search title"}}, AllowPrivate: site.AllowPrivate()})
	if len(out.Pages) != 1 {
		t.Fatalf("pages %+v, skipped %+v", out.Pages, out.Skipped)
	}
	p := out.Pages[0]
	if p.Mode != spec.ModePDF || p.Pages != 3 || p.Title != fixturesite.PaperTitle || p.N != 4 || p.Truncated || p.Status != 200 {
		t.Errorf("page = %+v", p)
	}
	for _, pg := range fixturesite.PaperPages {
		for _, line := range pg {
			if !strings.Contains(p.Content, line) {
				t.Errorf("content lacks %q:\n%s", line, p.Content)
			}
		}
	}
	if !strings.Contains(lines[1].Message, "PDFs read with") {
		t.Errorf("the crawl line does not say how PDFs are read: %+v", lines[1])
	}
}

func TestPDFKeepsTheCharacterCap(t *testing.T) {
	requirePDFToText(t)
	site := fixturesite.Start(t, fixturesite.Options{})
	out, _ := run(t, t.Context(), Input{
		Sources:      []Source{{N: 1, URL: site.Hosts[0].Page(fixturesite.PathPaper)}},
		Limits:       Limits{MaxCharsPerSource: 100},
		AllowPrivate: site.AllowPrivate(),
	})
	if len(out.Pages) != 1 || !out.Pages[0].Truncated || len([]rune(out.Pages[0].Content)) > 100 || out.Pages[0].Pages != 3 {
		t.Fatalf("pages %+v", out.Pages)
	}
}

func TestPDFTooLargeIsUnreadable(t *testing.T) {
	requirePDFToText(t)
	site := fixturesite.Start(t, fixturesite.Options{})
	u := site.Hosts[0].Page(fixturesite.PathPaper)
	out, _ := run(t, t.Context(), Input{Sources: []Source{{N: 1, URL: u}}, Limits: Limits{MaxPDFBytes: 200}, AllowPrivate: site.AllowPrivate()})
	if s, _ := skipOf(out, u); s.Reason != spec.ReasonUnreadable || !strings.Contains(s.Message, "max_pdf_bytes") {
		t.Fatalf("skipped %+v, pages %+v", out.Skipped, out.Pages)
	}
}

// A sandbox image without poppler: the PDF is listed as unreadable, saying
// why, and PDF links are not worth a fetch.
func TestPDFWithoutExtractor(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	site := fixturesite.Start(t, fixturesite.Options{})
	u := site.Hosts[0].Page(fixturesite.PathPaper)
	out, lines := run(t, t.Context(), Input{Sources: []Source{{N: 1, URL: u}}, AllowPrivate: site.AllowPrivate()})
	s, _ := skipOf(out, u)
	if s.Reason != spec.ReasonUnreadable || !strings.Contains(s.Message, "pdftotext") || len(out.Pages) != 0 {
		t.Fatalf("skipped %+v, pages %+v", out.Skipped, out.Pages)
	}
	if !strings.Contains(lines[1].Message, "no pdftotext") {
		t.Errorf("crawl line = %+v", lines[1])
	}
	c := &crawl{}
	if !c.skipLink("http://x/paper.PDF") {
		t.Error("a PDF link is followed without an extractor")
	}
	c.readPDF = true
	if c.skipLink("http://x/paper.pdf") || !c.skipLink("http://x/a.zip") {
		t.Error("skipLink with an extractor")
	}
}

func TestDehyphenate(t *testing.T) {
	for in, want := range map[string]string{
		"migra-\ntion":       "migration",
		"Jean-\nPierre":      "Jean-\nPierre",
		"COVID-\n19 cases":   "COVID-\n19 cases",
		"well-\nknown, and-": "wellknown, and-",
		"no hyphen\nhere":    "no hyphen\nhere",
	} {
		if got := dehyphenate(in); got != want {
			t.Errorf("dehyphenate(%q) = %q, want %q", in, got, want)
		}
	}
}
