package main

// Listing what a tenant has on a server: sandstep jobs, sandstep sessions.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"text/tabwriter"
)

// listPage is one page of GET /v1/jobs or GET /v1/sessions: the items under
// key ("jobs", "sessions") and the cursor of the next page, empty on the
// last.
type listPage struct {
	items      []json.RawMessage
	nextCursor string
}

// maxListPage is the most items the API gives in one page.
const maxListPage = 100

// list reads pages of a list route until it has limit items (all of them
// when limit is 0) or the server has no more (next_cursor null); it returns
// the items and the cursor that continues after them. A page may hold
// fewer items than asked, even none, with more to come.
func (c *client) list(ctx context.Context, path, key string, query url.Values, limit int) (listPage, error) {
	var out listPage
	cursor := query.Get("cursor")
	for {
		q := url.Values{}
		for k, v := range query {
			q[k] = v
		}
		q.Set("limit", strconv.Itoa(maxListPage))
		if limit > 0 {
			q.Set("limit", strconv.Itoa(min(limit-len(out.items), maxListPage)))
		}
		if cursor != "" {
			q.Set("cursor", cursor)
		} else {
			q.Del("cursor")
		}
		var page map[string]json.RawMessage
		if _, _, err := c.call(ctx, http.MethodGet, path, q, nil, &page); err != nil {
			return out, err
		}
		var items []json.RawMessage
		if err := json.Unmarshal(page[key], &items); err != nil && page[key] != nil {
			return out, fmt.Errorf("the server's %s answer has no %q list: %w", path, key, err)
		}
		var next string
		if raw := page["next_cursor"]; raw != nil {
			json.Unmarshal(raw, &next) // null or absent: the last page
		}
		out.items = append(out.items, items...)
		out.nextCursor = next
		if limit > 0 && len(out.items) >= limit {
			out.items = out.items[:limit]
			return out, nil
		}
		if next == "" {
			return out, nil
		}
		// A cursor that does not move would loop forever on a server that
		// misbehaves.
		if next == cursor {
			return out, fmt.Errorf("the server's %s listing does not move past cursor %s", path, next)
		}
		cursor = next
	}
}

// writeList prints the items as one JSON document, in the API's shape.
func writeList(w io.Writer, key string, p listPage) error {
	items := p.items
	if items == nil {
		items = []json.RawMessage{}
	}
	doc := map[string]any{key: items, "next_cursor": nil}
	if p.nextCursor != "" {
		doc["next_cursor"] = p.nextCursor
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return writeJSON(w, b)
}

type listFlags struct {
	limit  *int
	all    *bool
	filter string // the query parameter of the filter: status, state
	value  *string
	cursor *string
}

// addListFlags adds the flags of a listing; filter is the name of its
// filter (status for jobs, state for sessions), values what it takes.
func addListFlags(fs *flags, what, filter, values string) listFlags {
	return listFlags{
		limit:  fs.Int("limit", 20, "show at most this many "+what+", newest first"),
		all:    fs.Bool("all", false, "show every one of them, page after page (no --limit)"),
		filter: filter,
		value:  fs.String(filter, "", "show only "+what+" in this "+filter+": "+values+" (a comma list for several)"),
		cursor: fs.String("cursor", "", "continue a listing where the last one ended (the next_cursor it printed)"),
	}
}

func (f listFlags) query() (url.Values, int, error) {
	q := url.Values{}
	if *f.value != "" {
		q.Set(f.filter, *f.value)
	}
	if *f.cursor != "" {
		q.Set("cursor", *f.cursor)
	}
	if *f.all {
		return q, 0, nil
	}
	if *f.limit < 1 {
		return nil, 0, fmt.Errorf("--limit must be 1 or more (or pass --all)")
	}
	return q, *f.limit, nil
}

// moreNote tells how to see the rest of a listing that stopped at its limit.
func moreNote(w io.Writer, cmd string, p listPage) {
	if p.nextCursor != "" {
		fmt.Fprintf(w, "more: sandstep %s --cursor %s (or --all)\n", cmd, p.nextCursor)
	}
}

// jobItem is a job as the list shows it.
type jobItem struct {
	JobID     string  `json:"job_id"`
	Status    string  `json:"status"`
	Phase     *string `json:"phase"`
	Query     string  `json:"query"`
	Mode      string  `json:"mode"`
	CreatedAt string  `json:"created_at"`
	UpdatedAt string  `json:"updated_at"`
}

func runJobs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("jobs", stdout, stderr)
	lf := addListFlags(fs, "jobs", "status", "queued, running, succeeded, failed, cancelled")
	cf := addClientFlags(fs)
	if _, err := positional(fs, args); err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	return showList(ctx, c, lf, *cf.json, "jobs", "JOB\tSTATUS\tPHASE\tCREATED\tQUERY", func(j jobItem) string {
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%s", j.JobID, j.Status, orDash(j.Phase), shortTime(j.CreatedAt), ellipsis(oneLine(j.Query), 60))
	}, stdout, stderr)
}

// listSessions prints the tenant's sessions.
func listSessions(ctx context.Context, c *client, lf listFlags, asJSON bool, stdout, stderr io.Writer) error {
	return showList(ctx, c, lf, asJSON, "sessions", "SESSION\tSTATE\tLAST USED\tEXPIRES\tSANDBOX", func(s sessionItem) string {
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%s", s.SessionID, s.State, shortTime(s.LastAccessedAt), shortTime(deref(s.ExpiresAt)), s.sandbox())
	}, stdout, stderr)
}

// showList prints GET /v1/<key> as a table (header, then a row per item,
// each decoded as a T) or as JSON, and how to go on when it stopped at its
// limit.
func showList[T any](ctx context.Context, c *client, lf listFlags, asJSON bool, key, header string, row func(T) string, stdout, stderr io.Writer) error {
	q, limit, err := lf.query()
	if err != nil {
		return err
	}
	p, err := c.list(ctx, "/v1/"+key, key, q, limit)
	if err != nil {
		return err
	}
	if asJSON {
		return writeList(stdout, key, p)
	}
	if len(p.items) == 0 {
		fmt.Fprintf(stderr, "no %s\n", key)
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, raw := range p.items {
		var item T
		if err := json.Unmarshal(raw, &item); err != nil {
			return fmt.Errorf("the server listed %s that are not the API's JSON: %w", key, err)
		}
		fmt.Fprintln(tw, row(item))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	moreNote(stderr, key, p)
	return nil
}
