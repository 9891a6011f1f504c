// Package report writes the deep-research report: a client of
// OpenAI-compatible chat APIs that streams the answer and falls back from
// one candidate model to the next, the prompt, the extractive report built
// without a model, and the claim-level citation check. Every report has the
// same sections, then the citation check, the sources it was written from
// and those it could not use, all written by sandstep, never by the model.
package report

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Generate asks the model for the report on query from the given sources
// and returns the body it wrote (without a title or sources list of its
// own; see Finish for the rest). onChunk gets the model's raw text as it
// comes.
//
// When no model wrote anything, body is "" and err matches ErrNoAnswer (or
// is ErrNoModel for a nil c): build the Extractive report instead. When the
// answer broke off, body is what was written and err matches ErrPartial.
func Generate(ctx context.Context, c *Client, query string, given []Given, onChunk func(text string)) (body string, comp Completion, err error) {
	if c == nil {
		return "", Completion{}, ErrNoModel
	}
	comp, err = c.Stream(ctx, Prompt(query, given), onChunk)
	if comp.Text == "" {
		return "", comp, err
	}
	return stripOwn(comp.Text), comp, err
}

// ownTitle and listHeading recognise a title the model wrote although it
// was told not to, and a sources list of its own.
var (
	ownTitle    = regexp.MustCompile(`^#\s+\S`)
	listHeading = regexp.MustCompile(`(?i)^\s{0,3}(?:#{1,6}\s*|\*\*)(?:sources|references|bibliography|works cited|citations)(?:\*\*)?\s*:?\s*(?:\*\*)?\s*$`)
)

