package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sandstep/sandstep/internal/service/store"
)

// runResearch submits a query, shows the job's eight steps as they change
// and prints the report. It is a client only: it never starts a stack,
// which could run beside a server on the same data directory.
func runResearch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("research", stdout, stderr)
	var urls stringList
	fs.Var(&urls, "url", "a seed URL to crawl; repeat for several")
	mode := fs.String("mode", "", "light (depth 1: the sources only) or max (depth 2: the sources and the pages they link to) (default light)")
	opt := fs.String("optimization", "", "speed, balanced or quality (default balanced)")
	interval := fs.Duration("interval", 500*time.Millisecond, "how often the progress is refreshed")
	cf := addClientFlags(fs)
	pos, err := positional(fs, args, "QUERY")
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	req := submitRequest{Query: pos[0], Mode: *mode, Optimization: *opt, SeedURLs: urls}
	var ans submitAnswer
	if _, _, err := c.call(ctx, http.MethodPost, "/v1/jobs", nil, req, &ans); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "job %s\n", ans.JobID)
	final, err := watchSteps(ctx, c, ans.JobID, *interval, newLiveView(stderr))
	if err != nil {
		return err
	}
	show := func(rep reportAnswer) error {
		if *cf.json {
			return writeJSON(stdout, rep.raw)
		}
		return rep.print(stdout, stderr)
	}
	if final.Status == string(store.StatusSucceeded) {
		rep, err := fetchReport(ctx, c, ans.JobID)
		if err != nil {
			return err
		}
		return show(rep)
	}
	if final.Status == string(store.StatusFailed) || final.Status == string(store.StatusCancelled) {
		// Whatever was written before the job ended: a partial report.
		if rep, err := fetchReport(ctx, c, ans.JobID); err == nil {
			show(rep)
		}
	}
	return outcome(ctx, c, ans.JobID, final.Status)
}

// watchSteps polls the job and redraws its steps whenever they change,
// until it ends.
func watchSteps(ctx context.Context, c *client, id string, every time.Duration, w *liveView) (jobStatus, error) {
	last := ""
	var seen int64
	for {
		var st jobStatus
		if _, _, err := c.call(ctx, http.MethodGet, jobPath(id), nil, nil, &st); err != nil {
			return st, err
		}
		seen = printNotices(ctx, c, id, seen, w)
		if view := renderSteps(st); view != last {
			w.show(view)
			last = view
		}
		if store.Status(st.Status).Terminal() {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("stopped watching; job %s goes on (sandstep status %s): %w", id, id, ctx.Err())
		case <-time.After(every):
		}
	}
}

// printNotices prints the job's warning, fallback and error events after
// seq (a search backend that failed a query, a degradation taken) as they
// happen, and returns the last seq read. Events are a courtesy here: a
// failure to read them leaves the steps to tell the story.
func printNotices(ctx context.Context, c *client, id string, after int64, w *liveView) int64 {
	for range 10 {
		var p eventsPage
		if _, _, err := c.call(ctx, http.MethodGet, jobPath(id, "events"), url.Values{"after": {strconv.FormatInt(after, 10)}}, nil, &p); err != nil {
			return after
		}
		for _, ev := range p.Events {
			switch status := field(ev, "status"); status {
			case "warning", "fallback", "error":
				// A note stays above the steps a terminal redraws.
				w.note(fmt.Sprintf("  %s: %s: %s", status, field(ev, "stage"), strings.Join(strings.Fields(field(ev, "message")), " ")))
			}
		}
		if p.NextAfter <= after {
			break
		}
		after = p.NextAfter
	}
	return after
}

var stepMarks = map[string]string{"pending": " ", "running": ">", "complete": "x", "error": "!"}

// renderSteps draws the eight steps, with a progress bar for those that
// count work (the crawl).
func renderSteps(st jobStatus) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s: %s\n", st.JobID, st.Status)
	for _, s := range st.Steps {
		fmt.Fprintf(&b, "  [%s] %-24s", stepMarks[s.Status], s.Label)
		if s.Total > 0 {
			b.WriteString(" " + bar(s.Current, s.Total, 20) + " " + progress(s.Current, s.Total))
		}
		b.WriteByte('\n')
	}
	if len(st.Fallbacks) > 0 {
		fmt.Fprintf(&b, "  fallbacks: %s\n", strings.Join(st.Fallbacks, ", "))
	}
	return b.String()
}

func bar(current, total, width int) string {
	filled := min(width, current*width/max(total, 1))
	return "[" + strings.Repeat("#", filled) + strings.Repeat(".", width-filled) + "]"
}
