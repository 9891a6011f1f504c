// Package reaper is the scheduled cleanup: one Pass deletes session volumes
// idle past their TTL, closes idle session sandboxes, deletes dependency
// snapshots no configuration uses any more, terminates sandboxes
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
	"time"

	"github.com/sandstep/sandstep/internal/service/direct"
	"github.com/sandstep/sandstep/internal/service/docsearch"
	"github.com/sandstep/sandstep/internal/service/quota"
	"github.com/sandstep/sandstep/internal/service/sandboxes"
	"github.com/sandstep/sandstep/internal/service/sessions"
	"github.com/sandstep/sandstep/internal/service/store"
)

// Executions are the running deep-research executions, where the reaper
// can list them: Step Functions in AWS.
type Executions interface {
	// Running returns the job ids (execution names) of running executions.
	Running(ctx context.Context) ([]string, error)
	// Stop ends a job's execution now.
	Stop(ctx context.Context, jobID, cause string) error
}

// Reaper runs cleanup passes. Store and Sandboxes are required.
type Reaper struct {
	Store *store.Store
	// Sandboxes reconciles the ledger with the provider.
	Sandboxes *sandboxes.Manager
	// Sessions, when set, has its expired and idle sessions cleaned.
	Sessions *sessions.Service
	// Executions, when set, has executions of jobs cancelled more than
	// CancelGrace ago stopped (locally the engine stops them itself).
	Executions  Executions
	CancelGrace time.Duration
	// CreateGrace is how long a ledger entry may stay "creating" before
	// the create is taken to have died with its caller. Default 10m.
	CreateGrace time.Duration
	// QuotaGrace is how old a tenant quota slot must be before a pass
	// checks its holder (a slot is taken just before its job or ledger
	// entry is written). Default 2m.
	QuotaGrace time.Duration
	// Direct, when set, has direct sandboxes (the /v1/sandboxes API)
	// warned of, expired (with their children) and reaped when idle.
	Direct DirectReaper
	// Docs, when set, has the LLM tools' documentation indexed when it is
	// due ([tools] reindex_interval), in passes after startup.
	Docs DocsIndexer
	// Now is the pass's clock (default time.Now); tests move it.
	Now    func() time.Time
	Logger *slog.Logger
}

// DirectReaper is the pass over direct sandboxes (direct.Service).
type DirectReaper interface {
	Reap(ctx context.Context, now time.Time) (direct.ReapCounts, error)
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
	// SnapshotsDeleted: this deployment's dependency snapshots no
	// configuration names nor live sandbox uses, past the grace period.
	SnapshotsDeleted int `json:"snapshots_deleted"`
	// Direct is what the pass over direct sandboxes did.
	Direct direct.ReapCounts `json:"direct"`
	// RunsInterrupted: run records failed by a startup pass.
	RunsInterrupted int `json:"runs_interrupted"`
	// JobsEnded: jobs a startup pass found with a sandbox but no running
	// execution; their cleanup ran.
	JobsEnded int `json:"jobs_ended"`
	// LedgerMigrated: live entries of an older release given their key in
	// the sharded live index (store.MigrateLedgerIndex), by a startup pass
	// or a migrating one.
	LedgerMigrated int `json:"ledger_migrated,omitempty"`
	// DocChunksWritten: documentation chunks new or changed since the
	// last indexing (a page that could not be fetched is logged).
	DocChunksWritten int `json:"doc_chunks_written"`
	// QuotaSlotsReleased: tenant quota slots (concurrent_jobs,
	// concurrent_sandboxes) whose job ended or whose sandbox's ledger
	// entry closed without giving them back (a crash in between).
	QuotaSlotsReleased int `json:"quota_slots_released"`
	Errors             int `json:"errors"`
}

