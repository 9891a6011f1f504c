package api

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/service/usage"
)

// GET /v1/usage?from=&to=&group_by=day|job_type|provider: what the caller's
// jobs created in [from, to), and the caller's sessions' and direct
// sandboxes' sandboxes that started in it and have ended, used and cost,
// in groups and in total. from
// and to are RFC 3339 times or dates (YYYY-MM-DD, midnight UTC); from
// defaults to the start of the current month (UTC), to to now; the range
// is at most maxUsageRange. group_by defaults to day (of each job's
// creation, UTC). job_type groups by the kind and mode of job
// ("research:light", "agent" for agent runs), and sessions' sandboxes are
// "session", direct sandboxes "sandbox". provider groups sandbox time and
// bytes out by provider; model tokens, search calls, execs and agent runs
// of jobs belong to no provider and are only in the total.

const maxUsageRange = 366 * 24 * time.Hour

var usageGroups = []string{"day", "job_type", "provider"}

// jobUsage is what the job used: the total kept on its record once it
// ended, else the sum of its records so far.
func (s *server) jobUsage(ctx context.Context, job store.Job) (store.Usage, error) {
	if job.Usage != nil {
		return *job.Usage, nil
	}
	return s.opts.Store.JobUsage(ctx, job.ID)
}

// cost is u's cost at the configured prices; nil without [pricing].
func (s *server) cost(u store.Usage) *usage.Cost {
	if s.opts.Pricing == nil {
		return nil
	}
	c := usage.Price(*s.opts.Pricing, u)
	return &c
}

func usageTime(name, v string, def time.Time) (time.Time, error) {
	if v == "" {
		return def, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, nil
	}
	return time.Time{}, invalid(name, "%s must be an RFC 3339 time (2026-11-01T00:00:00Z) or a date (2026-11-01), not %q", name, v)
}

func (s *server) usage(w http.ResponseWriter, r *http.Request, c *call) error {
	q := r.URL.Query()
	now := s.opts.Now().UTC()
	to, err := usageTime("to", q.Get("to"), now)
	if err != nil {
		return err
	}
	from, err := usageTime("from", q.Get("from"), time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		return err
	}
	switch {
	case !from.Before(to):
		return invalid("from", "from (%s) must be before to (%s)", from.Format(time.RFC3339), to.Format(time.RFC3339))
	case to.Sub(from) > maxUsageRange:
		return invalid("to", "the range from %s to %s is longer than 366 days", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	groupBy := q.Get("group_by")
	if groupBy == "" {
		groupBy = "day"
	}
	if !slices.Contains(usageGroups, groupBy) {
		return invalid("group_by", "group_by must be one of day, job_type, provider")
	}
	ctx := r.Context()
	jobs, truncated, err := s.opts.Store.TenantJobsBetween(ctx, c.tenant, from, to, 0)
	if err != nil {
		return err
	}
	sbx, sbxTruncated, err := s.opts.Store.TenantSandboxUsageBetween(ctx, c.tenant, from, to, 0)
	if err != nil {
		return err
	}
	type group struct {
		jobs, sandboxes int
		u               store.Usage
	}
	groups := map[string]*group{}
	at := func(k string) *group {
		if groups[k] == nil {
			groups[k] = &group{}
		}
		return groups[k]
	}
	var total store.Usage
	for _, job := range jobs {
		u, err := s.jobUsage(ctx, job)
		if err != nil {
			return fmt.Errorf("usage of job %s: %w", job.ClientID, err)
		}
		total.Add(u)
		switch groupBy {
		case "day":
			g := at(job.CreatedAt.UTC().Format(time.DateOnly))
			g.jobs++
			g.u.Add(u)
		case "job_type":
			g := at(jobUsageType(job))
			g.jobs++
			g.u.Add(u)
		case "provider":
			for size, secs := range u.SandboxSeconds {
				prov, _ := store.ParseSandboxSize(size)
				g := at(prov)
				g.u.Add(store.Usage{SandboxSeconds: map[string]float64{size: secs}})
			}
			for prov, n := range u.BytesOut {
				at(prov).u.Add(store.Usage{BytesOut: map[string]int64{prov: n}})
			}
			seen := map[string]bool{}
			for size := range u.SandboxSeconds {
				if prov, _ := store.ParseSandboxSize(size); !seen[prov] {
					seen[prov] = true
					at(prov).jobs++
				}
			}
		}
	}
	// The sandboxes no job owns: sessions' and direct sandboxes', each its
	// own type, counted in the group of the day and provider it started.
	for _, r := range sbx {
		u := r.Usage()
		total.Add(u)
		var g *group
		switch groupBy {
		case "day":
			g = at(r.RunningAt.UTC().Format(time.DateOnly))
		case "job_type":
			g = at(sandboxUsageType(r.OwnerKind))
		case "provider":
			g = at(r.Provider)
		}
		g.sandboxes++
		g.u.Add(u)
	}
	v := usage.Report{From: from.Format(time.RFC3339), To: to.Format(time.RFC3339), GroupBy: groupBy, Groups: []usage.Group{}, Truncated: truncated || sbxTruncated,
		Total: usage.Group{Key: "total", Jobs: len(jobs), Sandboxes: len(sbx), Usage: usage.ViewOf(total), Cost: s.cost(total)}}
	// In key order (sorting the keys, not the views: the Lambda's size
	// budget has no room for another sort instantiation).
	for _, k := range slices.Sorted(maps.Keys(groups)) {
		g := groups[k]
		v.Groups = append(v.Groups, usage.Group{Key: k, Jobs: g.jobs, Sandboxes: g.sandboxes, Usage: usage.ViewOf(g.u), Cost: s.cost(g.u)})
	}
	return writeJSON(w, http.StatusOK, v)
}

// jobUsageType is a job's job_type group: "agent" for an agent run, else
// "research:<mode>".
func jobUsageType(job store.Job) string {
	if job.Type == store.JobTypeAgent {
		return store.JobTypeAgent
	}
	var req store.JobRequest
	_ = json.Unmarshal(job.Request, &req)
	return "research:" + req.Mode
}

// sandboxUsageType is the job_type group of a sandbox no job owns:
// "session" for a session's, "sandbox" for a direct sandbox (a tenant's
// own or a sandbox's child).
func sandboxUsageType(ownerKind string) string {
	if ownerKind == "session" {
		return "session"
	}
	return "sandbox"
}
