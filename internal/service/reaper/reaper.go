// Package reaper is the scheduled cleanup: one Pass deletes session volumes
// idle past their TTL, closes idle session sandboxes, terminates sandboxes
// that nothing needs (their job or session ended, their deadline passed, or
// the ledger never knew them), closes ledger entries of sandboxes that are
// gone, and stops the executions of cancelled jobs that did not stop. In
// AWS the ReaperFunction runs a pass on a schedule; `sandstep serve` runs
// one on a ticker; `sandstep reap` runs one by hand.
//
// Every action is idempotent or a conditional write, so passes may overlap
// with each other, with runs and with the phases' own cleanup: whoever
// loses a race changes nothing.
package reaper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/sandstep/sandstep/internal/service/docsearch"
	"github.com/sandstep/sandstep/internal/service/sessions"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/providers"
)

// Executions are the running deep-research executions, where the reaper
// can list them: Step Functions in AWS.
type Executions interface {
	// Running returns the job ids (execution names) of running executions.
	Running(ctx context.Context) ([]string, error)
	// Stop ends a job's execution now.
	Stop(ctx context.Context, jobID, cause string) error
}

// Reaper runs cleanup passes. Store and Provider are required.
type Reaper struct {
	Store        *store.Store
	Provider     providers.Provider
	ProviderName string
	// Sessions, when set, has its expired and idle sessions cleaned.
	Sessions *sessions.Service
	// Executions, when set, has executions of jobs cancelled more than
	// CancelGrace ago stopped (locally the engine stops them itself).
	Executions  Executions
	CancelGrace time.Duration
	// CreateGrace is how long a ledger entry may stay "creating" before
	// the create is taken to have died with its caller. Default 10m.
	CreateGrace time.Duration
	// Docs, when set, has the LLM tools' documentation indexed when it is
	// due ([tools] reindex_interval), in passes after startup.
	Docs DocsIndexer
	// Now is the pass's clock (default time.Now); tests move it.
	Now    func() time.Time
	Logger *slog.Logger
}

// DocsIndexer indexes the dependencies' docs when due (docsearch.Service).
type DocsIndexer interface {
	IndexIfDue(ctx context.Context) (docsearch.Report, error)
}

// Counts is what one pass did.
type Counts struct {
	SessionsExpired  int `json:"sessions_expired"`
	DeletionsResumed int `json:"deletions_resumed"`
	SandboxesIdle    int `json:"session_sandboxes_closed_idle"`
	StaleRunsEnded   int `json:"stale_runs_ended"`
	ExpiryWarnings   int `json:"expiry_warnings"`
	// LedgerReaped: live entries whose sandbox was terminated because its
	// deadline passed or its job or session no longer needs it.
	LedgerReaped int `json:"ledger_reaped"`
	// LedgerGone: live entries whose sandbox the provider no longer has.
	LedgerGone int `json:"ledger_gone"`
	// Orphans: sandboxes carrying our owner label the ledger did not know.
	Orphans           int `json:"orphans_terminated"`
	ExecutionsStopped int `json:"executions_stopped"`
	// RunsInterrupted: run records failed by a startup pass.
	RunsInterrupted int `json:"runs_interrupted"`
	// JobsEnded: jobs a startup pass found with a sandbox but no running
	// execution; their cleanup ran.
	JobsEnded int `json:"jobs_ended"`
	// DocChunksWritten: documentation chunks new or changed since the
	// last indexing (a page that could not be fetched is logged).
	DocChunksWritten int `json:"doc_chunks_written"`
	Errors           int `json:"errors"`
}

// Total counts every change.
func (c Counts) Total() int {
	return c.SessionsExpired + c.DeletionsResumed + c.SandboxesIdle + c.StaleRunsEnded + c.ExpiryWarnings +
		c.LedgerReaped + c.LedgerGone + c.Orphans + c.ExecutionsStopped + c.RunsInterrupted + c.JobsEnded + c.DocChunksWritten
}

func (r *Reaper) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Reaper) log() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.Default()
}

// Pass runs every step once. A step's failure is counted and joined into
// the error, and the other steps still run.
func (r *Reaper) Pass(ctx context.Context) (Counts, error) {
	return r.pass(ctx, nil)
}