// stripOwn removes from a model's answer a title and a sources list of its
// own: the report's are sandstep's.
func stripOwn(answer string) string {
	lines := strings.Split(strings.TrimSpace(answer), "\n")
	if len(lines) > 0 && ownTitle.MatchString(lines[0]) {
		lines = lines[1:]
	}
	for i := len(lines) - 1; i >= 0; i-- {
		if listHeading.MatchString(lines[i]) {
			lines = lines[:i]
			break
		}
		if strings.HasPrefix(lines[i], "## ") {
			break // one of the report's own sections comes last
		}
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}

// FinishOptions say how the citation check runs.
type FinishOptions struct {
	// Threshold is the support a claim needs, 0 to 1; 0 means
	// DefaultThreshold.
	Threshold float64
	// Action on unsupported claims: ActionAnnotate (the default),
	// ActionDrop or ActionRevise.
	Action string
	// Client is asked to revise unsupported claims when Action is
	// ActionRevise; with none, they are annotated.
	Client *Client
}

// Result is a finished report.
type Result struct {
	Markdown string
	Details  Details
	// ReviseErr is why a revision asked for did not happen; the report is
	// then annotated instead.
	ReviseErr error
	// Revision is the model's completion of the revision, if one ran.
	Revision Completion
}

// Finish turns a report body (a model's answer or the Extractive one) into
// the report: every claim checked against the text of the sources it
// cites, citations of sources that do not exist removed, the action taken
// on unsupported claims, then the title, the citation check, the sources
// list and the list of what was not used.
func Finish(ctx context.Context, query, body string, given []Given, notUsed []NotUsed, opt FinishOptions) Result {
	threshold := opt.Threshold
	if threshold <= 0 {
		threshold = DefaultThreshold
	}
	action := opt.Action
	if action == "" {
		action = ActionAnnotate
	}
	c := newCorpus(given)
	body = stripOwn(body)
	ch := c.check(body, threshold)
	var res Result
	var revisions []Revision
	if action == ActionRevise && ch.unsupported() > 0 {
		if opt.Client == nil {
			res.ReviseErr = ErrNoModel
		} else {
			var newBody string
			newBody, revisions, res.Revision, res.ReviseErr = revise(ctx, opt.Client, query, ch)
			if res.ReviseErr == nil {
				ch = c.check(newBody, threshold)
			}
		}
	}
	applied := action
	if applied == ActionRevise {
		applied = ActionAnnotate
	}
	final := ch.apply(applied)
	cit := ch.citations(action)
	cit.Revisions = revisions
	if notUsed == nil {
		notUsed = []NotUsed{}
	}
	res.Details = Details{Sources: usedSources(given), NotUsed: notUsed, Citations: cit}
	res.Markdown = Render(query, final, res.Details)
	return res
}

func (ch *checked) unsupported() int {
	n := 0
	for _, cl := range ch.claims {
		if cl.flag != nil {
			n++
		}
	}
	return n
}

func usedSources(given []Given) []UsedSource {
	out := make([]UsedSource, len(given))
	for i, g := range given {
		s := g.Source
		out[i] = UsedSource{
			N: s.N, URL: s.URL, FinalURL: s.FinalURL, Title: s.Title, Mode: g.Mode(),
			Chars: utf8.RuneCountInString(g.Text), Truncated: g.Cut || s.Truncated, Pages: s.Pages,
		}
		if out[i].FinalURL == "" {
			out[i].FinalURL = s.URL
		}
	}
	return out
}

// Render writes the whole report: the title, body, then the sections
// sandstep writes from det.
func Render(query, body string, det Details) string {
	var b strings.Builder
	b.WriteString(title(query))
	b.WriteString(strings.TrimSpace(body))
	b.WriteString("\n\n")
	b.WriteString(CitationSection(det.Citations))
	b.WriteString("\n")
	b.WriteString(SourcesList(det.Sources))
	if len(det.NotUsed) > 0 {
		b.WriteString("\n")
		b.WriteString(NotUsedList(det.NotUsed))
	}
	return b.String()
}

func title(query string) string {
	return "# " + escapeInline(strings.Join(strings.Fields(query), " ")) + "\n\n"
}

// CitationSection reports the citation check: how many cited sentences the
// text of their sources supports, and each that it does not, with the
// best passage found.
func CitationSection(c Citations) string {
	var b strings.Builder
	b.WriteString("## " + HeadingCitations + "\n\n")
	if c.Total == 0 {
		b.WriteString("The report cites no source, so no citation could be checked.\n")
		if c.Removed > 0 {
			b.WriteString(removedNote(c.Removed) + "\n")
		}
		return b.String()
	}
	switch {
	case c.Unsupported == 0 && c.Total == 1:
		b.WriteString("The one cited sentence is supported by the text of the sources it cites")
	case c.Unsupported == 0:
		fmt.Fprintf(&b, "All %d cited sentences are supported by the text of the sources they cite", c.Total)
	default:
		fmt.Fprintf(&b, "%d of %s are supported by the text of the sources they cite (%.0f%%); %d %s not",
			c.Supported, plural(c.Total, "cited sentence", "cited sentences"), *c.Accuracy*100, c.Unsupported, isAre(c.Unsupported))
	}
	fmt.Fprintf(&b, ". Each was checked without a model: its content words and numbers against the best-matching passage of each source it cites (threshold %.2f), and its numbers and quoted phrases against the whole of their text.", c.Threshold)
	if c.Removed > 0 {
		b.WriteString(" " + removedNote(c.Removed))
	}
	if len(c.Revisions) > 0 {
		fmt.Fprintf(&b, " The model revised %s once with the passages in front of it.", plural(len(c.Revisions), "unsupported sentence", "unsupported sentences"))
	}
	b.WriteString("\n")
	if len(c.Flagged) > 0 {
		switch c.Action {
		case ActionDrop:
			b.WriteString("\nThe citations of these sentences were dropped:\n\n")
		default:
			b.WriteString("\nThese sentences are marked " + unverified + " in the text:\n\n")
		}
	}
	for _, f := range c.Flagged {
		fmt.Fprintf(&b, "- “%s”: %s.", escapeInline(shorten(f.Sentence, 300)), flagReason(f))
		if f.Passage != nil {
			fmt.Fprintf(&b, " Best passage in [%d]: “%s”", f.Passage.Source, escapeInline(shorten(f.Passage.Text, 300)))
		}
		if f.Elsewhere != nil {
			fmt.Fprintf(&b, " [%d] says: “%s”", f.Elsewhere.Source, escapeInline(shorten(f.Elsewhere.Text, 300)))
		}
		b.WriteString("\n")
	}
	if c.Omitted > 0 {
		fmt.Fprintf(&b, "- … and %d more.\n", c.Omitted)
	}
	return b.String()
}

// flagReason says in words why a claim is flagged.
func flagReason(f Flag) string {
	var parts []string
	var nums, quotes []string
	for _, m := range f.Missing {
		if strings.HasPrefix(m, `"`) {
			quotes = append(quotes, m)
		} else {
			nums = append(nums, m)
		}
	}
	cited := citeList(f.Cited)
	for _, w := range f.Why {
		switch w {
		case WhyNoSource:
			parts = append(parts, "it cites "+citeList(f.Removed)+", which names no source of this report")
		case WhyLowSupport:
			parts = append(parts, fmt.Sprintf("%s %s little of it (support %.2f)", cited, sayVerb(len(f.Cited)), f.Score))
		case WhyNumberNotFound:
			parts = append(parts, strings.Join(nums, ", ")+" "+isAre(len(nums))+" in none of "+cited)
		case WhyQuoteNotFound:
			parts = append(parts, strings.Join(quotes, ", ")+" "+isAre(len(quotes))+" in none of "+cited)
		}
	}
	return escapeInline(strings.Join(parts, "; "))
}

func sayVerb(n int) string {
	if n == 1 {
		return "says"
	}
	return "say"
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

func removedNote(n int) string {
	if n == 1 {
		return "1 citation of a source that does not exist was removed."
	}
	return fmt.Sprintf("%d citations of sources that do not exist were removed.", n)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// SourcesList is the list of the sources the report was written from, with
// their number, title, address and how they were read.
func SourcesList(sources []UsedSource) string {
	var b strings.Builder
	b.WriteString("## " + HeadingSources + "\n\n")
	if len(sources) == 0 {
		b.WriteString("No source could be read.\n")
		return b.String()
	}
	for _, s := range sources {
		fmt.Fprintf(&b, "- [%d] [%s](<%s>): %s\n", s.N, escapeInline(displayTitle(s.Title, s.URL)), linkURL(s.URL), describe(s))
	}
	return b.String()
}

// describe says how a source was read and how much of it.
func describe(s UsedSource) string {
	var what string
	switch s.Mode {
	case ModeSnippet:
		return fmt.Sprintf("search result snippet only, %s", plural(s.Chars, "character", "characters"))
	case ModePDF:
		what = "PDF, " + plural(s.Pages, "page", "pages")
	case ModeBrowser:
		what = "web page, rendered in a browser"
	default:
		what = "web page"
	}
	what += ", " + plural(s.Chars, "character", "characters")
	if s.Truncated {
		what += " (shortened)"
	}
	return what
}

// maxNotUsedListed bounds the not-used list in the markdown; the report's
// JSON has all of them.
const maxNotUsedListed = 40

// NotUsedList lists the URLs found that gave the report no text, and why.
func NotUsedList(notUsed []NotUsed) string {
	var b strings.Builder
	b.WriteString("## " + HeadingNotUsed + "\n\n")
	for i, n := range notUsed {
		if i == maxNotUsedListed {
			fmt.Fprintf(&b, "- … and %d more (see the report's JSON).\n", len(notUsed)-i)
			break
		}
		fmt.Fprintf(&b, "- <%s>: %s", linkURL(n.URL), n.Reason)
		if n.Message != "" {
			b.WriteString(" (" + escapeInline(shorten(n.Message, 200)) + ")")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// displayTitle is a source's title, or its address without the scheme.
func displayTitle(title, addr string) string {
	if t := shorten(title, 200); t != "" {
		return t
	}
	if u, err := url.Parse(addr); err == nil && u.Host != "" {
		return shorten(u.Host+strings.TrimSuffix(u.EscapedPath(), "/"), 200)
	}
	return shorten(addr, 200)
}

var markdownSpecial = strings.NewReplacer(`\`, `\\`, "[", `\[`, "]", `\]`, "*", `\*`, "_", `\_`, "`", "\\`", "<", `\<`, ">", `\>`)

// escapeInline keeps text from turning into Markdown.
func escapeInline(s string) string { return markdownSpecial.Replace(s) }

// linkURL makes an address safe inside <...>.
func linkURL(u string) string {
	return strings.NewReplacer("<", "%3C", ">", "%3E", " ", "%20", "\n", "", "\r", "").Replace(u)
}
