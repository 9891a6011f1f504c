package report

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/sandstep/sandstep/internal/service/store"
)

// Extractive writes the report's body without a model, from the given
// sources' own sentences: each is scored against the query's words (more
// distinct words, then more mentions, then earlier in its page) and quoted
// with the number of its source. It has the sections of a model-written
// report and cites only the numbers of the given sources; Finish adds the
// rest.
func Extractive(query string, given []Given) string {
	var b strings.Builder
	ex := newExtraction(query, given)

	// Sections take their sentences in this order, so that the narrow ones
	// (trade-offs, open questions) are not used up as findings first.
	var summary []string
	for _, sn := range ex.ranked {
		if len(summary) == 3 {
			break
		}
		if s := sn.sents[0]; !s.fragment || len(ex.ranked) == 1 {
			summary = append(summary, ex.take(s))
		}
	}
	implications := ex.roundRobin(4, tradeoff)
	open := ex.roundRobin(3, openQuestion)
	findings := ex.roundRobin(8, func(s *sentence) bool { return !s.question() })
	if len(findings) == 0 {
		// Few sentences: the summary's are the findings.
		findings = ex.taken
	}

	b.WriteString("## " + HeadingSummary + "\n\n")
	switch {
	case len(given) == 0:
		// Said for both causes: the search found nothing, or what it found
		// and the seeds given could not be read (the not-used list says why).
		b.WriteString("No sources were collected for this question, so this report has no findings: the search found no page, or none of the pages found or given could be read (any that were are listed under what was not used, with the reason). Search again with other backends, or give seed URLs that can be read.\n\n")
	case len(summary) == 0:
		fmt.Fprintf(&b, "No readable text on this question was found in %s. The Sources section below lists %s.\n\n", countSources(len(given)), itThem(len(given)))
	default:
		summary = append(summary, fmt.Sprintf("The report quotes %s without a language model.", countSources(len(given))))
		b.WriteString(escapeLeading(strings.Join(summary, " ")) + "\n\n")
	}

	b.WriteString("## " + HeadingFindings + "\n\n")
	if len(findings) == 0 {
		b.WriteString("No findings could be extracted.\n\n")
	} else {
		for _, f := range findings {
			b.WriteString("- " + bullet(f) + "\n")
		}
		b.WriteString("\n")
	}

	b.WriteString("## " + HeadingEvidence + "\n\n")
	evidence := 0
	for _, sn := range ex.byNumber() {
		if evidence == 12 {
			break
		}
		picked := slices.Clone(sn.sents[:min(3, len(sn.sents))])
		slices.SortFunc(picked, func(a, b *sentence) int { return cmp.Compare(a.idx, b.idx) })
		texts := make([]string, len(picked))
		for i, s := range picked {
			texts[i] = escapeInline(s.text)
		}
		texts[len(texts)-1] = cite(texts[len(texts)-1], sn.src.N)
		fmt.Fprintf(&b, "**%s**: %s\n\n", escapeInline(displayTitle(sn.src.Title, sn.src.URL)), strings.Join(texts, " "))
		evidence++
	}
	if evidence == 0 {
		b.WriteString("The sources gave no text to quote.\n\n")
	}

	b.WriteString("## " + HeadingImplications + "\n\n")
	if len(implications) > 0 {
		for _, s := range implications {
			b.WriteString("- " + bullet(s) + "\n")
		}
		b.WriteString("\n")
	} else {
		b.WriteString("The collected sources say little about trade-offs directly; weigh the findings above against each other.\n\n")
	}

	b.WriteString("## " + HeadingOpen + "\n\n")
	if len(open) > 0 {
		for _, s := range open {
			b.WriteString("- " + bullet(s) + "\n")
		}
		b.WriteString("\n")
	}
	// Said without [n]: a citation would be checked as a claim of the
	// source.
	var unread []string
	for _, g := range given {
		if g.Mode() == ModeSnippet {
			unread = append(unread, strconv.Itoa(g.Source.N))
		}
	}
	switch {
	case len(given) == 0:
	case len(unread) == len(given):
		b.WriteString("Only search results were collected, not the pages themselves; reading the pages would give fuller evidence. ")
	case len(unread) > 0:
		fmt.Fprintf(&b, "The pages of sources %s could not be read; only their search results were collected. ", strings.Join(unread, ", "))
	}
	b.WriteString("This report was extracted without a language model: check the cited pages before relying on it.\n")
	return b.String()
}

