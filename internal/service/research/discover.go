package research

import (
	"context"
	"fmt"

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
	d, serr := search.Discover(r.ctx, r.p.Search, r.req.Query, related, r.req.SeedURLs, b.Sources)
	if cerr := r.checkCancel(); cerr != nil {
		return DiscoverOutput{}, cerr
	}
	keys := make([]string, 0, len(d.Queries)+1)
	evs := make([]EventData, 0, len(d.Queries)+1)
	for i, q := range d.Queries {
		msg := fmt.Sprintf("%q: %d results", q.Query, q.Results)
		if q.Backend != "" {
			msg += " from " + q.Backend
		}
		if len(q.Errors) > 0 {
			msg += fmt.Sprintf(" (%d backend errors: %v)", len(q.Errors), q.Errors[0])
		}
		keys = append(keys, fmt.Sprintf("discover:query:%d", i))
		evs = append(evs, EventData{Stage: string(store.StepSearch), Status: "running", Message: msg})
	}
	if len(d.Sources) > 0 {
		if err := r.p.Store.PutSources(r.ctx, r.job.ID, d.Sources); err != nil {
			return DiscoverOutput{}, fmt.Errorf("store sources: %w", err)
		}
	}
	status, msg := "complete", fmt.Sprintf("%d sources found", len(d.Sources))
	if serr != nil && len(d.Sources) == 0 {
		// No source at all is not a failure of the job: the report says so.
		status, msg = "error", "no sources found: "+serr.Error()
	}
	keys = append(keys, "discover:done")
	evs = append(evs, EventData{Stage: string(store.StepSearch), Status: status, Message: msg, Total: len(d.Sources)})
	if err := r.events(keys, evs); err != nil {
		return DiscoverOutput{}, err
	}
	if err := r.step(store.StepSearch, store.StepComplete, len(d.Sources), len(d.Sources)); err != nil {
		return DiscoverOutput{}, err
	}
	return DiscoverOutput{Sources: len(d.Sources), Summarize: r.p.Config.Research.Agent.Enabled}, nil
}

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
