package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/store"
)

// runResearch submits a query, shows the job's eight steps as they change
// and prints the report. With no server at --server it starts the local
// stack in this process for the job's duration.
func runResearch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("research", stderr)
	setUsage(fs, `research "QUERY" [flags]`)
	var urls stringList
	fs.Var(&urls, "url", "a seed URL to crawl; repeat for several")
	mode := fs.String("mode", "", "light (depth 1: the sources only) or max (depth 2: the sources and the pages they link to) (default light)")
	opt := fs.String("optimization", "", "speed, balanced or quality (default balanced)")
	cfgPath := fs.String("config", config.DefaultPath(), "config of the local server started when none runs")
	interval := fs.Duration("interval", 500*time.Millisecond, "how often the progress is refreshed")
	cf := addClientFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return errUsage
	}
	madeUp := false
	if *cf.token == "" && os.Getenv(envToken) == "" && os.Getenv(envDevToken) == "" {
		// Nothing to authenticate with: only a server started here helps.
		*cf.token, madeUp = randomToken(), true
		os.Setenv(envDevToken, *cf.token)
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	req := submitRequest{Query: pos[0], Mode: *mode, Optimization: *opt, SeedURLs: urls}
	var ans submitAnswer
	_, _, err = c.call(ctx, http.MethodPost, "/v1/jobs", nil, req, &ans)
	var down *serverDownError
	if errors.As(err, &down) {
		fmt.Fprintf(stderr, "no server at %s: starting the local stack here\n", c.shown())
		srv, serr := startServer(ctx, *cfgPath, c.base.Host, "", slog.New(slog.NewTextHandler(io.Discard, nil)))
		if serr != nil {
			return fmt.Errorf("start a local server: %w", serr)
		}
		defer func() {
			fmt.Fprintln(stderr, "stopping the local stack")
			srv.shutdown()
		}()
		if srv.token != "" {
			c.token = srv.token
		} else if madeUp {
			return fmt.Errorf("the local server has no development token ([auth] dev_token_env = \"\" in %s): pass --token or set %s to one of its [[auth.tokens]]", *cfgPath, envToken)
		}
		c.base, _ = url.Parse(srv.url)
		_, _, err = c.call(ctx, http.MethodPost, "/v1/jobs", nil, req, &ans)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "job %s\n", ans.JobID)
	final, err := watchSteps(ctx, c, ans.JobID, *interval, stderr)
	if err != nil {
		return err
	}
	if final.Status == string(store.StatusSucceeded) {
		rep, err := fetchReport(ctx, c, ans.JobID)
		if err != nil {
			return err
		}
		return rep.print(stdout, stderr)
	}
	if final.Status == string(store.StatusFailed) || final.Status == string(store.StatusCancelled) {
		// Whatever was written before the job ended: a partial report.
		if rep, err := fetchReport(ctx, c, ans.JobID); err == nil {
			rep.print(stdout, stderr)
		}
	}
	return outcome(ctx, c, ans.JobID, final.Status)
}

// watchSteps polls the job and redraws its steps whenever they change,
// until it ends.
func watchSteps(ctx context.Context, c *client, id string, every time.Duration, w io.Writer) (jobStatus, error) {
	last := ""
	var seen int64
	for {
		var st jobStatus
		if _, _, err := c.call(ctx, http.MethodGet, jobPath(id), nil, nil, &st); err != nil {
			return st, err
		}
		seen = printNotices(ctx, c, id, seen, w)
		if view := renderSteps(st); view != last {
			io.WriteString(w, view)
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
func printNotices(ctx context.Context, c *client, id string, after int64, w io.Writer) int64 {
	for range 10 {
		var p eventsPage
		if _, _, err := c.call(ctx, http.MethodGet, jobPath(id, "events"), url.Values{"after": {strconv.FormatInt(after, 10)}}, nil, &p); err != nil {
			return after
		}
		for _, ev := range p.Events {
			switch status := field(ev, "status"); status {
			case "warning", "fallback", "error":
				fmt.Fprintf(w, "  %s: %s: %s\n", status, field(ev, "stage"), strings.Join(strings.Fields(field(ev, "message")), " "))
			}
		}
		if p.Next <= after {
			break
		}
		after = p.Next
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
