package sessions

import (
	"context"
	"errors"
	"time"

	"github.com/sandstep/sandstep/internal/service/ids"
	"github.com/sandstep/sandstep/internal/service/store"
)

// Task names a recorded run for an executor elsewhere: its code waits in
// the run's record.
type Task struct {
	Tenant    string `json:"tenant"`
	SessionID string `json:"session_id"`
	RunID     string `json:"run_id"`
}

// Launcher starts a recorded run somewhere it may outlive the request that
// asked for it. In AWS the API Lambda returns by API Gateway's 30 s limit,
// and so cannot supervise a longer run itself: it records the run with its
// code and invokes the RunFunction asynchronously (LambdaLauncher), which
// calls ExecuteStored. On one machine no launcher is needed: runs go on in
// the process.
type Launcher interface {
	Launch(ctx context.Context, t Task) error
}

// launch records the run with its code, hands it to the launcher and
// polls its record until it ends or sync_wait has passed.
func (s *Service) launch(ctx context.Context, key string, run Run, code string) (Run, error) {
	run.Code = code
	if _, err := s.putPending(ctx, key, run); err != nil {
		return Run{}, s.unavailable(err)
	}
	run.Code = ""
	if err := s.launcher.Launch(ctx, Task{Tenant: run.Tenant, SessionID: run.SessionID, RunID: run.ID}); err != nil {
		msg := "the run could not be started; retry"
		run.Status, run.FinishedAt = RunFailed, time.Now()
		run.Result = &Result{Error: &msg, Result: []byte("null"), ExitCode: -1}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
		defer cancel()
		if perr := s.putFinished(rctx, key, run); perr != nil {
			s.log.Error("recording a run that could not start", "session", key, "run_id", run.ID, "err", perr)
		}
		return Run{}, &Error{Kind: KindUnavailable, Message: msg, Err: err}
	}
	deadline := time.Now().Add(s.cfg.SyncWait.D())
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		left := time.Until(deadline)
		if left <= 0 {
			return run, nil
		}
		t := time.NewTimer(min(wait, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return run, nil
		case <-t.C:
		}
		got, err := s.getRun(ctx, key, run.ID)
		if err != nil {
			return run, s.unavailable(err)
		}
		if got.Status != RunRunning {
			got.Code = ""
			return got, nil
		}
	}
}

// ExecuteStored runs a recorded run, as the RunFunction does for a Task. A
// run that has ended already (a retried invocation) is left as it is.
func (s *Service) ExecuteStored(ctx context.Context, t Task) error {
	if !s.cfg.Enabled {
		return ErrDisabled
	}
	if !ids.Valid(t.SessionID) || !ids.Valid(t.RunID) || t.Tenant == "" {
		return invalid("task", "a task names a tenant, a session and a run")
	}
	key := ids.SessionKey(t.Tenant, t.SessionID)
	run, err := s.getRun(ctx, key, t.RunID)
	if errors.Is(err, store.ErrNotFound) {
		return &Error{Kind: KindNotFound, Message: "run " + t.RunID + " is not recorded"}
	}
	if err != nil {
		return s.unavailable(err)
	}
	if run.Status != RunRunning {
		return nil
	}
	code := run.Code
	sess, _, err := s.record(ctx, t.Tenant, t.SessionID, false)
	if err != nil {
		// Record the refusal, so that the client polling sees it; only a
		// failure to reach the store or the provider is worth a retry.
		_, err = s.finish(ctx, key, run, nil, err)
		if KindOf(err) == KindUnavailable {
			return err
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.budget(run.Timeout))
	defer cancel()
	if dl, ok := ctx.Deadline(); ok {
		// Stop in time to record the result before the invocation ends.
		var stop context.CancelFunc
		ctx, stop = context.WithDeadline(ctx, dl.Add(-recordTimeout))
		defer stop()
	}
	_, err = s.execute(ctx, sess, run, code)
	if KindOf(err) == KindUnavailable {
		return err
	}
	return nil
}
