// Package report writes the deep-research report: a client of
// OpenAI-compatible chat APIs that streams the answer and falls back from
// one candidate model to the next, the prompt, the extractive report built
// without a model, and FixCitations, which keeps only citations of sources
// that were actually collected. Every report has the same sections and
// ends with the numbered sources list, written by us, never by the model.
package report

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/sandstep/sandstep/internal/store"
)

// Generate asks the model for the report on query from sources and returns
// it finished (see Finish). onChunk gets the model's raw text as it comes.
//
// When no model wrote anything, md is "" and err matches ErrNoAnswer (or is
// ErrNoModel for a nil c): build the Extractive report instead. When the
// answer broke off, md is the finished report of what was written and err
// matches ErrPartial.
func Generate(ctx context.Context, c *Client, query string, sources []store.Source, opt PromptOptions, onChunk func(text string)) (md string, comp Completion, err error) {
	if c == nil {
		return "", Completion{}, ErrNoModel
	}
	messages, used := Prompt(query, sources, opt)
	comp, err = c.Stream(ctx, messages, onChunk)
	if comp.Text == "" {
		return "", comp, err
	}
	return Finish(query, comp.Text, used), comp, err
}

// ownHeading and listHeading recognise a title the model wrote although it
// was told not to, and a sources list of its own.
var (
	ownTitle    = regexp.MustCompile(`^#\s+\S`)
	listHeading = regexp.MustCompile(`(?i)^\s{0,3}(?:#{1,6}\s*|\*\*)(?:sources|references|bibliography|works cited|citations)(?:\*\*)?\s*:?\s*(?:\*\*)?\s*$`)
)

// Finish turns a model's answer into the report: our title, the answer
// without a title or sources list of its own and with every citation of a
// source outside sources removed, then the sources list.
func Finish(query, answer string, sources []store.Source) string {
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
	valid := make(map[int]bool, len(sources))
	for _, s := range sources {
		valid[s.N] = true
	}
	body := strings.TrimSpace(FixCitations(strings.Join(lines, "\n"), valid))
	return title(query) + body + "\n\n" + SourcesList(sources)
}

func title(query string) string {
	return "# " + escapeInline(strings.Join(strings.Fields(query), " ")) + "\n\n"
}

// SourcesList is the report's last section: every source with its number,
// title and address.
func SourcesList(sources []store.Source) string {
	var b strings.Builder
	b.WriteString("## " + HeadingSources + "\n\n")
	if len(sources) == 0 {
		b.WriteString("No sources were collected.\n")
		return b.String()
	}
	for _, s := range sources {
		fmt.Fprintf(&b, "- [%d] [%s](<%s>)\n", s.N, escapeInline(displayTitle(s)), linkURL(s.URL))
	}
	return b.String()
}

// displayTitle is a source's title, or its address without the scheme.
func displayTitle(s store.Source) string {
	if t := shorten(s.Title, 200); t != "" {
		return t
	}
	if u, err := url.Parse(s.URL); err == nil && u.Host != "" {
		return shorten(u.Host+strings.TrimSuffix(u.EscapedPath(), "/"), 200)
	}
	return shorten(s.URL, 200)
}

var markdownSpecial = strings.NewReplacer(`\`, `\\`, "[", `\[`, "]", `\]`, "*", `\*`, "_", `\_`, "`", "\\`", "<", `\<`, ">", `\>`)

// escapeInline keeps text from turning into Markdown.
func escapeInline(s string) string { return markdownSpecial.Replace(s) }

// linkURL makes an address safe inside <...>.
func linkURL(u string) string {
	return strings.NewReplacer("<", "%3C", ">", "%3E", " ", "%20", "\n", "", "\r", "").Replace(u)
}
