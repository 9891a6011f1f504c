package crawler

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/sandstep/sandstep/internal/service/crawler/spec"
)

// PDFs are read with poppler's pdftotext (Debian package poppler-utils),
// run inside the sandbox like the rest of the crawler: a PDF is untrusted
// input, and its parser is a large C program. Measured against the pure-Go
// extractors on real documents, pdftotext kept the words of TeX-made PDFs
// apart where github.com/ledongthuc/pdf ran them together, and it needs no
// 2.5 s WebAssembly start-up as pdfium in wazero does (see the commit that
// added this file). Where a sandbox image has no pdftotext, a PDF is
// skipped as unreadable with a message that says so, never read badly.

// pdfMaxPages bounds what is extracted of one document: the first pages
// hold far more text than max_chars_per_source keeps, and a 900-page
// manual would otherwise take seconds.
const pdfMaxPages = 50

// pdfReader runs poppler's tools; an empty pdftotext means there is none.
type pdfReader struct {
	pdftotext string
	pdfinfo   string // optional: the page count and title
}

// findPDFReader looks for pdftotext and pdfinfo on PATH.
func findPDFReader() pdfReader {
	var r pdfReader
	r.pdftotext, _ = exec.LookPath("pdftotext")
	if r.pdftotext != "" {
		r.pdfinfo, _ = exec.LookPath("pdfinfo")
	}
	return r
}

func (r pdfReader) ok() bool { return r.pdftotext != "" }

func (r pdfReader) String() string {
	if r.ok() {
		return "PDFs read with " + r.pdftotext
	}
	return "no pdftotext in the sandbox: PDFs are listed as unreadable"
}

// pdfText is what a PDF gave.
type pdfText struct {
	Title string
	Text  string
	Pages int
	Cut   bool // pages past pdfMaxPages were not read
}

// errNotPDF marks a body that is not a PDF document.
var errNotPDF = errors.New("not a PDF document")

// read extracts the text of a PDF held in doc.
func (r pdfReader) read(ctx context.Context, doc []byte) (pdfText, error) {
	if !bytes.Contains(doc[:min(len(doc), 1024)], []byte("%PDF-")) {
		return pdfText{}, errNotPDF
	}
	f, err := os.CreateTemp("", "sandstep-*.pdf")
	if err != nil {
		return pdfText{}, fmt.Errorf("temporary file: %w", err)
	}
	defer os.Remove(f.Name())
	_, werr := f.Write(doc)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return pdfText{}, fmt.Errorf("temporary file: %w", werr)
	}
	var out pdfText
	if r.pdfinfo != "" {
		out.Pages, out.Title = r.info(ctx, f.Name())
	}
	text, err := runTool(ctx, r.pdftotext, "-q", "-enc", "UTF-8", "-l", strconv.Itoa(pdfMaxPages), f.Name(), "-")
	if err != nil {
		return pdfText{}, err
	}
	// pdftotext ends every page with a form feed.
	if n := strings.Count(text, "\f"); out.Pages == 0 {
		out.Pages = n
	}
	out.Cut = out.Pages > pdfMaxPages
	out.Text = tidyText(dehyphenate(strings.ReplaceAll(text, "\f", "\n\n")))
	return out, nil
}

// info reads the page count and title with pdfinfo; zero values when it
// cannot tell.
func (r pdfReader) info(ctx context.Context, path string) (int, string) {
	text, err := runTool(ctx, r.pdfinfo, "-enc", "UTF-8", path)
	if err != nil {
		return 0, ""
	}
	var pages int
	var title string
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "Pages":
			pages, _ = strconv.Atoi(strings.TrimSpace(v))
		case "Title":
			title = collapseSpaces(v)
		}
	}
	return pages, title
}

// pdfToolOutput bounds what is kept of a tool's output: 50 pages of text.
const pdfToolOutput = 4 << 20

// runTool runs a poppler tool and returns its standard output; a failure
// carries the first line of its standard error.
func runTool(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	stdout, stderr := &capped{max: pdfToolOutput}, &capped{max: 4 << 10}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	if err != nil {
		msg := strings.TrimSpace(stderr.b.String())
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i]
		}
		if msg == "" {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		return "", fmt.Errorf("%s: %w: %s", name, err, msg)
	}
	return stdout.b.String(), nil
}

// capped keeps the first max bytes written to it and discards the rest, so
// that a tool never blocks on a full pipe.
type capped struct {
	b   bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.b.Len(); room > 0 {
		c.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// dehyphenate joins words that the layout broke at a line end
// ("migra-\ntion" -> "migration"); a hyphen before a capital or a digit is
// left, since "Jean-\nPierre" and "COVID-\n19" are hyphenated words.
func dehyphenate(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for {
		i := strings.Index(s, "-\n")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		prevLower := i > 0 && s[i-1] >= 'a' && s[i-1] <= 'z'
		nextLower := i+2 < len(s) && s[i+2] >= 'a' && s[i+2] <= 'z'
		if prevLower && nextLower {
			b.WriteString(s[:i])
		} else {
			b.WriteString(s[:i+2])
		}
		s = s[i+2:]
	}
}

// visitPDF reads a fetched PDF into a page.
func (v *visitor) visitPDF(ctx context.Context, t task, resp *response, o outcome) outcome {
	switch {
	case !resp.PDF && resp.ContentType != "" && resp.ContentType != "application/pdf" && resp.ContentType != "application/x-pdf" && resp.ContentType != "application/acrobat":
		o.skip = skip(spec.ReasonContentType, "%s is not a document the crawler reads", resp.ContentType)
		return o
	case !resp.PDF:
		o.skip = skip(spec.ReasonUnreadable, "the server called it %s, but it is not a PDF document", resp.ContentType)
		return o
	case resp.Truncated:
		o.skip = skip(spec.ReasonUnreadable, "the PDF is larger than max_pdf_bytes (%d MiB): a PDF cut short cannot be read", v.in.Limits.MaxPDFBytes>>20)
		return o
	case !v.pdf.ok():
		o.skip = skip(spec.ReasonUnreadable, "a PDF, and the sandbox has no PDF extractor (pdftotext, Debian package poppler-utils)")
		return o
	}
	// Extraction gets its own page timeout, as a render does: the
	// download may have used most of the first one.
	pctx, cancel := context.WithTimeout(ctx, v.pageTimeout)
	defer cancel()
	pdf, err := v.pdf.read(pctx, resp.Body)
	switch {
	case ctx.Err() != nil:
		o.skip = skip(spec.ReasonBudget, "the crawl stopped while the PDF was read")
		return o
	case errors.Is(err, context.DeadlineExceeded):
		o.skip = skip(spec.ReasonTimeout, "the PDF's text was not extracted within %s", v.pageTimeout)
		return o
	case err != nil:
		o.skip = skip(spec.ReasonUnreadable, "the PDF could not be read: %v", err)
		return o
	case pdf.Text == "":
		o.skip = skip(spec.ReasonUnreadable, "the PDF has no text layer (%d pages): scanned pages would need OCR", pdf.Pages)
		return o
	}
	title := pdf.Title
	if title == "" {
		title = t.title
	}
	content, cut := truncateText(pdf.Text, v.in.Limits.MaxCharsPerSource)
	o.page = &Page{
		N: t.n, Parent: t.parent, URL: t.url, FinalURL: o.final,
		Title: title, Content: content, Depth: t.depth, Status: resp.Status,
		Mode: spec.ModePDF, Pages: pdf.Pages, Truncated: cut || pdf.Cut,
	}
	return o
}
