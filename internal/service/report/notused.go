package report

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/sandstep/sandstep/internal/service/crawler/spec"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/service/urlnorm"
)

// Unused lists what was found but gave the report no text: every URL the
// crawl skipped, with its reason, and every source that is not among the
// given ones. A URL is listed once, and never when a given source has it.
func Unused(all []store.Source, skips []store.Skip, given []Given) []NotUsed {
	key := func(u string) string {
		if n, err := urlnorm.Normalize(u); err == nil {
			return urlnorm.Key(n)
		}
		return u
	}
	listed := map[string]bool{}
	isGiven := map[int]bool{}
	for _, g := range given {
		isGiven[g.Source.N] = true
		listed[key(g.Source.URL)] = true
		if g.Source.FinalURL != "" {
			listed[key(g.Source.FinalURL)] = true
		}
	}
	out := []NotUsed{}
	add := func(u string, n int, reason, msg string) {
		if k := key(u); !listed[k] {
			listed[k] = true
			out = append(out, NotUsed{URL: u, N: n, Reason: reason, Message: msg})
		}
	}
	// The crawl's own reasons are the most precise: first.
	for _, sk := range skips {
		add(sk.URL, sk.N, sk.Reason, sk.Message)
	}
	crawled := slices.ContainsFunc(all, func(s store.Source) bool { return s.Origin == store.OriginCrawl })
	for _, s := range all {
		if isGiven[s.N] {
			continue
		}
		switch {
		case s.Origin == store.OriginCrawl:
			add(s.URL, s.N, spec.ReasonBudget, fmt.Sprintf("read, but not among the %d sources the report was written from", len(given)))
		case s.Origin != store.OriginSearch:
			add(s.URL, s.N, spec.ReasonChallenge, "an anti-bot challenge page, not the page itself")
		case crawled:
			add(s.URL, s.N, spec.ReasonBudget, "found by the search, not crawled")
		case strings.TrimSpace(s.Snippet) == "":
			add(s.URL, s.N, spec.ReasonUnreadable, "a search result without text, and the page was not read")
		default:
			add(s.URL, s.N, spec.ReasonBudget, fmt.Sprintf("not among the %d sources the report was written from", len(given)))
		}
	}
	// Sources in number order, then the URLs the crawl found on its way.
	slices.SortStableFunc(out, func(a, b NotUsed) int {
		if (a.N == 0) != (b.N == 0) {
			if a.N == 0 {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.N, b.N)
	})
	return out
}