func countSources(n int) string {
	if n == 1 {
		return "the one collected source"
	}
	return fmt.Sprintf("the %d collected sources", n)
}

func itThem(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}

// sentence is one candidate sentence of a source.
type sentence struct {
	text  string
	n     int // source number
	idx   int // position in the source
	score float64
	words []string
	taken bool
	// fragment is a search snippet cut off mid-sentence.
	fragment bool
}

func (s *sentence) question() bool {
	return strings.HasSuffix(strings.TrimRight(s.text, `"')]”’»`), "?")
}

type sourceNotes struct {
	src   store.Source
	sents []*sentence // best first
}

type extraction struct {
	ranked []*sourceNotes // best sentence first, then lower number
	taken  []*sentence
}

// maxSentences bounds the work per source; the lead of a page carries its
// gist.
const maxSentences = 400

func newExtraction(query string, given []Given) *extraction {
	terms := queryTerms(query)
	ex := &extraction{}
	seen := map[string]bool{} // the same sentence quoted by several pages counts once
	for _, g := range given {
		src := g.Source
		snippetOnly := g.Mode() == ModeSnippet
		sn := &sourceNotes{src: src}
		for idx, t := range sentences(g.Text) {
			if idx == maxSentences {
				break
			}
			ws := words(t)
			if !usable(t, ws, snippetOnly) {
				continue
			}
			key := strings.Join(ws, " ")
			if seen[key] {
				continue
			}
			seen[key] = true
			fragment := !endsSentence(t)
			if fragment {
				t += " …"
			}
			sn.sents = append(sn.sents, &sentence{text: t, n: src.N, idx: idx, score: score(ws, terms, idx), words: ws, fragment: fragment})
		}
		if len(sn.sents) == 0 {
			continue
		}
		slices.SortStableFunc(sn.sents, func(a, b *sentence) int {
			return cmp.Or(cmp.Compare(b.score, a.score), cmp.Compare(a.idx, b.idx))
		})
		ex.ranked = append(ex.ranked, sn)
	}
	slices.SortStableFunc(ex.ranked, func(a, b *sourceNotes) int {
		return cmp.Or(cmp.Compare(b.sents[0].score, a.sents[0].score), cmp.Compare(a.src.N, b.src.N))
	})
	return ex
}

func (ex *extraction) byNumber() []*sourceNotes {
	out := slices.Clone(ex.ranked)
	slices.SortFunc(out, func(a, b *sourceNotes) int { return cmp.Compare(a.src.N, b.src.N) })
	return out
}

// take marks s used and returns it quoted with its citation.
func (ex *extraction) take(s *sentence) string {
	s.taken = true
	ex.taken = append(ex.taken, s)
	return cite(escapeInline(s.text), s.n)
}

// roundRobin takes up to limit unused sentences that want accepts (nil:
// all): the best of each source in turn, then the second best, and so on.
// Past the first round only sentences that match the question are taken.
func (ex *extraction) roundRobin(limit int, want func(*sentence) bool) []*sentence {
	var out []*sentence
	for round := 0; len(out) < limit; round++ {
		added := false
		for _, sn := range ex.ranked {
			if len(out) == limit {
				break
			}
			i := slices.IndexFunc(sn.sents, func(s *sentence) bool { return !s.taken && (want == nil || want(s)) })
			if i < 0 || (round > 0 && sn.sents[i].score < 1) {
				continue
			}
			sn.sents[i].taken = true
			out = append(out, sn.sents[i])
			added = true
		}
		if !added {
			break
		}
	}
	return out
}

