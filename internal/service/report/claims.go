package report

import (
	"regexp"
	"strings"
)

var (
	heading       = regexp.MustCompile(`^#{1,6}(?:\s|$)`)
	thematicBreak = regexp.MustCompile(`^(?:(?:-\s*){3,}|(?:\*\s*){3,}|(?:_\s*){3,})$`)
	// blockMarker opens a list item or a quote; the sentence starts after it.
	blockMarker = regexp.MustCompile(`^(?:[-*+]|\d{1,9}[.)]|>)(?:\s+|$)`)
	mdLinkDest  = regexp.MustCompile(`\]\((?:[^()\s]|\([^()\s]*\))*\)`)
	bareURL     = regexp.MustCompile(`https?://\S+`)
)

// markdownSentences returns the spans of the sentences of a Markdown body
// that can make claims: the prose of paragraphs, list items, quotes and
// table rows. Headings, code blocks, thematic breaks and reference
// definitions make none. A paragraph may run over several lines; a list
// item, a quote line and a table row start a paragraph of their own.
func markdownSentences(md string) []span {
	var out []span
	para, paraEnd := -1, 0
	flush := func() {
		if para >= 0 {
			for _, sp := range sentenceSpans(md[para:paraEnd]) {
				out = append(out, span{para + sp.start, para + sp.end})
			}
		}
		para = -1
	}
	fence := ""
	pos := 0
	for line := range strings.SplitAfterSeq(md, "\n") {
		lineStart := pos
		pos += len(line)
		body := strings.TrimRight(line, "\r\n")
		trimmed := strings.TrimLeft(body, " \t")
		indent := len(body) - len(trimmed)
		if fence != "" {
			if indent < 4 && strings.HasPrefix(trimmed, fence) && strings.TrimSpace(strings.TrimLeft(trimmed, fence[:1])) == "" {
				fence = ""
			}
			continue
		}
		if f := fenceOpener(trimmed); f != "" && indent < 4 {
			flush()
			fence = f
			continue
		}
		if trimmed == "" || heading.MatchString(trimmed) || thematicBreak.MatchString(trimmed) || refDefinition.MatchString(line) {
			flush()
			continue
		}
		contentStart := lineStart + indent
		switch m := blockMarker.FindStringIndex(trimmed); {
		case m != nil:
			flush()
			para = contentStart + m[1]
		case strings.HasPrefix(trimmed, "|"):
			flush()
			para = contentStart
		case para < 0:
			para = contentStart
		}
		paraEnd = lineStart + len(body)
		if strings.HasPrefix(trimmed, "|") {
			flush()
		}
	}
	flush()
	return out
}

// citedIn returns the source numbers a sentence cites, once each, in
// order, and the byte ranges of its citation groups.
func citedIn(s string) ([]int, []span) {
	var nums []int
	var groups []span
	seen := map[int]bool{}
	for _, m := range citeGroup.FindAllStringIndex(s, -1) {
		if m[0] > 0 && s[m[0]-1] == '\\' {
			continue
		}
		groups = append(groups, span{m[0], m[1]})
		for _, n := range groupNumbers(s[m[0]:m[1]]) {
			if n >= 0 && !seen[n] {
				seen[n] = true
				nums = append(nums, n)
			}
		}
	}
	return nums, groups
}

// claimText is what a sentence says: its text without citations, link
// destinations or bare addresses.
func claimText(s string, groups []span) string {
	var b strings.Builder
	last := 0
	for _, g := range groups {
		b.WriteString(s[last:g.start])
		b.WriteByte(' ')
		last = g.end
	}
	b.WriteString(s[last:])
	t := mdLinkDest.ReplaceAllString(b.String(), "] ")
	return bareURL.ReplaceAllString(t, " ")
}
