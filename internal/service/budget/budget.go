// Package budget turns a deep-research job's mode and optimization into its
// limits: how many sources, how much text of each, how long and how wide the
// crawl may go, how many related queries and how many sources the report
// reads. The base values and scale factors are chutes-search's.
package budget

import (
	"fmt"
	"time"
)

// Mode is the scope of a job: light or max.
type Mode string

const (
	Light Mode = "light"
	Max   Mode = "max"
)

// Optimization trades quality for time: speed, balanced or quality.
type Optimization string

const (
	Speed    Optimization = "speed"
	Balanced Optimization = "balanced"
	Quality  Optimization = "quality"
)

// Budget is the set of limits of one job.
type Budget struct {
	// Sources is the most search results (seed URLs included) kept.
	Sources int
	// CharsPerSource is the most text kept from one source.
	CharsPerSource int
	// Duration bounds the whole crawl.
	Duration time.Duration
	// Pages is the most pages crawled in total.
	Pages int
	// Depth is the link depth of the crawl: 1 crawls only the sources.
	Depth int
	// LinksPerPage is the most links followed from one page.
	LinksPerPage int
	// PagesPerHost is the most pages crawled on one host.
	PagesPerHost int
	// RelatedQueries is how many queries are searched besides the query.
	RelatedQueries int
	// SummarySources is the most sources summarized and given to the
	// report writer.
	SummarySources int
}

var bases = map[Mode]Budget{
	Light: {Sources: 10, CharsPerSource: 8000, Duration: 12 * time.Minute, Pages: 22, Depth: 1, LinksPerPage: 8, PagesPerHost: 4, RelatedQueries: 1, SummarySources: 12},
	Max:   {Sources: 18, CharsPerSource: 12000, Duration: 18 * time.Minute, Pages: 48, Depth: 2, LinksPerPage: 12, PagesPerHost: 8, RelatedQueries: 3, SummarySources: 20},
}

// scale holds the factors in percent, so that rounding half up is exact
// integer arithmetic (0.85 has no exact binary float: 10*0.85 could round
// either way).
type scale struct{ count, duration, chars int64 }

var scales = map[Optimization]scale{
	Speed:    {count: 70, duration: 70, chars: 80},
	Balanced: {count: 85, duration: 90, chars: 100},
	Quality:  {count: 100, duration: 110, chars: 110},
}

// DepthText says what the crawl's depth means: "depth 1 (sources only)" for
// a crawl that reads the sources and follows no link.
func (b Budget) DepthText() string {
	switch b.Depth {
	case 1:
		return "depth 1 (sources only)"
	case 2:
		return "depth 2 (the sources and the pages they link to)"
	}
	return fmt.Sprintf("depth %d (the sources and links up to %d steps away)", b.Depth, b.Depth-1)
}

// Base returns the unscaled limits of mode.
func Base(mode Mode) (Budget, error) {
	b, ok := bases[mode]
	if !ok {
		return Budget{}, fmt.Errorf("budget: unknown mode %q (want %q or %q)", mode, Light, Max)
	}
	return b, nil
}

// For returns the limits of mode scaled by opt: counts by the count scale,
// the duration by the duration scale and the characters per source by the
// chars scale, each rounded half up and never below 1. Depth is not scaled.
func For(mode Mode, opt Optimization) (Budget, error) {
	b, err := Base(mode)
	if err != nil {
		return Budget{}, err
	}
	s, ok := scales[opt]
	if !ok {
		return Budget{}, fmt.Errorf("budget: unknown optimization %q (want %q, %q or %q)", opt, Speed, Balanced, Quality)
	}
	return Budget{
		Sources:        scaleInt(b.Sources, s.count),
		CharsPerSource: scaleInt(b.CharsPerSource, s.chars),
		Duration:       time.Duration(scaleInt64(int64(b.Duration), s.duration)),
		Pages:          scaleInt(b.Pages, s.count),
		Depth:          b.Depth,
		LinksPerPage:   scaleInt(b.LinksPerPage, s.count),
		PagesPerHost:   scaleInt(b.PagesPerHost, s.count),
		RelatedQueries: scaleInt(b.RelatedQueries, s.count),
		SummarySources: scaleInt(b.SummarySources, s.count),
	}, nil
}

// Parse is For on the strings of a job request.
func Parse(mode, opt string) (Budget, error) {
	return For(Mode(mode), Optimization(opt))
}

func scaleInt(v int, percent int64) int { return int(scaleInt64(int64(v), percent)) }

// scaleInt64 returns v*percent/100 rounded half up, at least 1.
func scaleInt64(v, percent int64) int64 {
	return max((v*percent+50)/100, 1)
}
