package research

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sandstep/sandstep/internal/report"
	"github.com/sandstep/sandstep/internal/store"
)

// ReportOutput describes the saved report.
type ReportOutput struct {
	Bytes   int    `json:"bytes"`
	Sources int    `json:"sources"`
	Model   string `json:"model,omitempty"`
}

// Report writes the job's report: by the configured chat model, streamed into
// the store as it is written so that readers see it grow, or extractively
// from the sources when no model is configured or none answers. Every [n]
// in the saved report refers to a stored source.
func (p *Phases) Report(ctx context.Context, in Input) (ReportOutput, error) {
	r, err := p.begin(ctx, "report", in)
	if err != nil {
		return ReportOutput{}, err
	}
	out, err := r.report()
	return out, r.end(err)
}

func (r *run) report() (ReportOutput, error) {
	b, err := r.budget()
	if err != nil {
		return ReportOutput{}, err
	}
	if st := r.job.Step(store.StepAnalysis).State; st == store.StepPending {
		// Summaries were not asked for: the analysis is the raw extracts.
		if err := r.step(store.StepAnalysis, store.StepComplete, 0, 0); err != nil {
			return ReportOutput{}, err
		}
	}
	if err := r.step(store.StepFinalize, store.StepRunning, 0, 0); err != nil {
		return ReportOutput{}, err
	}
	sources, err := r.reportSources()
	if err != nil {
		return ReportOutput{}, err
	}
	var (
		md    string
		model string
	)
	if r.p.LLM != nil {
		w := &reportStream{r: r}
		var comp report.Completion
		md, comp, err = report.Generate(r.ctx, r.p.LLM, r.req.Query, sources,
			report.PromptOptions{MaxSources: b.SummarySources, CharsPerSource: b.CharsPerSource}, w.chunk)
		w.flush()
		if cerr := r.checkCancel(); cerr != nil {
			return ReportOutput{}, cerr
		}
		model = comp.Model
		switch {
		case md == "":
			r.log.Warn("no model answered", "err", err)
			if ferr := r.fallback(FallbackExtractive, string(store.StepFinalize), "no model answered ("+errSummary(err)+"): the report is built from the sources"); ferr != nil {
				return ReportOutput{}, ferr
			}
		case errors.Is(err, report.ErrPartial):
			if eerr := r.event("report:partial", EventData{Stage: string(store.StepFinalize), Status: "running", Message: "the model broke off; the report keeps what it wrote"}); eerr != nil {
				return ReportOutput{}, eerr
			}
		}
	}
	if md == "" {
		md = report.Extractive(r.req.Query, sources)
	}
	if err := r.p.Store.PutReport(r.ctx, r.job.ID, md, true); err != nil {
		return ReportOutput{}, fmt.Errorf("save report: %w", err)
	}
	msg := fmt.Sprintf("report written from %d sources", len(sources))
	if model != "" {
		msg += " by " + model
	}
	if err := r.event("report:done", EventData{Stage: string(store.StepFinalize), Status: "complete", Message: msg}); err != nil {
		return ReportOutput{}, err
	}
	if err := r.step(store.StepFinalize, store.StepComplete, 0, 0); err != nil {
		return ReportOutput{}, err
	}
	return ReportOutput{Bytes: len(md), Sources: len(sources), Model: model}, nil
}

// reportSources are what the report may cite: the crawled pages, or, when
// no page was crawled (no sandbox, unreadable output), the search results.
// Anti-bot challenge pages are never among them.
func (r *run) reportSources() ([]store.Source, error) {
	all, err := r.p.Store.ListSources(r.ctx, r.job.ID)
	if err != nil {
		return nil, fmt.Errorf("list sources: %w", err)
	}
	var crawled, searched []store.Source
	for _, s := range all {
		switch s.Origin {
		case store.OriginCrawl:
			crawled = append(crawled, s)
		case store.OriginSearch:
			searched = append(searched, s)
		}
	}
	if len(crawled) > 0 {
		return crawled, nil
	}
	return searched, nil
}

// reportStream saves the model's text as it streams, at most every second,
// so status readers see the report grow without a write per token.
type reportStream struct {
	r       *run
	mu      sync.Mutex
	pending strings.Builder
	last    time.Time
	failed  bool
}

func (w *reportStream) chunk(text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending.WriteString(text)
	if time.Since(w.last) >= time.Second {
		w.save()
	}
}

func (w *reportStream) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.save()
}

func (w *reportStream) save() {
	if w.pending.Len() == 0 || w.failed {
		return
	}
	if err := w.r.p.Store.AppendReport(w.r.ctx, w.r.job.ID, w.pending.String(), false); err != nil {
		// The final report is saved whole at the end; a lost progress
		// write only means readers see less while it streams.
		w.r.log.Warn("save report progress", "err", err)
		w.failed = true
	}
	w.pending.Reset()
	w.last = time.Now()
}

func errSummary(err error) string {
	if err == nil {
		return "no answer"
	}
	return firstLine(err.Error())
}