// Startup is the pass a server runs once as it starts on its own data,
// after resuming its executions and before serving: nothing that began
// before since can still be in flight, except the executions Executions
// runs now. So, at once and with no grace: sessions held by runs are taken
// back and their pending runs failed (InterruptedReason), sandboxes of
// sessions not in use are closed, and a job with a live sandbox but no
// running execution gets its cleanup (Executions.Stop), which ends it and
// terminates the sandbox. Sandboxes the ledger does not know go, as in
// every pass.
func (r *Reaper) Startup(ctx context.Context, since time.Time) (Counts, error) {
	return r.pass(ctx, &since)
}

// pass is Pass, or Startup with since set.
func (r *Reaper) pass(ctx context.Context, since *time.Time) (Counts, error) {
	start := time.Now()
	now := r.now()
	var c Counts
	var errs []error
	step := func(name string, n *int, f func() (int, error)) {
		got, err := f()
		*n += got
		if err != nil {
			c.Errors++
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	if sv := r.Sessions; sv != nil {
		if since != nil {
			step("interrupted runs", &c.StaleRunsEnded, func() (int, error) { return sv.EndRunsHeldBefore(ctx, *since) })
			step("interrupted run records", &c.RunsInterrupted, func() (int, error) { return sv.FailInterruptedRuns(ctx, *since) })
		} else {
			step("stale runs", &c.StaleRunsEnded, func() (int, error) { return sv.EndStaleRuns(ctx, now) })
		}
		step("expiry warnings", &c.ExpiryWarnings, func() (int, error) { return sv.WarnExpiring(ctx, now) })
		step("expired sessions", &c.SessionsExpired, func() (int, error) { return sv.ExpireIdle(ctx, now) })
		step("unfinished deletions", &c.DeletionsResumed, func() (int, error) { return sv.FinishDeletions(ctx) })
		if since != nil {
			// Not one of them is in use: the server serves no run yet, and
			// the sessions taken back above count as used just now.
			step("sandboxes of sessions not in use", &c.SandboxesIdle, func() (int, error) { return sv.CloseSandboxesUnusedSince(ctx, time.Now()) })
		} else {
			step("idle sandboxes", &c.SandboxesIdle, func() (int, error) { return sv.CloseIdleSandboxes(ctx, now) })
		}
	}
	var running map[string]bool
	if since != nil && r.Executions != nil {
		ids, err := r.Executions.Running(ctx)
		if err != nil {
			c.Errors++
			errs = append(errs, fmt.Errorf("list executions: %w", err))
		} else {
			running = make(map[string]bool, len(ids))
			for _, id := range ids {
				running[id] = true
			}
		}
	}
	if err := r.sandboxes(ctx, now, running, &c); err != nil {
		c.Errors++
		errs = append(errs, err)
	}
	if r.Docs != nil && since == nil {
		step("docs index", &c.DocChunksWritten, func() (int, error) {
			rep, err := r.Docs.IndexIfDue(ctx)
			return rep.Written, err
		})
	}
	if r.Executions != nil {
		step("cancelled executions", &c.ExecutionsStopped, func() (int, error) { return r.stopCancelled(ctx, now) })
	}
	err := errors.Join(errs...)
	what := "reaper pass"
	if since != nil {
		what = "reaper startup pass"
	}
	attrs := []any{"took", time.Since(start), "counts", c}
	if err != nil {
		r.log().Warn(what, append(attrs, "err", err)...)
	} else {
		r.log().Info(what, attrs...)
	}
	return c, err
}

// sandboxes reaps the ledger and the provider's sandboxes. running, set in
// a startup pass, names the jobs whose executions run: any other job's
// sandbox is claimed by nothing.
func (r *Reaper) sandboxes(ctx context.Context, now time.Time, running map[string]bool, c *Counts) error {
	// The ledger is read before the provider is asked: an entry listed
	// here was written before its create, so its sandbox, if alive, is in
	// the provider's answer below.
	live, err := r.Store.LedgerListLive(ctx, now.AddDate(100, 0, 0), 0)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	info, err := r.Provider.Info(ctx)
	if err != nil {
		return fmt.Errorf("provider: %w", err)
	}
	var errs []error
	keep := live[:0]
	for _, e := range live {
		if e.Provider != "" && r.ProviderName != "" && e.Provider != r.ProviderName {
			// Another provider's sandbox (the configuration changed): this
			// one can neither see nor stop it.
			continue
		}
		reason, err := r.unneeded(ctx, now, e, running)
		if err != nil {
			errs = append(errs, err)
			keep = append(keep, e)
			continue
		}
		if reason == "" {
			keep = append(keep, e)
			continue
		}
		if reason == reasonNotRunning {
			if err := r.endJob(ctx, e); err != nil {
				errs = append(errs, err)
			} else {
				c.JobsEnded++
			}
		}
		if err := r.reap(ctx, e, reason); err != nil {
			errs = append(errs, err)
			continue
		}
		c.LedgerReaped++
	}
	if info.Capabilities.ListByLabels {
		errs = append(errs, r.reconcileByList(ctx, keep, c))
	} else {
		errs = append(errs, r.reconcileByGet(ctx, keep, c))
	}
	return errors.Join(errs...)
}

// reasonNotRunning is why a startup pass reaps the sandbox of a job that
// did not end but whose execution does not run.
const reasonNotRunning = "its job's execution is not running"

// endJob ends the job of a sandbox that a startup pass found unclaimed,
// through its execution's cleanup, so that the job does not stay running.
func (r *Reaper) endJob(ctx context.Context, e store.LedgerEntry) error {
	jobID := strings.TrimPrefix(e.Owner, "job:")
	if err := r.Executions.Stop(ctx, jobID, "the server stopped while the job ran, and its execution could not be resumed"); err != nil {
		return fmt.Errorf("end job %s: %w", jobID, err)
	}
	r.log().Warn("ended a job whose execution was not running", "job_key", jobID, "sandbox", e.Name)
	return nil
}

// unneeded says why a live entry's sandbox should go ("" to keep it).
// running is set in a startup pass only.
func (r *Reaper) unneeded(ctx context.Context, now time.Time, e store.LedgerEntry, running map[string]bool) (string, error) {
	if e.Deadline.Before(now) {
		return "deadline passed", nil
	}
	switch {
	case strings.HasPrefix(e.Owner, "job:"):
		job, err := r.Store.GetJob(ctx, strings.TrimPrefix(e.Owner, "job:"))
		if errors.Is(err, store.ErrNotFound) {
			return "job gone", nil
		}
		if err != nil {
			return "", err
		}
		if job.Status.Terminal() {
			return "job ended", nil
		}
		if running != nil && !running[job.ID] {
			return reasonNotRunning, nil
		}
	case strings.HasPrefix(e.Owner, "session:") && r.Sessions != nil:
		wanted, err := r.Sessions.SandboxWanted(ctx, e)
		if err != nil {
			return "", err
		}
		if !wanted {
			return "session does not use it", nil
		}
	}
	if e.State == store.LedgerCreating && e.ProviderID == "" && now.Sub(e.CreatedAt) > r.createGrace() {
		return "create never confirmed", nil
	}
	return "", nil
}

func (r *Reaper) createGrace() time.Duration {
	if r.CreateGrace > 0 {
		return r.CreateGrace
	}
	return 10 * time.Minute
}

// reap terminates an entry's sandbox and closes the entry. An entry whose
// create was never confirmed has no id: where the provider can list, its
// sandbox is found by name.
func (r *Reaper) reap(ctx context.Context, e store.LedgerEntry, reason string) error {
	id := e.ProviderID
	if id == "" {
		list, err := r.Provider.List(ctx, providers.ListFilter{Name: e.Name})
		if err != nil && !providers.IsUnsupported(err) {
			return fmt.Errorf("find sandbox %s: %w", e.Name, err)
		}
		for _, sb := range list {
			if sb.Name == e.Name {
				id = sb.ID
			}
		}
	}
	if id != "" {
		if err := r.Provider.Terminate(ctx, id); err != nil {
			return fmt.Errorf("terminate %s: %w", id, err)
		}
	}
	if _, err := r.Store.LedgerClose(ctx, e.Name, "reaped: "+reason); err != nil {
		return fmt.Errorf("close ledger entry %s: %w", e.Name, err)
	}
	r.log().Info("reaped sandbox", "name", e.Name, "sandbox_id", id, "owner", e.Owner, "reason", reason)
	return nil
}

// reconcileByList compares the provider's sandboxes with the ledger: a
// sandbox of ours the ledger does not hold as live is terminated; a live
// entry whose sandbox is not there any more is closed.
func (r *Reaper) reconcileByList(ctx context.Context, live []store.LedgerEntry, c *Counts) error {
	list, err := r.Provider.List(ctx, providers.ListFilter{Labels: map[string]string{providers.LabelOwner: "sandstep"}})
	if err != nil {
		return fmt.Errorf("list sandboxes: %w", err)
	}
	var errs []error
	present := make(map[string]bool, len(list))
	for _, sb := range list {
		present[sb.ID] = true
		if sb.State != "" && sb.State != providers.StateRunning {
			continue
		}
		known, err := r.known(ctx, sb)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if known {
			continue
		}
		if err := r.Provider.Terminate(ctx, sb.ID); err != nil {
			errs = append(errs, fmt.Errorf("terminate orphan %s: %w", sb.ID, err))
			continue
		}
		c.Orphans++
		r.log().Warn("terminated a sandbox the ledger does not know", "sandbox_id", sb.ID, "name", sb.Name, "labels", sb.Labels)
	}
	for _, e := range live {
		if e.State != store.LedgerRunning || e.ProviderID == "" || present[e.ProviderID] {
			continue
		}
		if err := r.closeGone(ctx, e); err != nil {
			errs = append(errs, err)
			continue
		}
		c.LedgerGone++
	}
	return errors.Join(errs...)
}

// known reports whether the ledger holds sb as live. The ledger entry is
// read now, consistently: an entry is written before its create, so a
// sandbox that exists and is ours has one unless it was created behind
// the ledger's back, or its entry was closed.
func (r *Reaper) known(ctx context.Context, sb providers.Sandbox) (bool, error) {
	if sb.Name == "" {
		return false, nil
	}
	e, err := r.Store.LedgerGet(ctx, sb.Name)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if e.State == store.LedgerTerminated {
		return false, nil
	}
	return e.ProviderID == "" || e.ProviderID == sb.ID, nil
}

// reconcileByGet asks the provider about each live entry, for providers
// that cannot list: a sandbox it does not know any more is gone.
func (r *Reaper) reconcileByGet(ctx context.Context, live []store.LedgerEntry, c *Counts) error {
	var errs []error
	for _, e := range live {
		if e.ProviderID == "" {
			continue
		}
		sb, err := r.Provider.Get(ctx, e.ProviderID)
		if err == nil && sb.State != providers.StateTerminated {
			continue
		}
		if err != nil && !providers.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("get sandbox %s: %w", e.ProviderID, err))
			continue
		}
		if err := r.closeGone(ctx, e); err != nil {
			errs = append(errs, err)
			continue
		}
		c.LedgerGone++
	}
	return errors.Join(errs...)
}

