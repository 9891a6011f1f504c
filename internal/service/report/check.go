package report

import (
	"math"
	"slices"
	"strconv"
	"strings"
)

// DefaultThreshold is the support a claim needs: half of its content
// words, weighted by rarity, in one passage of a cited source.
const DefaultThreshold = 0.5

// Actions on unsupported claims ([research.citations] action).
const (
	ActionAnnotate = "annotate"
	ActionDrop     = "drop"
	ActionRevise   = "revise"
)

// unverified marks an unsupported claim in the text.
const unverified = "*(unverified)*"

// corpus is the given sources, indexed for the check.
type corpus struct {
	srcs []*srcIndex
	byN  map[int]*srcIndex
	df   map[string]int
	// ids numbers every term of the sources; slot maps a term's id to its
	// index in the claim being scored (-1: not in it), so that scoring a
	// source is a slice lookup per token, not a map lookup.
	ids  map[string]int32
	slot []int32
}

// srcIndex is one source's text as the check reads it.
type srcIndex struct {
	n     int
	text  string
	toks  []token         // content words and numbers, in order
	ids   []int32         // the corpus id of each token's term
	nums  map[string]bool // the numbers of the text
	words string          // every word, lower case, space separated and padded: quotes are searched in it
	sents []span          // sentence spans: passages are one or two whole sentences
	// sentToks[i] is the range of toks in sentence i.
	sentToks []span
}

func newCorpus(given []Given) *corpus {
	c := &corpus{byN: map[int]*srcIndex{}, df: map[string]int{}, ids: map[string]int32{}}
	for _, g := range given {
		ix := &srcIndex{n: g.Source.N, text: g.Text, nums: map[string]bool{}}
		var words strings.Builder
		words.WriteByte(' ')
		seen := map[string]bool{}
		tokens(g.Text, func(t token) {
			words.WriteString(t.word)
			words.WriteByte(' ')
			if t.term == "" {
				return
			}
			ix.toks = append(ix.toks, t)
			id, ok := c.ids[t.term]
			if !ok {
				id = int32(len(c.ids))
				c.ids[t.term] = id
				c.slot = append(c.slot, -1)
			}
			ix.ids = append(ix.ids, id)
			if t.num {
				ix.nums[t.term] = true
			}
			if !seen[t.term] {
				seen[t.term] = true
				c.df[t.term]++
			}
		})
		ix.words = words.String()
		pos, t := 0, 0
		for line := range strings.SplitAfterSeq(g.Text, "\n") {
			for _, sp := range sentenceSpans(line) {
				sp = span{pos + sp.start, pos + sp.end}
				for t < len(ix.toks) && ix.toks[t].start < sp.start {
					t++
				}
				first := t
				for t < len(ix.toks) && ix.toks[t].end <= sp.end {
					t++
				}
				ix.sents = append(ix.sents, sp)
				ix.sentToks = append(ix.sentToks, span{first, t})
			}
			pos += len(line)
		}
		c.srcs = append(c.srcs, ix)
		c.byN[ix.n] = ix
	}
	return c
}

// claimTerms is what the check looks for of one sentence.
type claimTerms struct {
	terms   []string
	weights []float64
	total   float64
	pos     map[string]int
	nums    []string
	numText []string // each number as the sentence writes it
	quotes  [][]string
}

// weight makes rare words count more: a word in every source says little
// about which one a sentence comes from; one in none is likely made up.
func (c *corpus) weight(term string) float64 {
	return 1 + math.Log(float64(len(c.srcs)+1)/float64(c.df[term]+1))
}

func (c *corpus) terms(text string) *claimTerms {
	ct := &claimTerms{pos: map[string]int{}}
	tokens(text, func(t token) {
		if t.term == "" {
			return
		}
		if _, dup := ct.pos[t.term]; dup {
			return
		}
		ct.pos[t.term] = len(ct.terms)
		ct.terms = append(ct.terms, t.term)
		w := c.weight(t.term)
		ct.weights = append(ct.weights, w)
		ct.total += w
		if t.num {
			ct.nums = append(ct.nums, t.term)
			ct.numText = append(ct.numText, text[t.start:t.end])
		}
	})
	ct.quotes = quotedPhrases(text)
	return ct
}

// window is the best passage of a source for a claim: the content tokens
// l..r and the share of the claim's weight they cover.
type window struct {
	src   *srcIndex
	l, r  int
	score float64
}

// bind points the corpus's slots at ct's terms for best; unbind resets
// them. A corpus scores one claim at a time.
func (c *corpus) bind(ct *claimTerms) {
	for i, t := range ct.terms {
		if id, ok := c.ids[t]; ok {
			c.slot[id] = int32(i)
		}
	}
}

