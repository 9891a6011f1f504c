package docsearch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/sandstep/sandstep/internal/service/store"
)

// Result kinds.
const (
	KindDoc        = "doc"
	KindCodeModule = "code_module"
)

// Result is one search hit: a documentation chunk or a code module.
type Result struct {
	Kind string `json:"kind"`
	// Package is the dependency a chunk documents ("" for a module).
	Package string `json:"package,omitempty"`
	// Title is a chunk's header path or a module's path.
	Title string `json:"title"`
	URL   string `json:"url,omitempty"`
	// Text is a chunk's text.
	Text string `json:"text,omitempty"`
	// Path, Description, Exports and Usage describe a module.
	Path        string   `json:"path,omitempty"`
	Description string   `json:"description,omitempty"`
	Exports     []string `json:"exports,omitempty"`
	Usage       string   `json:"usage,omitempty"`
	// Score is the BM25 score, or the reciprocal rank fusion score in
	// hybrid mode; higher is better, comparable within one answer only.
	Score float64 `json:"score"`
}

// Query is one search_docs call.
type Query struct {
	// Tenant and Session name the session whose modules are searched
	// too, while its volume exists.
	Tenant  string
	Session string
	Text    string
	// Package limits the documentation to one dependency (name or spec);
	// the session's modules are searched either way.
	Package string
	// K results at most (default [tools] default_k).
	K int
}

// Answer is what a search returns.
type Answer struct {
	Results []Result `json:"results"`
	// Mode is how the results were ranked: "bm25", or "hybrid" when
	// embeddings were fused in.
	Mode string `json:"mode"`
	// Warning says why a hybrid search fell back to BM25.
	Warning string `json:"warning,omitempty"`
}

// ErrUnknownPackage: the query names a package that is not a dependency.
var ErrUnknownPackage = errors.New("not a configured dependency")

// rrfK is reciprocal rank fusion's constant (Cormack et al., 2009): a
// document's fused score is the sum of 1/(rrfK+rank) over the lists.
const rrfK = 60

// candidates is how many hits of each list take part in the fusion.
func candidates(k int) int { return max(50, 4*k) }

// corpus is the documentation index held in memory.
type corpus struct {
	gen    int64
	chunks []store.DocChunk
	pkgOf  []string
	bm25   *BM25
}

// invalidate makes the next search ask the store for the generation.
func (s *Service) invalidate() {
	s.mu.Lock()
	s.checked = s.checked.AddDate(-1, 0, 0)
	s.mu.Unlock()
}

// load returns the in-memory index, reloading it from the store when its
// generation moved; it asks at most every cache_refresh. A store that does
// not answer leaves the index it had, if any.
func (s *Service) load(ctx context.Context) (*corpus, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.corpus != nil && now.Sub(s.checked) < s.cfg.CacheRefresh.D() {
		return s.corpus, nil
	}
	meta, err := s.st.GetDocsMeta(ctx)
	if err != nil {
		if s.corpus != nil {
			s.log.Warn("docs index: keeping the cached index", "err", err)
			return s.corpus, nil
		}
		return nil, err
	}
	if s.corpus != nil && s.corpus.gen == meta.Generation {
		s.checked = now
		return s.corpus, nil
	}
	c := &corpus{gen: meta.Generation}
	var toks [][]string
	for _, name := range s.indexedPackages() {
		chunks, err := s.st.DocChunks(ctx, name)
		if err != nil {
			if s.corpus != nil {
				s.log.Warn("docs index: keeping the cached index", "err", err)
				return s.corpus, nil
			}
			return nil, err
		}
		slices.SortFunc(chunks, func(a, b store.DocChunk) int {
			return cmp.Or(cmp.Compare(a.URL, b.URL), cmp.Compare(a.Ord, b.Ord), cmp.Compare(a.Hash, b.Hash))
		})
		for _, ch := range chunks {
			c.chunks = append(c.chunks, ch)
			c.pkgOf = append(c.pkgOf, name)
			toks = append(toks, Tokenize(ch.Title+"\n"+ch.Text))
		}
	}
	c.bm25 = NewBM25(toks)
	s.corpus, s.checked = c, now
	return c, nil
}

// item is a candidate of either kind during ranking.
type item struct {
	mod   bool
	idx   int
	score float64
}