// Total counts every change.
func (c Counts) Total() int {
	return c.SessionsExpired + c.DeletionsResumed + c.SandboxesIdle + c.StaleRunsEnded + c.ExpiryWarnings +
		c.LedgerReaped + c.LedgerGone + c.Orphans + c.ExecutionsStopped + c.SnapshotsDeleted + c.RunsInterrupted + c.JobsEnded + c.LedgerMigrated + c.DocChunksWritten + c.QuotaSlotsReleased
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

// Migrate is a pass that first gives ledger entries written by a release
// before the sharded live index their key in it, so the pass (and every one
// after) sees them: the reaper Lambda runs it when invoked with
// {"migrate_ledger_index": true} (docs/capacity.md, "Migration").
func (r *Reaper) Migrate(ctx context.Context) (Counts, error) {
	n, err := r.Store.MigrateLedgerIndex(ctx)
	if err != nil {
		return Counts{Errors: 1}, err
	}
	c, err := r.pass(ctx, nil)
	c.LedgerMigrated = n
	return c, err
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
	if since != nil {
		// A data directory from an older release: its live entries must be
		// in the live index before the ledger step below reads it.
		step("ledger index migration", &c.LedgerMigrated, func() (int, error) { return r.Store.MigrateLedgerIndex(ctx) })
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
		step("old dependency snapshots", &c.SnapshotsDeleted, func() (int, error) { return sv.CollectSnapshots(ctx, now) })
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
	// After the ledger step, which closes the entries of sandboxes that
	// are gone: their slots go back in the same pass.
	step("quota slots", &c.QuotaSlotsReleased, func() (int, error) {
		grace := r.QuotaGrace
		if grace <= 0 {
			grace = 2 * time.Minute
		}
		got, err := quota.Reconcile(ctx, r.Store, grace, now, r.Sandboxes.Closed)
		return got.Jobs + got.Sandboxes, err
	})
	// After the ledger's pass, so that the records of children it reaped
	// (their parent gone) close in the same pass.
	if r.Direct != nil {
		got, err := r.Direct.Reap(ctx, now)
		c.Direct = got
		if err != nil {
			c.Errors++
			errs = append(errs, fmt.Errorf("direct sandboxes: %w", err))
		}
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

// sandboxes reconciles the ledger with the provider. running, set in a
// startup pass, names the jobs whose executions run: any other job's
// sandbox is claimed by nothing, and its job is ended before the sandbox
// goes.
func (r *Reaper) sandboxes(ctx context.Context, now time.Time, running map[string]bool, c *Counts) error {
	var errs []error
	got, err := r.Sandboxes.Reconcile(ctx, sandboxes.ReconcileOptions{
		Now:         now,
		CreateGrace: r.CreateGrace,
		Unneeded: func(ctx context.Context, e store.LedgerEntry) (string, error) {
			reason, err := r.unneeded(ctx, e, running)
			if reason == reasonNotRunning {
				if err := r.endJob(ctx, e); err != nil {
					errs = append(errs, err)
				} else {
					c.JobsEnded++
				}
			}
			return reason, err
		},
	})
	c.LedgerReaped += got.Reaped
	c.LedgerGone += got.Gone
	c.Orphans += got.Orphans
	return errors.Join(append(errs, err)...)
}

// reasonNotRunning is why a startup pass reaps the sandbox of a job that
// did not end but whose execution does not run.
const reasonNotRunning = "its job's execution is not running"

// endJob ends the job of a sandbox that a startup pass found unclaimed,
// through its execution's cleanup, so that the job does not stay running.
func (r *Reaper) endJob(ctx context.Context, e store.LedgerEntry) error {
	jobID := sandboxes.ParseOwner(e.Owner).Key
	if err := r.Executions.Stop(ctx, jobID, "the server stopped while the job ran, and its execution could not be resumed"); err != nil {
		return fmt.Errorf("end job %s: %w", jobID, err)
	}
	r.log().Warn("ended a job whose execution was not running", "job_key", jobID, "sandbox", e.Name)
	return nil
}

// unneeded says why a live entry's owner no longer needs its sandbox (""
// to keep it). running is set in a startup pass only.
func (r *Reaper) unneeded(ctx context.Context, e store.LedgerEntry, running map[string]bool) (string, error) {
	switch owner := sandboxes.ParseOwner(e.Owner); {
	case owner.Kind == sandboxes.KindJob:
		job, err := r.Store.GetJob(ctx, owner.Key)
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
	case owner.Kind == sandboxes.KindSession && r.Sessions != nil:
		wanted, err := r.Sessions.SandboxWanted(ctx, e)
		if err != nil {
			return "", err
		}
		if !wanted {
			return "session does not use it", nil
		}
	}
	return "", nil
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
