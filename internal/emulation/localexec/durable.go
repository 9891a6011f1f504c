package localexec

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sandstep/sandstep/internal/emulation/asl"
	"github.com/sandstep/sandstep/internal/service/store"
)

// The local engine is durable the way Step Functions is: with
// LocalOptions.Store set, every execution keeps a checkpoint in the store
// (an ExecutionRecord) at each top-level state that does work, and a new
// process calls Recover to resume what the last one left running. A
// resumed execution runs the state it was in again, from that state's
// input: the Task that was in flight is invoked a second time, which the
// phases allow (Lambda delivers at least once). A Parallel or Map state is
// resumed whole. Choice, Pass, Succeed and Fail states are not
// checkpointed: they do nothing that needs one, and a resume simply passes
// through them again.

// ErrorResumeFailed names the failure of an execution that could not be
// resumed; the job shows it with the reason.
const ErrorResumeFailed = "ResumeFailed"

// checkpointTries bounds the writes of one checkpoint: a checkpoint that
// cannot be written leaves the previous one, from which a resume re-runs a
// little more.
const checkpointTries = 3

// journal keeps one execution's record up to date. Checkpoints come from
// the execution's goroutine; the end comes from watch. The mutex orders
// them, and once the end is recorded no late checkpoint overwrites it.
type journal struct {
	l    *Local
	name string

	mu  sync.Mutex
	rec store.ExecutionRecord // as last written; Version 0 before the first write
	// fresh: the record was just written for the state about to be
	// entered (start, resume), so its Entered checkpoint adds nothing.
	fresh bool
	ended bool
	// lost: another writer holds the record (a version conflict), so this
	// process stops writing it.
	lost bool
}

// newJournal returns nil when executions are not recorded.
func (l *Local) newJournal(name string, rec store.ExecutionRecord) *journal {
	if l.opts.Store == nil {
		return nil
	}
	return &journal{l: l, name: name, rec: rec, fresh: rec.Version != 0}
}

// worksIn reports whether a state of this type does work worth a
// checkpoint before it.
func worksIn(stateType string) bool {
	switch stateType {
	case "Task", "Wait", "Parallel", "Map":
		return true
	}
	return false
}

// checkpoint is the execution's asl.WithCheckpoints hook.
func (j *journal) checkpoint(cp asl.Checkpoint) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.ended || j.lost {
		return nil
	}
	switch cp.Kind {
	case asl.CheckpointStarted:
	case asl.CheckpointEntered:
		if !worksIn(cp.StateType) {
			return nil
		}
		if j.fresh && cp.At.State == j.rec.State {
			j.fresh = false
			return nil
		}
	case asl.CheckpointRetry:
	default:
		return nil
	}
	j.fresh = cp.Kind == asl.CheckpointStarted
	rec := j.rec
	rec.StateMachine = j.l.machine.Name()
	rec.Fingerprint = j.l.machine.Fingerprint()
	rec.Name, rec.Input, rec.StartTime, rec.RoleARN = cp.At.Name, cp.At.Input, cp.At.StartTime, cp.At.RoleARN
	rec.State, rec.StateInput, rec.EnteredTime = cp.At.State, cp.At.StateInput, cp.At.EnteredTime
	rec.RetryCounts, rec.RetryCount = cp.At.RetryCounts, cp.At.RetryCount
	rec.Status = store.ExecutionRunning
	if cp.Kind == asl.CheckpointStarted {
		// The start is the one checkpoint that must be written: an
		// execution the store does not know could not be recovered.
		return j.write(rec, checkpointTries)
	}
	if err := j.write(rec, checkpointTries); err != nil {
		j.l.log.Error("execution checkpoint not written; a restart would resume from an earlier state",
			"job_key", j.name, "state", cp.At.State, "err", err)
	}
	return nil
}

