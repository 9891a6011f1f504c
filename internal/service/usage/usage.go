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
	// BytesOut is what the sandboxes sent to the network, where their
	// provider measures it; absent when none was measured (never a 0
	// standing for "unknown").
	BytesOut  *int64 `json:"bytes_out,omitempty"`
	AgentRuns int64  `json:"agent_runs"`
}

type SandboxSeconds struct {
	Provider string  `json:"provider"`
	MemoryMB int     `json:"memory_mb"`
	Seconds  float64 `json:"seconds"`
}

type Tokens struct {
	Model      string `json:"model"`
	Input      int64  `json:"input"`
	Output     int64  `json:"output"`
	CacheRead  int64  `json:"cache_read,omitempty"`
	CacheWrite int64  `json:"cache_write,omitempty"`
	Estimated  bool   `json:"estimated"`
}

type SearchCalls struct {
	Backend string `json:"backend"`
	Calls   int64  `json:"calls"`
}

// ViewOf is u as the API shows it.
func ViewOf(u store.Usage) View {
	v := View{SandboxSeconds: []SandboxSeconds{}, Execs: u.Execs, Tokens: []Tokens{}, SearchCalls: []SearchCalls{}, PagesCrawled: u.PagesCrawled, AgentRuns: u.AgentRuns}
	if n, ok := u.TotalBytesOut(); ok {
		v.BytesOut = &n
	}
	for _, k := range sortedKeys(u.SandboxSeconds) {
		p, mb := store.ParseSandboxSize(k)
		v.SandboxSeconds = append(v.SandboxSeconds, SandboxSeconds{Provider: p, MemoryMB: mb, Seconds: round(u.SandboxSeconds[k], 3)})
	}
	for _, m := range sortedKeys(u.Tokens) {
		t := u.Tokens[m]
		v.Tokens = append(v.Tokens, Tokens{Model: m, Input: t.Input, Output: t.Output, CacheRead: t.CacheRead, CacheWrite: t.CacheWrite, Estimated: t.Estimated})
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
	Egress   float64 `json:"egress"`
	// Unpriced names what was used but has no price ("sandbox:local/512",
	// "model:m", "model:m:cache", "search:wikipedia", "egress:local"):
	// Total leaves it out.
	Unpriced []string `json:"unpriced"`
}

// gigabyte is the unit of [pricing.egress].
const gigabyte = 1e9

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
		if t.CacheRead > 0 || t.CacheWrite > 0 {
			if (t.CacheRead > 0 && price.CacheRead == nil) || (t.CacheWrite > 0 && price.CacheWrite == nil) {
				c.Unpriced = append(c.Unpriced, "model:"+m+":cache")
				continue
			}
			if t.CacheRead > 0 {
				c.Tokens += float64(t.CacheRead) * *price.CacheRead / 1e6
			}
			if t.CacheWrite > 0 {
				c.Tokens += float64(t.CacheWrite) * *price.CacheWrite / 1e6
			}
		}
	}
	for b, n := range u.SearchCalls {
		price, ok := p.Search[b]
		if !ok {
			c.Unpriced = append(c.Unpriced, "search:"+b)
			continue
		}
		c.Search += float64(n) * price
	}
	for prov, n := range u.BytesOut {
		price, ok := p.Egress[prov]
		switch {
		case n == 0:
		case !ok:
			c.Unpriced = append(c.Unpriced, "egress:"+prov)
		default:
			c.Egress += float64(n) / gigabyte * price
		}
	}
	slices.Sort(c.Unpriced)
	c.Sandbox, c.Tokens, c.Search, c.Egress = round(c.Sandbox, 6), round(c.Tokens, 6), round(c.Search, 6), round(c.Egress, 6)
	c.Total = round(c.Sandbox+c.Tokens+c.Search+c.Egress, 6)
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
	if n, ok := u.TotalBytesOut(); ok && n > 0 {
		parts = append(parts, Bytes(n)+" sent")
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

// Bytes writes n bytes for people: "812 B", "4.2 kB", "1.3 MB", "2.0 GB"
// (decimal units, as [pricing.egress] prices them).
func Bytes(n int64) string {
	switch {
	case n < 1000:
		return fmt.Sprintf("%d B", n)
	case n < 1e6:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	case n < 1e9:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	}
	return fmt.Sprintf("%.1f GB", float64(n)/1e9)
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
