package search

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/service/urlnorm"
)

// relatedSuffixes make the related queries; their order is the order in
// which a larger budget adds them.
var relatedSuffixes = []string{
	"overview",
	"comparison",
	"latest research",
	"challenges and limitations",
	"best practices",
	"history",
}

// RelatedQueries returns n queries around query ("<query> overview",
// "<query> comparison", "<query> latest research", ...), always the same
// for the same arguments; at most len(relatedSuffixes).
func RelatedQueries(query string, n int) []string {
	query = strings.Join(strings.Fields(query), " ")
	if query == "" || n <= 0 {
		return nil
	}
	out := make([]string, 0, min(n, len(relatedSuffixes)))
	for _, s := range relatedSuffixes[:min(n, len(relatedSuffixes))] {
		out = append(out, query+" "+s)
	}
	return out
}

// Discovery is what Discover found.
type Discovery struct {
	// Sources are numbered 1..N in rank order: the seeds first, then the
	// results. Origin is search; Content is empty.
	Sources []store.Source
	// Queries says, for each query searched, who answered.
	Queries []QueryOutcome
}

// QueryOutcome is one query's search.
type QueryOutcome struct {
	// N is the query's position: 0 for the query itself, then the related
	// queries in their order.
	N     int
	Query string
	// Backend is the backend whose results were used; "" when none
	// answered.
	Backend string
	Results int
	// Errors are the failures of the backends tried before (or instead of)
	// Backend.
	Errors []error

	results []Result
}