func (r *Reaper) closeGone(ctx context.Context, e store.LedgerEntry) error {
	if _, err := r.Store.LedgerClose(ctx, e.Name, "gone"); err != nil {
		return fmt.Errorf("close ledger entry %s: %w", e.Name, err)
	}
	r.log().Info("closed the ledger entry of a sandbox that is gone", "name", e.Name, "sandbox_id", e.ProviderID)
	return nil
}

// stopCancelled stops the executions of jobs cancelled longer than the
// grace period ago: their phases should have ended them by now.
func (r *Reaper) stopCancelled(ctx context.Context, now time.Time) (int, error) {
	ids, err := r.Executions.Running(ctx)
	if err != nil {
		return 0, fmt.Errorf("list executions: %w", err)
	}
	grace := r.CancelGrace
	if grace <= 0 {
		grace = 30 * time.Second
	}
	n := 0
	var errs []error
	for _, id := range ids {
		job, err := r.Store.GetJob(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !job.CancelRequested || job.CancelRequestedAt.After(now.Add(-grace)) {
			continue
		}
		if err := r.Executions.Stop(ctx, id, "the job was cancelled and did not stop within the grace period"); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", id, err))
			continue
		}
		n++
		r.log().Warn("stopped the execution of a cancelled job", "job_key", id, "cancelled_at", job.CancelRequestedAt)
	}
	return n, errors.Join(errs...)
}