// write stores rec at the journal's version; the caller holds j.mu.
func (j *journal) write(rec store.ExecutionRecord, tries int) error {
	var err error
	for attempt := 0; attempt < tries; attempt++ {
		if attempt > 0 {
			time.Sleep(time.Duration(50<<attempt) * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var got store.ExecutionRecord
		got, err = j.l.opts.Store.PutExecution(ctx, rec)
		cancel()
		if err == nil {
			j.rec = got
			return nil
		}
		if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrTooLarge) || errors.Is(err, store.ErrInvalid) {
			if errors.Is(err, store.ErrConflict) && j.rec.Version != 0 {
				j.lost = true
				j.l.log.Error("execution record changed behind this process; it stops recording it", "job_key", j.name, "err", err)
			}
			return err
		}
	}
	return err
}

// ended finishes an execution's bookkeeping: the status-change cleanup for
// an execution that no Catch finished, then its record goes. The record
// holds the end until the cleanup ran, so that a crash in between has
// Recover run the cleanup.
func (l *Local) ended(j *journal, name string, res asl.Result) {
	needsCleanup := res.Status != asl.StatusSucceeded
	if j != nil && needsCleanup {
		j.mu.Lock()
		j.ended = true
		if !j.lost && j.rec.Version != 0 {
			rec := j.rec
			rec.Status, rec.Error, rec.Cause, rec.StopTime = string(res.Status), res.Error, res.Cause, res.StopDate
			if err := j.write(rec, checkpointTries); err != nil {
				l.log.Warn("recording the end of an execution", "job_key", name, "err", err)
			}
		}
		j.mu.Unlock()
	}
	cleaned := l.statusChange(name, res)
	if j == nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.ended = true
	if j.lost || j.rec.Version == 0 || !cleaned {
		// Left for the next Recover, which runs the cleanup again.
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.opts.Store.DeleteExecution(ctx, name, j.rec.Version); err != nil {
		l.log.Warn("removing the record of an ended execution", "job_key", name, "err", err)
	}
}

// ErrorExecutionGone names the end of a job whose execution is not running
// anywhere (lost with a process before executions were recorded, or its
// record could not be written).
const ErrorExecutionGone = "ExecutionGone"

// cleanupGone runs the status-change cleanup for a job whose execution is
// not running in this process, as EventBridge would for a failed one: the
// job ends (cancelled if a cancel was asked) and its sandboxes go.
func (l *Local) cleanupGone(name, cause string) bool {
	now := time.Now()
	return l.statusChange(name, asl.Result{Status: asl.StatusFailed, Error: ErrorExecutionGone, Cause: cause, StartDate: now, StopDate: now})
}

// Recovered counts what Recover did.
type Recovered struct {
	// Resumed executions run again from their last checkpoint.
	Resumed int `json:"resumed"`
	// Failed executions could not resume; they were failed with
	// ResumeFailed and their cleanup ran.
	Failed int `json:"failed"`
	// Cleaned executions had ended before the crash but their cleanup had
	// not run; it ran now.
	Cleaned int `json:"cleaned"`
}

// Recover takes up the executions the store holds from a process that
// stopped without ending them: each one resumes from its last checkpoint,
// or, if it cannot (the definition changed, the state is gone, the record
// is damaged), is failed with ResumeFailed and cleaned up as the
// status-change rule would. Call it once, before serving. Executions this
// process already runs are left alone.
func (l *Local) Recover(ctx context.Context) (Recovered, error) {
	var n Recovered
	if l.opts.Store == nil {
		return n, nil
	}
	recs, err := l.opts.Store.ListExecutions(ctx)
	if err != nil {
		return n, fmt.Errorf("recover executions: %w", err)
	}
	var errs []error
	for _, rec := range recs {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return n, ErrClosed
		}
		if _, running := l.execs[rec.Name]; running || slices.Contains(l.opts.Siblings, rec.StateMachine) {
			l.mu.Unlock()
			continue
		}
		why := l.resumeProblem(rec)
		if why == "" {
			j := l.newJournal(rec.Name, rec)
			x, err := l.machine.Resume(context.Background(), asl.ResumePoint{
				Name: rec.Name, Input: rec.Input, StartTime: rec.StartTime, RoleARN: rec.RoleARN,
				State: rec.State, StateInput: rec.StateInput, EnteredTime: rec.EnteredTime,
				RetryCounts: rec.RetryCounts, RetryCount: rec.RetryCount,
			}, l.opts.Invoker, l.startOptions(rec.Name, j)...)
			if err == nil {
				l.track(x, j)
				l.mu.Unlock()
				n.Resumed++
				l.log.Info("execution resumed", "job_key", rec.Name, "state", rec.State, "retry_count", rec.RetryCount, "started", rec.StartTime)
				continue
			}
			why = err.Error()
		}
		l.mu.Unlock()
		// Not resumable, or ended with its cleanup still to run.
		res := asl.Result{Status: asl.Status(rec.Status), Error: rec.Error, Cause: rec.Cause, StartDate: rec.StartTime, StopDate: rec.StopTime}
		if why != "ended" {
			res = asl.Result{Status: asl.StatusFailed, Error: ErrorResumeFailed, StartDate: rec.StartTime, StopDate: time.Now(),
				Cause: "the execution could not resume after the server restarted: " + why}
			l.log.Error("execution cannot resume; failing it", "job_key", rec.Name, "reason", why)
			n.Failed++
		} else {
			n.Cleaned++
		}
		if res.StartDate.IsZero() {
			res.StartDate = res.StopDate
		}
		j := &journal{l: l, name: rec.Name, rec: rec}
		if rec.Status == "" {
			j.rec.Version = 0 // damaged: removed whatever its version
			j.rec.Status = ""
		}
		if err := l.finishRecord(j, res); err != nil {
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

// finishRecord records an end that happened without a running execution
// and cleans up after it.
func (l *Local) finishRecord(j *journal, res asl.Result) error {
	if j.rec.Status == store.ExecutionRunning {
		rec := j.rec
		rec.Status, rec.Error, rec.Cause, rec.StopTime = string(res.Status), res.Error, res.Cause, res.StopDate
		j.mu.Lock()
		err := j.write(rec, checkpointTries)
		j.mu.Unlock()
		if err != nil {
			return fmt.Errorf("execution %s: record its end: %w", j.name, err)
		}
	}
	if !l.statusChange(j.name, res) {
		return fmt.Errorf("execution %s: its cleanup failed; the next start retries it", j.name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return l.opts.Store.DeleteExecution(ctx, j.name, j.rec.Version)
}

// resumeProblem says why rec cannot resume: "" if it can, "ended" if the
// execution ended and only its cleanup is left.
func (l *Local) resumeProblem(rec store.ExecutionRecord) string {
	switch {
	case rec.Status == "":
		return rec.Error
	case rec.Status != store.ExecutionRunning:
		return "ended"
	case rec.StateMachine != l.machine.Name():
		return fmt.Sprintf("it belongs to state machine %q, not %q", rec.StateMachine, l.machine.Name())
	case rec.Fingerprint != l.machine.Fingerprint():
		return "the state machine's definition changed since the execution started"
	}
	return ""
}

// Running returns the names (job ids) of the executions running in this
// process, for the reaper.
func (l *Local) Running(ctx context.Context) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for name, x := range l.execs {
		if x.Status() == asl.StatusRunning {
			out = append(out, name)
		}
	}
	return out, nil
}

// Stop ends a job's execution now, for the reaper: a running one is
// aborted (its cleanup follows); for one that is not running here, the
// cleanup runs at once, so the job ends and its sandboxes go.
func (l *Local) Stop(ctx context.Context, jobID, cause string) error {
	l.mu.Lock()
	x, ok := l.execs[jobID]
	l.mu.Unlock()
	if ok && x.Status() == asl.StatusRunning {
		if err := x.Stop("JobCancelled", cause); err != nil && !errors.Is(err, asl.ErrNotRunning) {
			return err
		}
		return nil
	}
	if !l.cleanupGone(jobID, cause) {
		return fmt.Errorf("job %s: the cleanup failed", jobID)
	}
	return nil
}
