package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
)

// jobsPage is one page of GET /v1/jobs.
type jobsPage struct {
	Jobs []struct {
		JobID           string  `json:"job_id"`
		Status          string  `json:"status"`
		Query           string  `json:"query"`
		CreatedAt       string  `json:"created_at"`
		FinishedAt      *string `json:"finished_at"`
		CancelRequested bool    `json:"cancel_requested"`
	} `json:"jobs"`
	NextCursor *string `json:"next_cursor"`
}

// maxQueryColumn is how much of a query a listing line shows.
const maxQueryColumn = 60

func runJobs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("jobs", stderr)
	setUsage(fs, "jobs [flags]\n\nLists your jobs, newest first, a page at a time")
	status := fs.String("status", "", "only jobs in these statuses (queued, running, succeeded, failed, cancelled; a comma list for several)")
	limit := fs.Int("limit", 20, "jobs per page, 1 to 100")
	cursor := fs.String("cursor", "", "continue a listing where a page ended (its next cursor)")
	all := fs.Bool("all", false, "list every page, not just the first")
	asJSON := fs.Bool("json", false, "print the API's JSON answer (one line per page)")
	cf := addClientFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		fs.Usage()
		return errUsage
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	q := url.Values{"limit": {strconv.Itoa(*limit)}}
	if *status != "" {
		q.Set("status", *status)
	}
	if *cursor != "" {
		q.Set("cursor", *cursor)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	if !*asJSON {
		fmt.Fprintln(tw, "JOB\tSTATUS\tCREATED\tQUERY")
	}
	for {
		var p jobsPage
		raw, _, err := c.call(ctx, http.MethodGet, "/v1/jobs", q, nil, &p)
		if err != nil {
			return err
		}
		if *asJSON {
			// The API answers with one line of JSON per page.
			if _, err := stdout.Write(raw); err != nil {
				return err
			}
			p.Jobs = nil
		}
		for _, j := range p.Jobs {
			st := j.Status
			if j.CancelRequested && (st == "queued" || st == "running") {
				st += " (cancel requested)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", j.JobID, st, j.CreatedAt, clip(strings.Join(strings.Fields(j.Query), " "), maxQueryColumn))
		}
		if p.NextCursor == nil {
			return tw.Flush()
		}
		if !*all {
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "more: sandstep jobs --cursor %s (or --all)\n", *p.NextCursor)
			return nil
		}
		q.Set("cursor", *p.NextCursor)
	}
}

// clip cuts s to n runes, marking the cut.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
