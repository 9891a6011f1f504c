package budget_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/budget"
)

// Every combination, worked out by hand from chutes-search's table: counts
// rounded half up (8.5 -> 9, 2.55 -> 3, 0.7 -> 1), depth unscaled.
func TestForEveryCombination(t *testing.T) {
	mins := func(m, s int) time.Duration { return time.Duration(m)*time.Minute + time.Duration(s)*time.Second }
	for _, tc := range []struct {
		mode budget.Mode
		opt  budget.Optimization
		want budget.Budget
	}{
		{budget.Light, budget.Speed, budget.Budget{Sources: 7, CharsPerSource: 6400, Duration: mins(8, 24), Pages: 15, Depth: 1, LinksPerPage: 6, PagesPerHost: 3, RelatedQueries: 1, SummarySources: 8}},
		{budget.Light, budget.Balanced, budget.Budget{Sources: 9, CharsPerSource: 8000, Duration: mins(10, 48), Pages: 19, Depth: 1, LinksPerPage: 7, PagesPerHost: 3, RelatedQueries: 1, SummarySources: 10}},
		{budget.Light, budget.Quality, budget.Budget{Sources: 10, CharsPerSource: 8800, Duration: mins(13, 12), Pages: 22, Depth: 1, LinksPerPage: 8, PagesPerHost: 4, RelatedQueries: 1, SummarySources: 12}},
		{budget.Max, budget.Speed, budget.Budget{Sources: 13, CharsPerSource: 9600, Duration: mins(12, 36), Pages: 34, Depth: 2, LinksPerPage: 8, PagesPerHost: 6, RelatedQueries: 2, SummarySources: 14}},
		{budget.Max, budget.Balanced, budget.Budget{Sources: 15, CharsPerSource: 12000, Duration: mins(16, 12), Pages: 41, Depth: 2, LinksPerPage: 10, PagesPerHost: 7, RelatedQueries: 3, SummarySources: 17}},
		{budget.Max, budget.Quality, budget.Budget{Sources: 18, CharsPerSource: 13200, Duration: mins(19, 48), Pages: 48, Depth: 2, LinksPerPage: 12, PagesPerHost: 8, RelatedQueries: 3, SummarySources: 20}},
	} {
		got, err := budget.For(tc.mode, tc.opt)
		if err != nil {
			t.Fatalf("%s/%s: %v", tc.mode, tc.opt, err)
		}
		if got != tc.want {
			t.Errorf("%s/%s:\n got  %+v\n want %+v", tc.mode, tc.opt, got, tc.want)
		}
		if p, err := budget.Parse(string(tc.mode), string(tc.opt)); err != nil || p != got {
			t.Errorf("Parse(%q, %q) = %+v, %v; want %+v", tc.mode, tc.opt, p, err, got)
		}
	}
}

func TestBase(t *testing.T) {
	for _, tc := range []struct {
		mode budget.Mode
		want budget.Budget
	}{
		{budget.Light, budget.Budget{Sources: 10, CharsPerSource: 8000, Duration: 12 * time.Minute, Pages: 22, Depth: 1, LinksPerPage: 8, PagesPerHost: 4, RelatedQueries: 1, SummarySources: 12}},
		{budget.Max, budget.Budget{Sources: 18, CharsPerSource: 12000, Duration: 18 * time.Minute, Pages: 48, Depth: 2, LinksPerPage: 12, PagesPerHost: 8, RelatedQueries: 3, SummarySources: 20}},
	} {
		got, err := budget.Base(tc.mode)
		if err != nil || got != tc.want {
			t.Errorf("Base(%s) = %+v, %v; want %+v", tc.mode, got, err, tc.want)
		}
	}
}

func TestUnknownNames(t *testing.T) {
	for _, tc := range []struct {
		mode, opt, want string
	}{
		{"", "balanced", `unknown mode ""`},
		{"Light", "balanced", `unknown mode "Light"`},
		{"light", "fast", `unknown optimization "fast"`},
		{"max", "", `unknown optimization ""`},
	} {
		_, err := budget.Parse(tc.mode, tc.opt)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q, %q) = %v, want an error containing %s", tc.mode, tc.opt, err, tc.want)
		}
	}
}

func TestDepthText(t *testing.T) {
	for depth, want := range map[int]string{
		1: "depth 1 (sources only)",
		2: "depth 2 (the sources and the pages they link to)",
		3: "depth 3 (the sources and links up to 2 steps away)",
	} {
		if got := (budget.Budget{Depth: depth}).DepthText(); got != want {
			t.Errorf("depth %d: %q, want %q", depth, got, want)
		}
	}
	light, _ := budget.For(budget.Light, budget.Balanced)
	if light.DepthText() != "depth 1 (sources only)" {
		t.Errorf("light mode: %q", light.DepthText())
	}
}
