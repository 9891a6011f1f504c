package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Runs and session events live in the sessions table beside the session
// records, under keys no session key can take ("run#..." and "events#...":
// session keys are "s-" and base32). Only a pending run carries a gsi_state,
// one no session state takes, so the sessions' cleanup never sees them;
// each has the table's TTL attribute once it may go.
const (
	runKeyPrefix    = "run#"
	eventsKeyPrefix = "events#"
	// pendingRuns is the state of pending runs in the sessions table's
	// state index: their partitions are "run-pending#<shard>" (session
	// partitions are "<state>#<shard>"), sorted by creation time, so that a
	// starting server finds them with one query per shard, and the two
	// writes every run makes there spread like the sessions' own. A
	// finished record is written whole without it and leaves the index.
	pendingRuns = "run-pending"
	// legacyPendingRunsGSI is the one partition releases before the shards
	// used; PendingRunsBefore still reads it, so runs interrupted across an
	// upgrade are still failed.
	legacyPendingRunsGSI = "run#pending"
)

// RunStatus is where a session run is.
type RunStatus string

const (
	RunRunning   RunStatus = "running"
	RunSucceeded RunStatus = "succeeded"
	RunFailed    RunStatus = "failed"
)

// RunRetention is how long a finished run stays readable.
const RunRetention = 24 * time.Hour

// SessionRun is the record of one run of code in a session.
type SessionRun struct {
	ID        string
	Tenant    string
	SessionID string // the client's id of the session
	Status    RunStatus
	Language  string
	// Stateful runs in the session's long-lived interpreter.
	Stateful  bool
	Timeout   time.Duration
	CreatedAt time.Time
	// FinishedAt and Result are set once the run ended. Result is JSON in
	// the shape the sessions package gives it.
	FinishedAt time.Time
	Result     json.RawMessage
	// Code is kept only while a run waits for a remote executor.
	Code string
}

func runKey(key, runID string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": avS(runKeyPrefix + key + "#" + runID)}
}

func runItem(key string, run SessionRun) map[string]types.AttributeValue {
	item := runKey(key, run.ID)
	item["tenant"] = avS(run.Tenant)
	item["session"] = avS(run.SessionID)
	item["run_id"] = avS(run.ID)
	item["status"] = avS(string(run.Status))
	item["language"] = avS(run.Language)
	if run.Stateful {
		item["stateful"] = avBool(true)
	}
	item["timeout_ms"] = avN(run.Timeout.Milliseconds())
	item["created_at"] = avTime(run.CreatedAt)
	return item
}

// PutPendingRun records a run of the session key that has not ended,
// unless its record exists (the run may have ended first). It reports
// whether it wrote.
func (s *Store) PutPendingRun(ctx context.Context, key string, run SessionRun) (bool, error) {
	item := runItem(key, run)
	item["status"] = avS(string(RunRunning))
	item["expires_at"] = avN(run.CreatedAt.Add(RunRetention + run.Timeout).Unix())
	item["gsi_state"] = avS(shardKey(pendingRuns, getS(item, "pk")))
	item["idle_expires_at"] = avTime(run.CreatedAt)
	if run.Code != "" {
		item["code"] = avS(run.Code)
	}
	_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:           &s.sessions,
		Item:                item,
		ConditionExpression: aws.String("attribute_not_exists(pk)"),
	})
	if _, ok := isConditionFailed(err); ok {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("record run %s: %w", run.ID, err)
	}
	return true, nil
}

// PutFinishedRun records a run's end, replacing its pending record and
// dropping the code.
func (s *Store) PutFinishedRun(ctx context.Context, key string, run SessionRun) error {
	item := runItem(key, run)
	item["finished_at"] = avTime(run.FinishedAt)
	item["result"] = avS(string(run.Result))
	item["expires_at"] = avN(run.FinishedAt.Add(RunRetention).Unix())
	if _, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.sessions, Item: item}); err != nil {
		return fmt.Errorf("record result of run %s: %w", run.ID, err)
	}
	return nil
}

// GetSessionRun reads a run of the session key; ErrNotFound when there is
// none (never recorded, or expired).
func (s *Store) GetSessionRun(ctx context.Context, key, runID string) (SessionRun, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &s.sessions, Key: runKey(key, runID), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return SessionRun{}, fmt.Errorf("read run %s: %w", runID, err)
	}
	if len(out.Item) == 0 {
		return SessionRun{}, fmt.Errorf("run %s: %w", runID, ErrNotFound)
	}
	return runFromItem(out.Item), nil
}

func runFromItem(it map[string]types.AttributeValue) SessionRun {
	run := SessionRun{
		ID:         getS(it, "run_id"),
		Tenant:     getS(it, "tenant"),
		SessionID:  getS(it, "session"),
		Status:     RunStatus(getS(it, "status")),
		Language:   getS(it, "language"),
		Stateful:   getBool(it, "stateful"),
		Timeout:    time.Duration(getN(it, "timeout_ms")) * time.Millisecond,
		CreatedAt:  getTime(it, "created_at"),
		FinishedAt: getTime(it, "finished_at"),
		Code:       getS(it, "code"),
	}
	if raw := getS(it, "result"); raw != "" {
		run.Result = json.RawMessage(raw)
	}
	return run
}

// PendingRunsBefore lists the pending run records created before t, oldest
// first (from an index: eventually consistent).
func (s *Store) PendingRunsBefore(ctx context.Context, t time.Time) ([]SessionRun, error) {
	items, err := s.queryShards(ctx, shardQuery{
		table: s.sessions, index: sessionIndex,
		keyAttr: "gsi_state", rangeAttr: "idle_expires_at", rangeCond: "#r < :t",
		values: map[string]types.AttributeValue{":t": avTime(t)},
	}, pendingRuns)
	if err != nil {
		return nil, fmt.Errorf("list pending runs: %w", err)
	}
	legacy, err := s.queryIndex(ctx, s.sessions, sessionIndex, "gsi_state = :k AND idle_expires_at < :t", nil,
		map[string]types.AttributeValue{":k": avS(legacyPendingRunsGSI), ":t": avTime(t)}, 0)
	if err != nil {
		return nil, fmt.Errorf("list pending runs: %w", err)
	}
	items = append(legacy, items...)
	runs := make([]SessionRun, len(items))
	for i, it := range items {
		runs[i] = runFromItem(it)
	}
	return runs, nil
}

// FailPendingRun ends a pending run record as failed with result, unless it
// ended meanwhile. It reports whether it wrote.
func (s *Store) FailPendingRun(ctx context.Context, key, runID string, at time.Time, result json.RawMessage) (bool, error) {
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                &s.sessions,
		Key:                      runKey(key, runID),
		UpdateExpression:         aws.String("SET #s = :failed, #r = :res, finished_at = :at, expires_at = :x REMOVE gsi_state, code"),
		ConditionExpression:      aws.String("#s = :running"),
		ExpressionAttributeNames: map[string]string{"#s": "status", "#r": "result"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":failed": avS(string(RunFailed)), ":running": avS(string(RunRunning)),
			":res": avS(string(result)), ":at": avTime(at), ":x": avN(at.Add(RunRetention).Unix()),
		},
	})
	if _, ok := isConditionFailed(err); ok {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("fail run %s: %w", runID, err)
	}
	return true, nil
}