func (c *corpus) unbind(ct *claimTerms) {
	for _, t := range ct.terms {
		if id, ok := c.ids[t]; ok {
			c.slot[id] = -1
		}
	}
}

// best slides a window over the source's content tokens and returns the
// one that covers most of the claim's weight (the corpus bound to ct). The
// window holds about twice as many content tokens as the claim has, so a
// claim drawn from two neighbouring sentences is found whole.
func (c *corpus) best(ct *claimTerms, src *srcIndex) window {
	w := window{src: src, r: -1}
	if ct.total == 0 || len(src.ids) == 0 {
		return w
	}
	size := min(max(2*len(ct.terms)+4, 12), 80)
	counts := make([]int, len(ct.terms))
	covered, bestCovered := 0.0, 0.0
	l := 0
	for r, id := range src.ids {
		if i := c.slot[id]; i >= 0 {
			if counts[i] == 0 {
				covered += ct.weights[i]
			}
			counts[i]++
		}
		for r-l+1 > size {
			if i := c.slot[src.ids[l]]; i >= 0 {
				counts[i]--
				if counts[i] == 0 {
					covered -= ct.weights[i]
				}
			}
			l++
		}
		if covered > bestCovered+1e-9 {
			bestCovered, w.l, w.r = covered, l, r
		}
	}
	if w.r < 0 {
		return w
	}
	w.score = bestCovered / ct.total
	return w
}

// has tells whether the source holds every number and quoted phrase in
// want (numbers as terms, quotes as word sequences).
func (src *srcIndex) hasNumber(n string) bool { return src.nums[n] }

func (src *srcIndex) hasQuote(words []string) bool {
	return strings.Contains(src.words, " "+strings.Join(words, " ")+" ")
}

// maxPassage bounds a passage's text.
const maxPassage = 600

// passage returns the stretch of one or two neighbouring sentences of the
// window's source that covers most of the claim (a single sentence on a
// tie), or nil when nothing of the source matches.
func (c *corpus) passage(ct *claimTerms, w window) *Passage {
	if w.r < 0 || w.src == nil {
		return nil
	}
	src := w.src
	cover := func(a, b int) float64 {
		seen := make([]bool, len(ct.terms))
		sum := 0.0
		for _, id := range src.ids[src.sentToks[a].start:src.sentToks[b].end] {
			if i := c.slot[id]; i >= 0 && !seen[i] {
				seen[i] = true
				sum += ct.weights[i]
			}
		}
		return sum / ct.total
	}
	bestA, bestB, best := -1, -1, 0.0
	for i := range src.sents {
		if c := cover(i, i); c > best+1e-9 {
			bestA, bestB, best = i, i, c
		}
		if i+1 < len(src.sents) {
			if c := cover(i, i+1); c > best+1e-9 {
				bestA, bestB, best = i, i+1, c
			}
		}
	}
	if bestA < 0 {
		return nil
	}
	text := strings.Join(strings.Fields(src.text[src.sents[bestA].start:src.sents[bestB].end]), " ")
	if len(text) > maxPassage {
		text, _ = trimText(text, maxPassage)
	}
	return &Passage{Source: src.n, Text: text, Score: round2(best)}
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }

// claim is one sentence of the report and what the check found.
type claim struct {
	span
	text    string
	cited   []int // every number cited, as written
	valid   []int // those that name a given source
	invalid []int
	counted bool // a claim: it cites and says something to check
	flag    *Flag
}

// checked is a body and its claims.
type checked struct {
	body      string
	claims    []*claim
	corpus    *corpus
	threshold float64
}

// check finds the claims of body and checks each against its cited sources.
func (c *corpus) check(body string, threshold float64) *checked {
	ch := &checked{body: body, corpus: c, threshold: threshold}
	for _, sp := range markdownSentences(body) {
		text := body[sp.start:sp.end]
		cited, groups := citedIn(text)
		if len(cited) == 0 {
			continue
		}
		cl := &claim{span: sp, text: text, cited: cited}
		for _, n := range cited {
			if c.byN[n] != nil {
				cl.valid = append(cl.valid, n)
			} else {
				cl.invalid = append(cl.invalid, n)
			}
		}
		ct := c.terms(claimText(text, groups))
		if len(ct.terms) > 0 {
			cl.counted = true
			cl.flag = c.judge(cl, ct, threshold)
		}
		ch.claims = append(ch.claims, cl)
	}
	return ch
}

