package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/sandstep/sandstep/internal/service/ids"
	"github.com/sandstep/sandstep/internal/service/store"
)

// What a server that starts again after a crash does for the sessions
// (the reaper's startup pass): no run from before the start can still be
// going, so the sessions they held are taken back at once, their pending
// run records are failed with the reason, and the sandboxes of sessions not
// in use are closed.

// InterruptedReason is the error of a run that the server's stop
// interrupted.
const InterruptedReason = "interrupted: the server stopped while the run was in flight"

// EndRunsHeldBefore takes back the sessions held by runs that began
// before since: they become idle, usable at once. EndStaleRuns is the same
// with since = now minus the longest a run may take.
func (s *Service) EndRunsHeldBefore(ctx context.Context, since time.Time) (int, error) {
	list, err := s.st.ListSessions(ctx, store.SessionRunning, since.Add(s.ttl()), 0)
	if err != nil {
		return 0, err
	}
	return forEach(ctx, list, func(sess store.Session) (bool, error) {
		if !sess.LastAccessedAt.Before(since) {
			return false, nil
		}
		_, err := s.st.EndRun(ctx, sess.ID, sess.Version, s.ttl())
		if errors.Is(err, store.ErrConflict) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		s.log.Warn("took back a session held by a run that did not end", "session", sess.ID, "since", sess.LastAccessedAt)
		return true, nil
	})
}

// FailInterruptedRuns marks failed, with InterruptedReason, every run
// record created before since that still says running: the process that ran
// it is gone. Call it only where no run from before since can still be
// going (a server starting on its own data).
func (s *Service) FailInterruptedRuns(ctx context.Context, since time.Time) (int, error) {
	runs, err := s.st.PendingRunsBefore(ctx, since)
	if err != nil {
		return 0, err
	}
	reason := InterruptedReason
	res, err := json.Marshal(Result{Error: &reason, Result: json.RawMessage("null"), ExitCode: -1})
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, run := range runs {
		key := ids.SessionKey(run.Tenant, run.SessionID)
		ok, err := s.st.FailPendingRun(ctx, key, run.ID, time.Now(), res)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			n++
			s.log.Warn("marked a run the server's stop interrupted as failed", "session", key, "run_id", run.ID)
		}
	}
	return n, errors.Join(errs...)
}

// CloseSandboxesUnusedSince closes the sandboxes of idle sessions last
// used before since. CloseIdleSandboxes is the same with since = now minus
// sandbox_idle_minutes.
func (s *Service) CloseSandboxesUnusedSince(ctx context.Context, since time.Time) (int, error) {
	list, err := s.st.ListSessions(ctx, store.SessionIdle, since.Add(s.ttl()), 0)
	if err != nil {
		return 0, err
	}
	return forEach(ctx, list, func(sess store.Session) (bool, error) {
		if sess.SandboxID == "" || !sess.LastAccessedAt.Before(since) {
			return false, nil
		}
		_, err := s.st.SetSessionSandbox(ctx, sess.ID, sess.Version, "")
		if errors.Is(err, store.ErrConflict) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		s.terminate(ctx, sess.ID, sess.SandboxID, "idle")
		return true, nil
	})
}
