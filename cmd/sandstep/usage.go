package main

// sandstep usage: what your jobs, sessions and sandboxes used and cost,
// from GET /v1/usage.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"text/tabwriter"

	usageview "github.com/sandstep/sandstep/internal/service/usage"
)

func runUsage(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("usage", stdout, stderr)
	from := fs.String("from", "", "start of the range: a date (2026-11-01) or an RFC 3339 time; default the start of this month (UTC)")
	to := fs.String("to", "", "end of the range, excluded; default now")
	groupBy := fs.String("group-by", "day", "group by day, job_type or provider")
	cf := addClientFlags(fs)
	if _, err := positional(fs, args); err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	q := url.Values{"group_by": {*groupBy}}
	if *from != "" {
		q.Set("from", *from)
	}
	if *to != "" {
		q.Set("to", *to)
	}
	raw, _, err := c.call(ctx, http.MethodGet, "/v1/usage", q, nil, nil)
	if err != nil {
		return err
	}
	if *cf.json {
		return writeJSON(stdout, raw)
	}
	var a usageview.Report
	if err := json.Unmarshal(raw, &a); err != nil {
		return fmt.Errorf("the server's usage is not the API's JSON: %w", err)
	}
	fmt.Fprintf(stdout, "usage from %s to %s, by %s\n", a.From, a.To, a.GroupBy)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tJOBS\tSANDBOXES\tSANDBOX S\tEXECS\tTOKENS\tSEARCHES\tPAGES\tAGENT RUNS\tBYTES OUT\tCOST")
	for _, g := range append(a.Groups, a.Total) {
		fmt.Fprintln(tw, usageRow(g))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if a.Total.Cost != nil && len(a.Total.Cost.Unpriced) > 0 {
		fmt.Fprintf(stdout, "not priced ([pricing] has no price): %v\n", a.Total.Cost.Unpriced)
	}
	if a.Truncated {
		fmt.Fprintln(stderr, "the range holds more jobs or sandboxes than one answer covers: ask for a shorter one")
	}
	return nil
}

func usageRow(g usageview.Group) string {
	u := g.Usage
	var secs float64
	for _, s := range u.SandboxSeconds {
		secs += s.Seconds
	}
	var tokens, searches int64
	for _, t := range u.Tokens {
		tokens += t.Input + t.Output + t.CacheRead + t.CacheWrite
	}
	for _, s := range u.SearchCalls {
		searches += s.Calls
	}
	cost := "-"
	if g.Cost != nil {
		cost = fmt.Sprintf("%.4f %s", g.Cost.Total, g.Cost.Currency)
	}
	// "-": no sandbox of the group had its traffic measured (not "none sent").
	out := "-"
	if u.BytesOut != nil {
		out = strconv.FormatInt(*u.BytesOut, 10)
	}
	return fmt.Sprintf("%s\t%d\t%d\t%.0f\t%d\t%d\t%d\t%d\t%d\t%s\t%s", g.Key, g.Jobs, g.Sandboxes, secs, u.Execs, tokens, searches, u.PagesCrawled, u.AgentRuns, out, cost)
}