// Discover searches query and its related queries over backends, all the
// queries at once: a backend that hangs costs its timeout once, not once per
// query. For each query the backends are tried in order, and the first that
// answers with results wins (an empty answer from a narrow index such as
// Wikipedia is worth no more than a failure, so the next backend is asked
// too). A backend that refused a request outright (a bad key) is not asked
// again by the queries that come to it later.
//
// The results are normalized (NormalizeURL), merged as the crawler would
// (a trailing slash makes no other page) and ranked: seeds
// first in their order and always kept, then by the best rank a URL had
// in any answer, then by how many answers had it, then by first sight (in
// query order, whatever order the answers came in). At most limit sources
// are kept besides the seeds.
//
// done, if not nil, is called with each query's outcome as soon as it is
// known, one call at a time, so that a caller can report failures while
// the other queries still run.
//
// It fails when a seed is not an http(s) URL, when ctx ends, and when no
// source at all was found while some backend failed (a *NoSourceError);
// Discovery.Queries tells of every other failure.
func Discover(ctx context.Context, backends []Backend, query string, related, seeds []string, limit int, done func(QueryOutcome)) (Discovery, error) {
	if limit < 1 {
		return Discovery{}, fmt.Errorf("search: %w", errNoLimit)
	}
	type candidate struct {
		url, title, snippet string
		seed                bool
		best, hits, order   int
	}
	var (
		byURL = map[string]*candidate{}
		all   []*candidate
	)
	for _, raw := range seeds {
		u, err := NormalizeURL(raw)
		if err != nil {
			return Discovery{}, fmt.Errorf("search: seed URL: %w", err)
		}
		if k := urlnorm.Key(u); byURL[k] == nil {
			c := &candidate{url: u, seed: true, order: len(all)}
			byURL[k] = c
			all = append(all, c)
		}
	}
	var queries []string
	for _, q := range append([]string{query}, related...) {
		if strings.TrimSpace(q) != "" {
			queries = append(queries, q)
		}
	}
	var (
		d        Discovery
		errs     []error
		mu       sync.Mutex
		refused  = map[int]bool{} // backends that refused outright
		outcomes = make([]QueryOutcome, len(queries))
		wg       sync.WaitGroup
	)
	for n, q := range queries {
		wg.Go(func() {
			o := searchOne(ctx, backends, q, limit, func(i int) bool {
				mu.Lock()
				defer mu.Unlock()
				return refused[i]
			}, func(i int) {
				mu.Lock()
				refused[i] = true
				mu.Unlock()
			})
			o.N = n
			mu.Lock()
			defer mu.Unlock()
			outcomes[n] = o
			if done != nil && ctx.Err() == nil {
				done(o)
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return Discovery{}, fmt.Errorf("search: %w", context.Cause(ctx))
	}
	for _, outcome := range outcomes {
		results := outcome.results
		outcome.results = nil
		errs = append(errs, outcome.Errors...)
		outcome.Results = len(results)
		d.Queries = append(d.Queries, outcome)
		inQuery := map[string]bool{} // frequency counts answers, not repeats in one
		for i, r := range results {
			u, err := NormalizeURL(r.URL)
			if err != nil {
				continue
			}
			k := urlnorm.Key(u)
			if inQuery[k] {
				continue
			}
			inQuery[k] = true
			rank := r.Rank
			if rank <= 0 {
				rank = i + 1
			}
			c := byURL[k]
			if c == nil {
				c = &candidate{url: u, order: len(all)}
				byURL[k] = c
				all = append(all, c)
			}
			// The best-ranked answer's text wins; a later one only fills
			// what is missing.
			if c.hits == 0 || rank < c.best {
				c.best = rank
				c.title, c.snippet = cmp.Or(r.Title, c.title), cmp.Or(r.Snippet, c.snippet)
			} else {
				c.title, c.snippet = cmp.Or(c.title, r.Title), cmp.Or(c.snippet, r.Snippet)
			}
			c.hits++
		}
	}
	slices.SortStableFunc(all, func(a, b *candidate) int {
		switch {
		case a.seed != b.seed:
			if a.seed {
				return -1
			}
			return 1
		case a.seed:
			return cmp.Compare(a.order, b.order)
		}
		return cmp.Or(cmp.Compare(a.best, b.best), cmp.Compare(b.hits, a.hits), cmp.Compare(a.order, b.order))
	})
	kept := 0
	for _, c := range all {
		if !c.seed {
			if kept == limit {
				break
			}
			kept++
		}
		d.Sources = append(d.Sources, store.Source{N: len(d.Sources) + 1, URL: c.url, Title: c.title, Snippet: c.snippet, Origin: store.OriginSearch})
	}
	if len(d.Sources) == 0 && len(errs) > 0 {
		return d, &NoSourceError{Queries: len(queries), Errors: errs}
	}
	return d, nil
}

// searchOne asks the backends in order for one query until one answers with
// results. refused and refuse share what "refused outright" is between the
// queries running at once.
func searchOne(ctx context.Context, backends []Backend, q string, limit int, refused func(int) bool, refuse func(int)) QueryOutcome {
	o := QueryOutcome{Query: q}
	for i, b := range backends {
		if refused(i) {
			continue
		}
		rs, err := b.Search(ctx, q, limit)
		if ctx.Err() != nil {
			return o
		}
		if err != nil {
			o.Errors = append(o.Errors, err)
			if e, ok := errors.AsType[*Error](err); ok && e.Permanent() {
				refuse(i)
			}
			continue
		}
		if o.Backend == "" {
			o.Backend = b.Name()
		}
		if len(rs) > 0 {
			o.Backend, o.results = b.Name(), rs
			break
		}
	}
	o.Results = len(o.results)
	return o
}

// NoSourceError is Discover's failure when every search failed and there
// were no seeds: nothing at all to crawl.
type NoSourceError struct {
	// Queries is how many queries were searched.
	Queries int
	// Errors are every backend's failures, for every query.
	Errors []error
}

// Error names each backend that failed once, with its first reason and how
// many queries it failed: "search: no source found: every search failed:
// searxng: no answer within 20s (3 of 3 queries); wikipedia: HTTP 503
// Service Unavailable: busy (after 3 attempts) (3 of 3 queries)".
func (e *NoSourceError) Error() string {
	type seen struct {
		first string
		n     int
	}
	var (
		order []string
		by    = map[string]*seen{}
	)
	for _, err := range e.Errors {
		name, why := "search", err.Error()
		if se, ok := errors.AsType[*Error](err); ok {
			name = se.Backend
			why = strings.TrimPrefix(why, "search: "+se.Backend+": ")
		}
		if by[name] == nil {
			by[name] = &seen{first: why}
			order = append(order, name)
		}
		by[name].n++
	}
	parts := make([]string, len(order))
	for i, name := range order {
		parts[i] = name + ": " + by[name].first
		if e.Queries > 1 {
			parts[i] += fmt.Sprintf(" (%d of %d queries)", by[name].n, e.Queries)
		}
	}
	return "search: no source found: every search failed: " + strings.Join(parts, "; ")
}

// Unwrap returns the failures, so that errors.As finds each *Error.
func (e *NoSourceError) Unwrap() []error { return e.Errors }

// NormalizeURL returns an http(s) URL in the normal form the crawler uses
// (package urlnorm).
func NormalizeURL(raw string) (string, error) { return urlnorm.Normalize(raw) }
