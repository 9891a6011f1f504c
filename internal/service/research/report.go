package research

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sandstep/sandstep/internal/service/report"
	"github.com/sandstep/sandstep/internal/service/store"
)

// ReportOutput describes the saved report.
type ReportOutput struct {
	Bytes   int    `json:"bytes"`
	Sources int    `json:"sources"`
	Model   string `json:"model,omitempty"`
	// Accuracy is the citation check's share of supported claims; absent
	// when the report cites nothing.
	Accuracy *float64 `json:"accuracy,omitempty"`
}

// Report writes the job's report: by the configured chat model, streamed into
// the store as it is written so that readers see it grow, or extractively
// from the sources when no model is configured or none answers. Then every
// cited sentence is checked against the text its sources gave (see
// report.Finish): every [n] of the saved report refers to a source it was
// written from, and the report says which sentences its sources do not
// support.
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
	all, err := r.p.Store.ListSources(r.ctx, r.job.ID)
	if err != nil {
		return ReportOutput{}, fmt.Errorf("list sources: %w", err)
	}
	skips, err := r.p.Store.ListSkips(r.ctx, r.job.ID)
	if err != nil {
		return ReportOutput{}, fmt.Errorf("list skipped pages: %w", err)
	}
	given := report.Select(reportSources(all), report.PromptOptions{MaxSources: b.SummarySources, CharsPerSource: b.CharsPerSource})
	var (
		body  string
		model string
	)
	llm := r.p.LLM
	if llm != nil {
		// The prompt is about the sources' text: a model call that would
		// take the job past its budget is not made.
		chars := len(r.req.Query)
		for _, s := range given {
			chars += len(s.Text)
		}
		over, err := r.overBudget(store.Usage{Tokens: map[string]store.TokenCount{"": {Input: int64((chars + 3) / 4)}}})
		if err != nil {
			return ReportOutput{}, err
		}
		if over != "" {
			llm = nil
			if err := r.fallback(FallbackBudgetExhausted, string(store.StepFinalize), "the job's budget is reached ("+over+"): the report is built from the sources, without a model"); err != nil {
				return ReportOutput{}, err
			}
		}
	}
	if llm != nil {
		w := &reportStream{r: r}
		var comp report.Completion
		body, comp, err = report.Generate(r.ctx, llm, r.req.Query, given, w.chunk)
		w.flush()
		if cerr := r.checkCancel(); cerr != nil {
			return ReportOutput{}, cerr
		}
		model = comp.Model
		switch {
		case body == "":
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
	cfg := r.p.Config.Research.Citations
	opt := report.FinishOptions{Threshold: cfg.Threshold, Action: cfg.Action}
	if body == "" {
		body = report.Extractive(r.req.Query, given)
		if opt.Action == report.ActionRevise {
			// Quoted sentences have nothing a model could revise.
			opt.Action = report.ActionAnnotate
		}
	} else {
		opt.Client = llm
	}
	res := report.Finish(r.ctx, r.req.Query, body, given, report.Unused(all, skips, given), opt)
	if cerr := r.checkCancel(); cerr != nil {
		return ReportOutput{}, cerr
	}
	if res.ReviseErr != nil {
		r.log.Warn("revision of unsupported sentences failed", "err", res.ReviseErr)
		if err := r.event("report:revise", EventData{Stage: string(store.StepFinalize), Status: "running",
			Message: "the model could not revise the unsupported sentences (" + errSummary(res.ReviseErr) + "): they are marked instead"}); err != nil {
			return ReportOutput{}, err
		}
	}
	details, err := fitDetails(res.Details)
	if err != nil {
		return ReportOutput{}, err
	}
	footer, err := r.costFooter()
	if err != nil {
		return ReportOutput{}, err
	}
	res.Markdown += footer
	if err := r.p.Store.WriteReport(r.ctx, r.job.ID, store.Report{Markdown: res.Markdown, Complete: true, Details: details}); err != nil {
		return ReportOutput{}, fmt.Errorf("save report: %w", err)
	}
	c := res.Details.Citations
	msg := fmt.Sprintf("report written from %d sources", len(given))
	if model != "" {
		msg += " by " + model
	}
	if c.Total > 0 {
		msg += fmt.Sprintf("; citations: %d of %d sentences supported (%.0f%%)", c.Supported, c.Total, *c.Accuracy*100)
	}
	if c.Removed > 0 {
		msg += fmt.Sprintf(", %d citations of sources that do not exist removed", c.Removed)
	}
	if err := r.event("report:done", EventData{Stage: string(store.StepFinalize), Status: "complete", Message: msg}); err != nil {
		return ReportOutput{}, err
	}
	if err := r.step(store.StepFinalize, store.StepComplete, 0, 0); err != nil {
		return ReportOutput{}, err
	}
	return ReportOutput{Bytes: len(res.Markdown), Sources: len(given), Model: model, Accuracy: c.Accuracy}, nil
}

// fitDetails encodes the report's details within the store's limit: the
// flagged sentences past what fits are counted instead of listed, then the
// not-used URLs are cut.
func fitDetails(d report.Details) ([]byte, error) {
	for {
		data, err := json.Marshal(d)
		if err != nil {
			return nil, fmt.Errorf("encode report details: %w", err)
		}
		if len(data) <= store.MaxReportDetailsBytes {
			return data, nil
		}
		switch c := &d.Citations; {
		case len(c.Flagged) > 0:
			cut := max(1, len(c.Flagged)/4)
			c.Flagged = c.Flagged[:len(c.Flagged)-cut]
			c.Omitted += cut
		case len(d.NotUsed) > 0:
			d.NotUsed = d.NotUsed[:len(d.NotUsed)*3/4]
		default:
			return nil, fmt.Errorf("report details are %d bytes, more than %d", len(data), store.MaxReportDetailsBytes)
		}
	}
}

// reportSources are what the report may cite: the crawled pages, or, when
// no page was crawled (no sandbox, unreadable output), the search results.
// Anti-bot challenge pages are never among them.
func reportSources(all []store.Source) []store.Source {
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
		return crawled
	}
	return searched
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