// judge returns the flag of an unsupported claim, or nil.
func (c *corpus) judge(cl *claim, ct *claimTerms, threshold float64) *Flag {
	f := &Flag{Sentence: cl.text, Cited: slices.Clone(cl.valid), Removed: slices.Clone(cl.invalid)}
	if f.Cited == nil {
		f.Cited = []int{}
	}
	c.bind(ct)
	defer c.unbind(ct)
	var best window
	if len(cl.valid) == 0 {
		f.Why = []string{WhyNoSource}
	} else {
		for _, n := range cl.valid {
			if w := c.best(ct, c.byN[n]); w.score > best.score || best.src == nil {
				best = w
			}
		}
		f.Score = round2(best.score)
		if best.score < threshold {
			f.Why = append(f.Why, WhyLowSupport)
		}
		for i, n := range ct.nums {
			if !slices.ContainsFunc(cl.valid, func(s int) bool { return c.byN[s].hasNumber(n) }) {
				f.Missing = append(f.Missing, ct.numText[i])
				if !slices.Contains(f.Why, WhyNumberNotFound) {
					f.Why = append(f.Why, WhyNumberNotFound)
				}
			}
		}
		for _, q := range ct.quotes {
			if !slices.ContainsFunc(cl.valid, func(s int) bool { return c.byN[s].hasQuote(q) }) {
				f.Missing = append(f.Missing, `"`+strings.Join(q, " ")+`"`)
				if !slices.Contains(f.Why, WhyQuoteNotFound) {
					f.Why = append(f.Why, WhyQuoteNotFound)
				}
			}
		}
		if len(f.Why) == 0 {
			return nil
		}
		f.Passage = c.passage(ct, best)
	}
	// A source the sentence does not cite may say it: worth showing.
	var other window
	for _, src := range c.srcs {
		if slices.Contains(cl.valid, src.n) {
			continue
		}
		if w := c.best(ct, src); w.score > other.score {
			if slices.ContainsFunc(ct.nums, func(n string) bool { return !src.hasNumber(n) }) ||
				slices.ContainsFunc(ct.quotes, func(q []string) bool { return !src.hasQuote(q) }) {
				continue
			}
			other = w
		}
	}
	if other.src != nil && other.score >= threshold {
		f.Elsewhere = c.passage(ct, other)
	}
	return f
}

// apply writes the checked body with every citation of a source that does
// not exist removed and the action taken on unsupported claims: annotate
// marks them, drop removes their citations.
func (ch *checked) apply(action string) string {
	var b strings.Builder
	b.Grow(len(ch.body) + 32*len(ch.claims))
	last := 0
	for _, cl := range ch.claims {
		b.WriteString(ch.body[last:cl.start])
		last = cl.end
		valid := map[int]bool{}
		for _, n := range cl.valid {
			valid[n] = true
		}
		switch {
		case cl.flag != nil && action == ActionDrop:
			b.WriteString(strings.TrimSpace(FixCitations(cl.text, nil)))
			cl.flag.Action = "dropped"
		case cl.flag != nil:
			b.WriteString(annotate(strings.TrimSpace(FixCitations(cl.text, valid))))
			cl.flag.Action = "annotated"
		default:
			b.WriteString(strings.TrimSpace(FixCitations(cl.text, valid)))
		}
	}
	b.WriteString(ch.body[last:])
	// Citations outside sentences (a heading, say) go by the same rule.
	all := map[int]bool{}
	for n := range ch.corpus.byN {
		all[n] = true
	}
	return FixCitations(b.String(), all)
}

// annotate marks a sentence as unverified, before its final punctuation
// when it ends with some.
func annotate(s string) string {
	p := len(s)
	for p > 0 && strings.ContainsRune(".!?", rune(s[p-1])) {
		p--
	}
	if p == len(s) || p == 0 {
		return s + " " + unverified
	}
	return s[:p] + " " + unverified + s[p:]
}

// citations sums the check up.
func (ch *checked) citations(action string) Citations {
	c := Citations{Method: "extractive", Threshold: ch.threshold, Action: action, Flagged: []Flag{}}
	for _, cl := range ch.claims {
		c.Removed += len(cl.invalid)
		if !cl.counted {
			continue
		}
		c.Total++
		if cl.flag == nil {
			c.Supported++
			continue
		}
		c.Unsupported++
		c.Flagged = append(c.Flagged, *cl.flag)
	}
	if c.Total > 0 {
		a := float64(c.Supported) / float64(c.Total)
		a = math.Round(a*10000) / 10000
		c.Accuracy = &a
	}
	return c
}

func citeList(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = "[" + strconv.Itoa(n) + "]"
	}
	return strings.Join(parts, ", ")
}
