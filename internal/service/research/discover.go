package research

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sandstep/sandstep/internal/service/budget"
	"github.com/sandstep/sandstep/internal/service/search"
	"github.com/sandstep/sandstep/internal/service/store"
)

// DiscoverOutput tells the state machine what discovery found.
type DiscoverOutput struct {
	Sources   int  `json:"sources"`
	Summarize bool `json:"summarize"`
}

// Discover searches the web for the query and its related queries over the
// configured backends, merges the results with the request's seed URLs and
// stores them as the job's sources, snippets included: the last fallback of
// every later phase.
func (p *Phases) Discover(ctx context.Context, in Input) (DiscoverOutput, error) {
	r, err := p.begin(ctx, "discover", in)
	if err != nil {
		return DiscoverOutput{}, err
	}
	out, err := r.discover()
	return out, r.end(err)
}

func (r *run) discover() (DiscoverOutput, error) {
	b, err := r.budget()
	if err != nil {
		return DiscoverOutput{}, err
	}
	if err := r.step(store.StepSearch, store.StepRunning, 0, 0); err != nil {
		return DiscoverOutput{}, err
	}
	related := search.RelatedQueries(r.req.Query, b.RelatedQueries)
	// Each query's outcome is an event as soon as it is known, so that a
	// failing backend is visible while the other queries still wait.
	var evErr error
	d, serr := search.Discover(r.ctx, r.searchBackends(), r.req.Query, related, r.req.SeedURLs, b.Sources, func(q search.QueryOutcome) {
		if evErr == nil {
			evErr = r.event(fmt.Sprintf("discover:query:%d", q.N), queryEvent(q))
		}
	})
	if cerr := r.checkCancel(); cerr != nil {
		return DiscoverOutput{}, cerr
	}
	if evErr != nil {
		return DiscoverOutput{}, evErr
	}
	if ns, ok := errors.AsType[*search.NoSourceError](serr); ok {
		// Nothing was found and nothing else can be read: the job fails
		// saying which backends failed and why, rather than succeeding with
		// an empty report.
		msg := strings.TrimPrefix(ns.Error(), "search: ")
		if err := r.event("discover:done", EventData{Stage: string(store.StepSearch), Status: "error", Message: msg}); err != nil {
			return DiscoverOutput{}, err
		}
		if err := r.step(store.StepSearch, store.StepError, 0, 0); err != nil {
			return DiscoverOutput{}, err
		}
		return DiscoverOutput{}, &SearchFailed{Message: msg}
	}
	if serr != nil {
		return DiscoverOutput{}, serr
	}
	if len(d.Sources) > 0 {
		if err := r.p.Store.PutSources(r.ctx, r.job.ID, d.Sources); err != nil {
			return DiscoverOutput{}, fmt.Errorf("store sources: %w", err)
		}
	}
	if unanswered := unansweredQueries(d.Queries); unanswered > 0 {
		why := fmt.Sprintf("%d of %d searches failed on every backend: the report rests on the %d sources the others found", unanswered, len(d.Queries), len(d.Sources))
		if err := r.fallback(FallbackSearchIncomplete, string(store.StepSearch), why); err != nil {
			return DiscoverOutput{}, err
		}
	}
	// Backends that answered but found nothing are no failure: the report
	// says no source was found.
	if err := r.event("discover:done", EventData{Stage: string(store.StepSearch), Status: "complete", Message: fmt.Sprintf("%d sources found", len(d.Sources)), Total: len(d.Sources)}); err != nil {
		return DiscoverOutput{}, err
	}
	if err := r.step(store.StepSearch, store.StepComplete, len(d.Sources), len(d.Sources)); err != nil {
		return DiscoverOutput{}, err
	}
	return DiscoverOutput{Sources: len(d.Sources), Summarize: r.p.Config.Research.Agent.Enabled}, nil
}

// queryEvent tells how one query went: "running" when it went well, a
// "warning" naming each backend that failed it.
func queryEvent(q search.QueryOutcome) EventData {
	ev := EventData{Stage: string(store.StepSearch), Status: "running", Message: fmt.Sprintf("%q: %d results", q.Query, q.Results)}
	if q.Backend != "" {
		ev.Message += " from " + q.Backend
	}
	if len(q.Errors) > 0 {
		ev.Status = "warning"
		why := make([]string, len(q.Errors))
		for i, e := range q.Errors {
			why[i] = strings.TrimPrefix(e.Error(), "search: ")
		}
		ev.Message += " (" + strings.Join(why, "; ") + ")"
	}
	return ev
}

// unansweredQueries counts the queries that every backend failed.
func unansweredQueries(qs []search.QueryOutcome) int {
	n := 0
	for _, q := range qs {
		if q.Backend == "" && len(q.Errors) > 0 {
			n++
		}
	}
	return n
}

// SearchFailed fails a job whose searches all failed when it had no seed
// URL either: there is nothing to read. The state machine names the error
// after the type, so the job's error reads "SearchFailed: no source found:
// every search failed: searxng: ...".
type SearchFailed struct{ Message string }

func (e *SearchFailed) Error() string { return e.Message }

// budget is the job's scaled budget (mode x optimization), its crawl time
// capped by research.max_crawl_duration.
func (r *run) budget() (budget.Budget, error) {
	b, err := budget.Parse(r.req.Mode, r.req.Optimization)
	if err != nil {
		return budget.Budget{}, &BadInput{Message: "job " + r.job.ID + ": " + err.Error()}
	}
	if limit := r.p.Config.Research.MaxCrawlDuration.D(); limit > 0 && b.Duration > limit {
		b.Duration = limit
	}
	return b, nil
}
