package docsearch

import (
	"container/heap"
	"math"
	"strings"
	"unicode"
)

// BM25 is an Okapi BM25 index over a fixed set of documents (Robertson and
// Zaragoza, "The Probabilistic Relevance Framework", 2009), with the
// non-negative idf of Lucene. It is built once and then only read, so it is
// safe for concurrent searches.
//
// No Go BM25 library is both well kept and light: the proxy refuses the
// small ones, and bleve brings a persistent index and a large dependency
// tree to a Lambda that searches a few thousand chunks in memory.
type BM25 struct {
	k1, b    float64
	postings map[string][]posting
	docLen   []int32
	avgLen   float64
}

type posting struct {
	doc int32
	tf  int32
}

// Okapi parameters: the usual values, which hold for short technical text.
const (
	bm25K1 = 1.2
	bm25B  = 0.75
)

// NewBM25 indexes docs, each given as its tokens (see Tokenize).
func NewBM25(docs [][]string) *BM25 {
	x := &BM25{k1: bm25K1, b: bm25B, postings: make(map[string][]posting), docLen: make([]int32, len(docs))}
	var total int
	tf := make(map[string]int32)
	for i, toks := range docs {
		clear(tf)
		for _, t := range toks {
			tf[t]++
		}
		for t, n := range tf {
			x.postings[t] = append(x.postings[t], posting{doc: int32(i), tf: n})
		}
		x.docLen[i] = int32(len(toks))
		total += len(toks)
	}
	if len(docs) > 0 {
		x.avgLen = float64(total) / float64(len(docs))
	}
	return x
}

// Len is the number of documents.
func (x *BM25) Len() int { return len(x.docLen) }

// idf of a term found in df documents of the index (plus extra documents
// scored alongside it).
func (x *BM25) idf(df, extra int) float64 {
	n := float64(len(x.docLen) + extra)
	return math.Log(1 + (n-float64(df)+0.5)/(float64(df)+0.5))
}

func (x *BM25) termScore(idf float64, tf, dl int32) float64 {
	norm := 1.0
	if x.avgLen > 0 {
		norm = 1 - x.b + x.b*float64(dl)/x.avgLen
	}
	f := float64(tf)
	return idf * f * (x.k1 + 1) / (f + x.k1*norm)
}

// Hit is a scored document.
type Hit struct {
	Doc   int
	Score float64
}

// Search returns the k best documents for the query tokens that keep
// accepts (nil accepts all), best first; documents that match no token are
// never returned.
func (x *BM25) Search(query []string, k int, keep func(doc int) bool) []Hit {
	if k <= 0 || len(x.docLen) == 0 {
		return nil
	}
	scores := make(map[int32]float64)
	for _, t := range uniq(query) {
		ps := x.postings[t]
		if len(ps) == 0 {
			continue
		}
		idf := x.idf(len(ps), 0)
		for _, p := range ps {
			scores[p.doc] += x.termScore(idf, p.tf, x.docLen[p.doc])
		}
	}
	h := &hitHeap{}
	for d, s := range scores {
		if keep != nil && !keep(int(d)) {
			continue
		}
		pushTop(h, Hit{Doc: int(d), Score: s}, k)
	}
	return h.sorted()
}

// ScoreExtra scores documents outside the index (a session's code
// modules) against the query with the index's statistics, counting them
// in, so their scores compare with Search's.
func (x *BM25) ScoreExtra(query []string, docs [][]string) []float64 {
	q := uniq(query)
	extraDF := make(map[string]int, len(q))
	tfs := make([]map[string]int32, len(docs))
	for i, toks := range docs {
		tfs[i] = make(map[string]int32)
		for _, t := range toks {
			tfs[i][t]++
		}
		for _, t := range q {
			if tfs[i][t] > 0 {
				extraDF[t]++
			}
		}
	}
	out := make([]float64, len(docs))
	for i, toks := range docs {
		for _, t := range q {
			tf := tfs[i][t]
			if tf == 0 {
				continue
			}
			idf := x.idf(len(x.postings[t])+extraDF[t], len(docs))
			out[i] += x.termScore(idf, tf, int32(len(toks)))
		}
	}
	return out
}

// Tokenize lowercases text and splits it into words of letters and
// digits; identifiers also yield their camelCase and snake_case parts
// ("createIssue" gives "createissue", "create", "issue"), since docs and
// questions name the same thing both ways. English stop words are dropped
// and a plural "s" is taken off.
func Tokenize(text string) []string {
	var out []string
	fields := strings.FieldsFunc(text, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_'
	})
	for _, f := range fields {
		parts := identParts(f)
		whole := normalize(strings.ReplaceAll(f, "_", ""))
		if whole != "" {
			out = append(out, whole)
		}
		if len(parts) > 1 {
			for _, p := range parts {
				if p = normalize(p); p != "" && p != whole {
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// identParts splits an identifier at underscores and lower-to-upper case
// changes ("HTTPServer" stays one part at the acronym: "httpserver"
// matches as a whole).
func identParts(f string) []string {
	var parts []string
	start := 0
	rs := []rune(f)
	for i := 1; i <= len(rs); i++ {
		if i == len(rs) || rs[i] == '_' || (unicode.IsUpper(rs[i]) && unicode.IsLower(rs[i-1])) {
			if p := strings.Trim(string(rs[start:i]), "_"); p != "" {
				parts = append(parts, p)
			}
			start = i
		}
	}
	return parts
}

func normalize(w string) string {
	w = strings.ToLower(w)
	if len(w) < 2 && !(len(w) == 1 && w[0] >= '0' && w[0] <= '9') {
		return ""
	}
	if stopWords[w] {
		return ""
	}
	if len(w) > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") && !strings.HasSuffix(w, "us") && !strings.HasSuffix(w, "is") {
		w = w[:len(w)-1]
		if strings.HasSuffix(w, "ie") && len(w) > 3 {
			w = w[:len(w)-2] + "y"
		}
	}
	return w
}

var stopWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`a an and are as at be but by do does for from has have how i if in into is it its
		of on or so that the their then there these this to was what when where which who why will with you your can`) {
		m[w] = true
	}
	return m
}()

func uniq(toks []string) []string {
	seen := make(map[string]bool, len(toks))
	out := toks[:0:0]
	for _, t := range toks {
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}

// hitHeap is a min-heap of the best hits so far.
type hitHeap []Hit

func (h hitHeap) Len() int { return len(h) }
func (h hitHeap) Less(i, j int) bool {
	if h[i].Score != h[j].Score {
		return h[i].Score < h[j].Score
	}
	return h[i].Doc > h[j].Doc
}
func (h hitHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *hitHeap) Push(v any)   { *h = append(*h, v.(Hit)) }
func (h *hitHeap) Pop() any {
	old := *h
	v := old[len(old)-1]
	*h = old[:len(old)-1]
	return v
}

func pushTop(h *hitHeap, hit Hit, k int) {
	if h.Len() < k {
		heap.Push(h, hit)
		return
	}
	if (*h)[0].Score < hit.Score || ((*h)[0].Score == hit.Score && (*h)[0].Doc > hit.Doc) {
		(*h)[0] = hit
		heap.Fix(h, 0)
	}
}

// sorted empties the heap, best first (ties by lower doc number).
func (h *hitHeap) sorted() []Hit {
	out := make([]Hit, h.Len())
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = heap.Pop(h).(Hit)
	}
	return out
}
