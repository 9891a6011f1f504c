package search

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

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
	Query string
	// Backend is the backend whose results were used; "" when none
	// answered.
	Backend string
	Results int
	// Errors are the failures of the backends tried before (or instead of)
	// Backend.
	Errors []error
}

// Discover searches query and then each related query over backends: for
// each query the backends are tried in order, and the first that answers
// with results wins (an empty answer from a narrow index such as Wikipedia
// is worth no more than a failure, so the next backend is asked too). A
// backend that refused a request outright (a bad key) is not asked again.
//
// The results are normalized (NormalizeURL), merged as the crawler would
// (a trailing slash makes no other page) and ranked: seeds
// first in their order and always kept, then by the best rank a URL had
// in any answer, then by how many answers had it, then by first sight. At
// most limit sources are kept besides the seeds.
//
// It fails when a seed is not an http(s) URL, when ctx ends, and when no
// source at all was found while some backend failed; Discovery.Queries
// tells of every other failure.
func Discover(ctx context.Context, backends []Backend, query string, related, seeds []string, limit int) (Discovery, error) {
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
	var (
		d      Discovery
		errs   []error
		refuse = map[int]bool{} // backends that refused outright
	)
	queries := append([]string{query}, related...)
	for _, q := range queries {
		if strings.TrimSpace(q) == "" {
			continue
		}
		outcome := QueryOutcome{Query: q}
		var results []Result
		for i, b := range backends {
			if refuse[i] {
				continue
			}
			rs, err := b.Search(ctx, q, limit)
			if ctx.Err() != nil {
				return Discovery{}, fmt.Errorf("search: %w", context.Cause(ctx))
			}
			if err != nil {
				outcome.Errors = append(outcome.Errors, err)
				errs = append(errs, err)
				if e, ok := errors.AsType[*Error](err); ok && e.Permanent() {
					refuse[i] = true
				}
				continue
			}
			if outcome.Backend == "" {
				outcome.Backend = b.Name()
			}
			if len(rs) > 0 {
				outcome.Backend, results = b.Name(), rs
				break
			}
		}
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
		return d, fmt.Errorf("search: no source found: %w", errors.Join(errs...))
	}
	return d, nil
}

// NormalizeURL returns an http(s) URL in the normal form the crawler uses
// (package urlnorm).
func NormalizeURL(raw string) (string, error) { return urlnorm.Normalize(raw) }