func bullet(s *sentence) string {
	return escapeLeading(cite(escapeInline(s.text), s.n))
}

// score ranks a sentence: distinct query words count most, then how often
// they appear, then how early the sentence is in its page.
func score(ws, terms []string, idx int) float64 {
	present := map[string]int{}
	for _, w := range ws {
		present[stem(w)]++
	}
	distinct, mentions := 0, 0
	for _, t := range terms {
		if c := present[t]; c > 0 {
			distinct++
			mentions += c
		}
	}
	s := 2*float64(distinct) + 0.3*float64(min(mentions, 5)) + 0.6/float64(1+idx)
	if len(ws) >= 10 && len(ws) <= 40 {
		s += 0.2
	}
	return s
}

// boilerplate marks text from a page's chrome rather than its body.
var boilerplate = []string{"cookie", "javascript", "sign in", "log in", "subscribe", "newsletter", "privacy policy",
	"terms of service", "all rights reserved", "click here", "skip to", "your browser", "enable js"}

// usable keeps sentences of prose: 6 to 80 words, some lower case, ending
// as a sentence ends (a search snippet may stop mid-sentence), and not the
// page's chrome.
func usable(t string, ws []string, snippetOnly bool) bool {
	if len(ws) < 6 || len(ws) > 80 || len(t) > 800 {
		return false
	}
	if !strings.ContainsFunc(t, unicode.IsLower) {
		return false
	}
	if !snippetOnly && !endsSentence(t) {
		return false
	}
	lower := strings.ToLower(t)
	for _, b := range boilerplate {
		if strings.Contains(lower, b) {
			return false
		}
	}
	return true
}

func endsSentence(t string) bool {
	t = strings.TrimRight(t, `"')]”’»`)
	r, _ := utf8.DecodeLastRuneInString(t)
	return r == '.' || r == '!' || r == '?' || r == '…'
}

// cite puts [n] before a sentence's final . ! or ? ("... growth [3]."), or
// after the sentence when it ends otherwise.
func cite(t string, n int) string {
	c := fmt.Sprintf("[%d]", n)
	if r, size := utf8.DecodeLastRuneInString(t); r == '.' || r == '!' || r == '?' {
		return t[:len(t)-size] + " " + c + string(r)
	}
	return t + " " + c
}

// escapeLeading keeps a bullet's text from opening a heading, a quote or a
// nested list.
func escapeLeading(t string) string {
	if t == "" {
		return t
	}
	if strings.ContainsRune("#>-+=|", rune(t[0])) {
		return `\` + t
	}
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i > 0 && i < len(t) && (t[i] == '.' || t[i] == ')') {
		return t[:i] + `\` + t[i:]
	}
	return t
}

var (
	tradeoffWords = wordSet(`however but although though whereas tradeoff tradeoffs trade drawback drawbacks downside downsides
limitation limitations limited risk risks cost costs costly expensive cheaper advantage advantages disadvantage disadvantages
benefit benefits compared faster slower depends challenge challenges overhead`)
	openWords = wordSet(`unclear unknown uncertain uncertainty open remains remain further future yet debate debated
controversial investigate investigating`)
)

func wordSet(s string) map[string]bool {
	m := map[string]bool{}
	for w := range strings.FieldsSeq(s) {
		m[w] = true
	}
	return m
}

func hasWord(s *sentence, set map[string]bool) bool {
	return slices.ContainsFunc(s.words, func(w string) bool { return set[w] })
}

// tradeoff selects sentences that weigh one thing against another.
func tradeoff(s *sentence) bool { return hasWord(s, tradeoffWords) }

// openQuestion selects questions the pages ask and what they leave open.
func openQuestion(s *sentence) bool {
	return s.question() || hasWord(s, openWords)
}
