package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

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

// Pending run records are in the sessions table's state index under this
// partition (session partitions are "<state>#<shard>"), sorted by creation
// time, so that a starting server finds them with one query. A finished
// record is written whole without it and leaves the index.
const (
	stateIndex     = "by-state-expiry" // the sessions table's index, in template.yaml
	pendingRunsGSI = "run#pending"
)

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
	items, err := s.rec.pendingBefore(ctx, since)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, it := range items {
		key := ids.SessionKey(getS(it, "tenant"), getS(it, "session"))
		runID := getS(it, "run_id")
		ok, err := s.rec.failPending(ctx, key, runID, time.Now(), InterruptedReason)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			n++
			s.log.Warn("marked a run the server's stop interrupted as failed", "session", key, "run_id", runID)
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

// pendingBefore lists the pending run records created before t.
func (r *records) pendingBefore(ctx context.Context, t time.Time) ([]map[string]types.AttributeValue, error) {
	var items []map[string]types.AttributeValue
	var start map[string]types.AttributeValue
	for {
		out, err := r.db.Query(ctx, &dynamodb.QueryInput{
			TableName:                 &r.table,
			IndexName:                 aws.String(stateIndex),
			KeyConditionExpression:    aws.String("gsi_state = :k AND idle_expires_at < :t"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":k": avS(pendingRunsGSI), ":t": avTime(t)},
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return nil, fmt.Errorf("list pending runs: %w", err)
		}
		items = append(items, out.Items...)
		if len(out.LastEvaluatedKey) == 0 {
			return items, nil
		}
		start = out.LastEvaluatedKey
	}
}

// failPending ends a pending run record as failed with reason, unless it
// ended meanwhile. It reports whether it wrote.
func (r *records) failPending(ctx context.Context, key, runID string, at time.Time, reason string) (bool, error) {
	res, err := json.Marshal(Result{Error: &reason, Result: json.RawMessage("null"), ExitCode: -1})
	if err != nil {
		return false, err
	}
	_, err = r.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                &r.table,
		Key:                      runKey(key, runID),
		UpdateExpression:         aws.String("SET #s = :failed, #r = :res, finished_at = :at, expires_at = :x REMOVE gsi_state, code"),
		ConditionExpression:      aws.String("#s = :running"),
		ExpressionAttributeNames: map[string]string{"#s": "status", "#r": "result"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":failed": avS(string(RunFailed)), ":running": avS(string(RunRunning)),
			":res": avS(string(res)), ":at": avTime(at), ":x": avN(at.Add(RunRetention).Unix()),
		},
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("fail run %s: %w", runID, err)
	}
	return true, nil
}