// Search ranks the documentation (of one package, if the query names it)
// and, while the session's volume exists, the session's code modules.
func (s *Service) Search(ctx context.Context, q Query) (Answer, error) {
	k := q.K
	if k <= 0 {
		k = s.cfg.DefaultK
	}
	pkg := ""
	if q.Package != "" {
		var ok bool
		if pkg, ok = s.resolvePackage(q.Package); !ok {
			return Answer{}, fmt.Errorf("package %q: %w", q.Package, ErrUnknownPackage)
		}
	}
	c, err := s.load(ctx)
	if err != nil {
		return Answer{}, err
	}
	mods, err := s.liveModules(ctx, q.Tenant, q.Session)
	if err != nil {
		return Answer{}, err
	}
	keep := func(doc int) bool { return pkg == "" || c.pkgOf[doc] == pkg }
	n := candidates(k)
	qt := Tokenize(q.Text)

	// Lexical: documentation hits and modules on one BM25 scale.
	var lex []item
	for _, h := range c.bm25.Search(qt, n, keep) {
		lex = append(lex, item{idx: h.Doc, score: h.Score})
	}
	modToks := make([][]string, len(mods))
	for i, m := range mods {
		modToks[i] = Tokenize(moduleText(m))
	}
	for i, sc := range c.bm25.ScoreExtra(qt, modToks) {
		if sc > 0 {
			lex = append(lex, item{mod: true, idx: i, score: sc})
		}
	}
	sortItems(lex)

	ans := Answer{Mode: ModeBM25}
	ranked := lex
	if s.emb != nil {
		vec, err := s.emb.Embed(ctx, []string{q.Text})
		if err != nil {
			ans.Warning = "embeddings unavailable, ranked by BM25 alone: " + err.Error()
		} else {
			ans.Mode = ModeHybrid
			ranked = fuse(lex, s.semantic(c, mods, vec[0], keep, n), n)
		}
	}
	ans.Results = make([]Result, 0, min(k, len(ranked)))
	for _, it := range ranked[:min(k, len(ranked))] {
		ans.Results = append(ans.Results, s.result(c, mods, it))
	}
	return ans, nil
}

// semantic ranks chunks and modules by cosine similarity to the query's
// vector; vectors of another model are left out.
func (s *Service) semantic(c *corpus, mods []store.CodeModule, q []float32, keep func(int) bool, n int) []item {
	h := &hitHeap{}
	model := s.emb.Model()
	for i, ch := range c.chunks {
		if ch.Model != model || len(ch.Vector) != len(q) || !keep(i) {
			continue
		}
		pushTop(h, Hit{Doc: i, Score: float64(dot(q, ch.Vector))}, n)
	}
	var out []item
	for _, hit := range h.sorted() {
		out = append(out, item{idx: hit.Doc, score: hit.Score})
	}
	for i, m := range mods {
		if m.Model == model && len(m.Vector) == len(q) {
			out = append(out, item{mod: true, idx: i, score: float64(dot(q, m.Vector))})
		}
	}
	sortItems(out)
	return out[:min(n, len(out))]
}

// fuse merges ranked lists by reciprocal rank fusion.
func fuse(lex, sem []item, n int) []item {
	type key struct {
		mod bool
		idx int
	}
	score := map[key]float64{}
	for _, list := range [][]item{lex[:min(n, len(lex))], sem} {
		for rank, it := range list {
			score[key{it.mod, it.idx}] += 1.0 / float64(rrfK+rank+1)
		}
	}
	out := make([]item, 0, len(score))
	for k, v := range score {
		out = append(out, item{mod: k.mod, idx: k.idx, score: v})
	}
	sortItems(out)
	return out
}

// sortItems orders by score, best first; ties put documentation first,
// then by position, so answers are stable.
func sortItems(items []item) {
	slices.SortFunc(items, func(a, b item) int {
		if a.score != b.score {
			return cmp.Compare(b.score, a.score)
		}
		if a.mod != b.mod {
			if a.mod {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.idx, b.idx)
	})
}

func (s *Service) result(c *corpus, mods []store.CodeModule, it item) Result {
	if it.mod {
		m := mods[it.idx]
		return Result{Kind: KindCodeModule, Title: m.Path, Path: m.Path, Description: m.Description,
			Exports: m.Exports, Usage: m.Usage, Score: it.score}
	}
	ch := c.chunks[it.idx]
	return Result{Kind: KindDoc, Package: c.pkgOf[it.idx], Title: ch.Title, URL: ch.URL, Text: ch.Text, Score: it.score}
}
