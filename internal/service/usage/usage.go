// Package usage turns store.Usage into what users read: the usage in a
// stable JSON shape, and its cost at the [pricing] of config. The API, the
// report's footer and the CLI show the same numbers through it.
package usage

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/store"
)

// View is a usage as the API answers it: lists sorted by name, so that
// answers compare.
type View struct {
	SandboxSeconds []SandboxSeconds `json:"sandbox_seconds"`
	Execs          int64            `json:"execs"`
	Tokens         []Tokens         `json:"tokens"`
	SearchCalls    []SearchCalls    `json:"search_calls"`
	PagesCrawled   int64            `json:"pages_crawled"`
}

type SandboxSeconds struct {
	Provider string  `json:"provider"`
	MemoryMB int     `json:"memory_mb"`
	Seconds  float64 `json:"seconds"`
}

type Tokens struct {
	Model     string `json:"model"`
	Input     int64  `json:"input"`
	Output    int64  `json:"output"`
	Estimated bool   `json:"estimated"`
}

type SearchCalls struct {
	Backend string `json:"backend"`
	Calls   int64  `json:"calls"`
}

// ViewOf is u as the API shows it.
func ViewOf(u store.Usage) View {
	v := View{SandboxSeconds: []SandboxSeconds{}, Execs: u.Execs, Tokens: []Tokens{}, SearchCalls: []SearchCalls{}, PagesCrawled: u.PagesCrawled}
	for _, k := range sortedKeys(u.SandboxSeconds) {
		p, mb := store.ParseSandboxSize(k)
		v.SandboxSeconds = append(v.SandboxSeconds, SandboxSeconds{Provider: p, MemoryMB: mb, Seconds: round(u.SandboxSeconds[k], 3)})
	}
	for _, m := range sortedKeys(u.Tokens) {
		t := u.Tokens[m]
		v.Tokens = append(v.Tokens, Tokens{Model: m, Input: t.Input, Output: t.Output, Estimated: t.Estimated})
	}
	for _, b := range sortedKeys(u.SearchCalls) {
		v.SearchCalls = append(v.SearchCalls, SearchCalls{Backend: b, Calls: u.SearchCalls[b]})
	}
	return v
}

// sortedKeys is m's keys in order. A plain loop: maps.Keys and
// slices.Sorted would instantiate per map type, in the API Lambda that has
// no room for them.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Cost is a usage's cost. Amounts are rounded to six decimals.
type Cost struct {
	Currency string  `json:"currency"`
	Total    float64 `json:"total"`
	Sandbox  float64 `json:"sandbox"`
	Tokens   float64 `json:"tokens"`
	Search   float64 `json:"search"`
	// Unpriced names what was used but has no price ("sandbox:local/512",
	// "model:m", "search:wikipedia"): Total leaves it out.
	Unpriced []string `json:"unpriced"`
}

// Price is u's cost at p.
func Price(p config.PricingConfig, u store.Usage) Cost {
	c := Cost{Currency: p.Currency, Unpriced: []string{}}
	for k, secs := range u.SandboxSeconds {
		prov, mb := store.ParseSandboxSize(k)
		sizes := p.Sandbox[prov]
		price, ok := sizes[strconv.Itoa(mb)]
		if !ok {
			price, ok = sizes["default"]
		}
		if !ok {
			c.Unpriced = append(c.Unpriced, "sandbox:"+k)
			continue
		}
		c.Sandbox += secs * price
	}
	for m, t := range u.Tokens {
		price, ok := p.Models[m]
		if !ok {
			c.Unpriced = append(c.Unpriced, "model:"+m)
			continue
		}
		c.Tokens += (float64(t.Input)*price.Input + float64(t.Output)*price.Output) / 1e6
	}
	for b, n := range u.SearchCalls {
		price, ok := p.Search[b]
		if !ok {
			c.Unpriced = append(c.Unpriced, "search:"+b)
			continue
		}
		c.Search += float64(n) * price
	}
	slices.Sort(c.Unpriced)
	c.Sandbox, c.Tokens, c.Search = round(c.Sandbox, 6), round(c.Tokens, 6), round(c.Search, 6)
	c.Total = round(c.Sandbox+c.Tokens+c.Search, 6)
	return c
}

// Line says in one sentence what a job used and cost, for the report's
// footer and the CLI.
func Line(u store.Usage, c Cost) string {
	var parts []string
	if s := u.TotalSandboxSeconds(); s > 0 {
		parts = append(parts, fmt.Sprintf("%.0f s of sandbox time", s))
	}
	if n := u.TotalTokens(); n > 0 {
		est := ""
		for _, t := range u.Tokens {
			if t.Estimated {
				est = " (partly estimated)"
			}
		}
		parts = append(parts, fmt.Sprintf("%d model tokens%s", n, est))
	}
	var calls int64
	for _, n := range u.SearchCalls {
		calls += n
	}
	if calls > 0 {
		parts = append(parts, fmt.Sprintf("%d search calls", calls))
	}
	if u.PagesCrawled > 0 {
		parts = append(parts, fmt.Sprintf("%d pages crawled", u.PagesCrawled))
	}
	used := "nothing metered"
	if len(parts) > 0 {
		used = strings.Join(parts, ", ")
	}
	cost := fmt.Sprintf("%s %.4f", c.Currency, c.Total)
	if len(c.Unpriced) > 0 {
		cost += " (without " + strings.Join(c.Unpriced, ", ") + ", which have no price)"
	}
	return "Used " + used + "; cost " + cost + "."
}

func round(v float64, places int) float64 {
	f := math.Pow10(places)
	return math.Round(v*f) / f
}

// Group is one group of GET /v1/usage: the jobs and other sandboxes of a
// day, a job type or a provider (or "total"), what they used and cost.
type Group struct {
	Key  string `json:"key"`
	Jobs int    `json:"jobs"`
	// Sandboxes counts the sandboxes no job owns (sessions', direct
	// sandboxes') whose time the group includes.
	Sandboxes int   `json:"sandboxes"`
	Usage     View  `json:"usage"`
	Cost      *Cost `json:"cost"`
}

// Report is the answer of GET /v1/usage, which the API writes and the CLI
// reads.
type Report struct {
	From    string  `json:"from"`
	To      string  `json:"to"`
	GroupBy string  `json:"group_by"`
	Groups  []Group `json:"groups"`
	Total   Group   `json:"total"`
	// Truncated: the range holds more than store.MaxUsageJobs jobs or
	// store.MaxSandboxUsages other sandboxes; the answer covers the oldest
	// of them. Ask for a shorter range.
	Truncated bool `json:"truncated"`
}
