package research

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sandstep/sandstep/internal/service/budget"
	"github.com/sandstep/sandstep/internal/service/report"
	"github.com/sandstep/sandstep/internal/service/store"
)

// salvageTimeout bounds what Cleanup spends keeping an unfinished job's
// findings: stopping its crawler, reading what it wrote, writing the report.
// The sandbox is terminated after it whatever happens.
const salvageTimeout = time.Minute

// crawlerStopWait is how long a stopped crawler gets to write its output.
const crawlerStopWait = 15 * time.Second

// salvage keeps what a job that ends cancelled or failed had found, before
// its sandbox goes: a crawler still running is stopped (it writes the pages
// it has on SIGTERM) and its pages are stored; then, when no report was
// written and pages were crawled, an extractive report of them is saved as
// incomplete, which the API marks partial. It is best effort: what fails is
// logged, and the job ends as it would have.
func (p *Phases) salvage(ctx context.Context, job store.Job, status store.Status, failure string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, salvageTimeout)
	defer cancel()
	var req store.JobRequest
	if err := json.Unmarshal(job.Request, &req); err != nil {
		log.Warn("salvage: stored request", "err", err)
		return
	}
	r := &run{p: p, job: job, req: req, log: log, use: &usageMeter{}, usageKey: "salvage"}
	r.ctx, r.cancel = context.WithCancelCause(ctx)
	defer r.cancel(nil)
	// What the salvage runs counts too, before Cleanup adds the job up.
	defer func() {
		if err := r.recordUsage(); err != nil {
			log.Warn("salvage: record usage", "err", err)
		}
	}()
	if job.Step(store.StepCrawl).State == store.StepRunning {
		if n, err := r.salvageCrawl(); err != nil {
			log.Warn("salvage: the crawl's pages could not be kept", "err", err)
		} else if n > 0 {
			log.Info("salvage: kept the pages of the interrupted crawl", "pages", n)
		}
	}
	if err := r.partialReport(status, failure); err != nil {
		log.Warn("salvage: no partial report", "err", err)
	}
}

// salvageCrawl stops the crawler in each of the job's live sandboxes, waits
// for its output and stores its pages, as collect does at the end of a
// finished crawl; steps and events are left alone (the job is ending).
func (r *run) salvageCrawl() (int, error) {
	entries, err := r.p.Sandboxes.Held(r.ctx, jobOwner(r.job))
	if err != nil {
		return 0, fmt.Errorf("ledger: %w", err)
	}
	kept := 0
	var errs []error
	for _, e := range entries {
		id := e.ProviderID
		if started, err := r.crawlStartedAt(id); err != nil || started.IsZero() {
			continue
		}
		if _, done, err := r.crawlerExit(id); err == nil && !done {
			if err := r.stopCrawler(id, "the job is ending"); err != nil {
				errs = append(errs, err)
				continue
			}
			for deadline := time.Now().Add(crawlerStopWait); time.Now().Before(deadline); {
				if _, done, err := r.crawlerExit(id); err != nil || done {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
		out, _, err := r.readOutput(id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		sources, err := r.p.Store.ListSources(r.ctx, r.job.ID)
		if err != nil {
			return kept, fmt.Errorf("list sources: %w", err)
		}
		c := crawledSources(sources, out)
		if len(c.put) > 0 {
			if err := r.p.Store.PutSources(r.ctx, r.job.ID, c.put); err != nil {
				return kept, fmt.Errorf("store pages: %w", err)
			}
		}
		if len(c.skips) > 0 {
			if err := r.p.Store.PutSkips(r.ctx, r.job.ID, c.skips); err != nil {
				return kept, fmt.Errorf("store skipped pages: %w", err)
			}
		}
		kept += len(c.put) - c.blocked
	}
	return kept, errors.Join(errs...)
}

// partialReport writes an extractive report of the crawled pages when the
// job has none, opening with why it is partial: the phase a cancel
// stopped, or the job's failure.
func (r *run) partialReport(status store.Status, failure string) error {
	if _, err := r.p.Store.GetReport(r.ctx, r.job.ID); err == nil || !errors.Is(err, store.ErrNotFound) {
		return err // a report (perhaps the model's, cut short) is there
	}
	all, err := r.p.Store.ListSources(r.ctx, r.job.ID)
	if err != nil {
		return fmt.Errorf("list sources: %w", err)
	}
	var crawled []store.Source
	for _, s := range all {
		if s.Origin == store.OriginCrawl {
			crawled = append(crawled, s)
		}
	}
	if len(crawled) == 0 {
		return nil // nothing was read: the job ends without a report
	}
	skips, err := r.p.Store.ListSkips(r.ctx, r.job.ID)
	if err != nil {
		return fmt.Errorf("list skipped pages: %w", err)
	}
	b, err := budget.Parse(r.req.Mode, r.req.Optimization)
	if err != nil {
		return err
	}
	given := report.Select(crawled, report.PromptOptions{MaxSources: b.SummarySources, CharsPerSource: b.CharsPerSource})
	cfg := r.p.Config.Research.Citations
	opt := report.FinishOptions{Threshold: cfg.Threshold, Action: cfg.Action}
	if opt.Action == report.ActionRevise {
		opt.Action = report.ActionAnnotate // no model revises quoted sentences
	}
	res := report.Finish(r.ctx, r.req.Query, report.Extractive(r.req.Query, given), given, report.Unused(all, skips, given), opt)
	details, err := fitDetails(res.Details)
	if err != nil {
		return err
	}
	why := "was cancelled"
	if r.job.Phase != "" {
		why += " during " + r.job.Phase
	}
	if status == store.StatusFailed {
		why = "failed (" + firstLine(failure) + ")"
	}
	pages := "pages"
	if len(crawled) == 1 {
		pages = "page"
	}
	md := fmt.Sprintf("> **Partial report.** The job %s; this report is built from the %d %s crawled by then, "+
		"in their own words, without a model.\n\n%s", why, len(crawled), pages, res.Markdown)
	if err := r.p.Store.WriteReport(r.ctx, r.job.ID, store.Report{Markdown: md, Complete: false, Details: details}); err != nil {
		return fmt.Errorf("save report: %w", err)
	}
	data, _ := json.Marshal(EventData{Stage: string(store.StepFinalize), Status: "partial", Message: fmt.Sprintf("partial report written from the %d %s crawled", len(crawled), pages)})
	_, err = r.p.Store.AppendEvents(r.ctx, r.job.ID, []store.Event{{Key: "report:partial-salvage", Type: string(store.StepFinalize), Data: data}})
	return err
}
