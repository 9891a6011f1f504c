package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Runs and session events live in the sessions table beside the session
// records the store keeps there, under keys no session id can take
// ("run#..." and "events#...": session keys are "<tenant>/<id>" with ids
// of [A-Za-z0-9._-]). Only a pending run carries a gsi_state, one no
// session state takes (see interrupted.go), so the sessions' cleanup never
// sees them; each has the table's TTL attribute once it may go.
const (
	runKeyPrefix    = "run#"
	eventsKeyPrefix = "events#"
)

// RunStatus is where a run is.
type RunStatus string

const (
	RunRunning   RunStatus = "running"
	RunSucceeded RunStatus = "succeeded"
	RunFailed    RunStatus = "failed"
)

// RunRetention is how long a finished run stays readable.
const RunRetention = 24 * time.Hour

// MaxEvents is how many events a session keeps; older ones are dropped
// (their seqs are not reused).
const MaxEvents = 100

// Run is one run of code in a session.
type Run struct {
	ID        string
	Tenant    string
	SessionID string
	Status    RunStatus
	Language  string
	// Stateful runs in the session's long-lived interpreter.
	Stateful   bool
	Timeout    time.Duration
	CreatedAt  time.Time
	FinishedAt time.Time
	// Code is kept only while a run waits for a remote executor.
	Code string
	// Result is set once the run ended.
	Result *Result
}

// Result is how a run ended, as the API shows it. Stdout, Stderr, Error
// and Result are redacted of every dependency secret.
type Result struct {
	Success bool `json:"success"`
	// Result is the JSON value of the code's last expression, null when
	// there is none.
	Result     json.RawMessage `json:"result"`
	Error      *string         `json:"error"`
	Stdout     string          `json:"stdout"`
	Stderr     string          `json:"stderr"`
	ExitCode   int             `json:"exit_code"`
	DurationMS int64           `json:"duration_ms"`
	TimedOut   bool            `json:"timed_out,omitempty"`
	// OOM: the code was killed because the sandbox ran out of memory.
	OOM             bool `json:"oom,omitempty"`
	StdoutTruncated bool `json:"stdout_truncated,omitempty"`
	StderrTruncated bool `json:"stderr_truncated,omitempty"`
	ResultTruncated bool `json:"result_truncated,omitempty"`
	// Interpreter is there for a stateful run that reached its
	// interpreter.
	Interpreter *Interpreter `json:"interpreter,omitempty"`
}

// Event is something that happened to a session that its client should
// know of without asking: a sandbox started or closed, the session is
// about to expire, it expired.
type Event struct {
	Seq  int64           `json:"seq"`
	Type string          `json:"type"`
	At   time.Time       `json:"at"`
	Data json.RawMessage `json:"data,omitempty"`
}

// Event types.
const (
	EventCreated        = "session.created"
	EventSandboxStarted = "sandbox.started"
	EventSandboxClosed  = "sandbox.closed"
	EventExpiring       = "session.expiring"
	EventExpired        = "session.expired"
	EventDeleted        = "session.deleted"
)

// records reads and writes runs and events.
type records struct {
	db        *dynamodb.Client
	table     string
	retention time.Duration
}

var errNoRecord = errors.New("no such record")

func runKey(key, runID string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": avS(runKeyPrefix + key + "#" + runID)}
}

func eventsKey(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": avS(eventsKeyPrefix + key)}
}

// putPending records a run that has not ended, unless its record exists
// (the run may have ended first). It reports whether it wrote.
func (r *records) putPending(ctx context.Context, key string, run Run) (bool, error) {
	item := runKey(key, run.ID)
	item["tenant"] = avS(run.Tenant)
	item["session"] = avS(run.SessionID)
	item["run_id"] = avS(run.ID)
	item["status"] = avS(string(RunRunning))
	item["language"] = avS(run.Language)
	if run.Stateful {
		item["stateful"] = &types.AttributeValueMemberBOOL{Value: true}
	}
	item["timeout_ms"] = avN(run.Timeout.Milliseconds())
	item["created_at"] = avTime(run.CreatedAt)
	item["expires_at"] = avN(run.CreatedAt.Add(RunRetention + run.Timeout).Unix())
	item["gsi_state"] = avS(pendingRunsGSI)
	item["idle_expires_at"] = avTime(run.CreatedAt)
	if run.Code != "" {
		item["code"] = avS(run.Code)
	}
	_, err := r.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:           &r.table,
		Item:                item,
		ConditionExpression: aws.String("attribute_not_exists(pk)"),
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("record run %s: %w", run.ID, err)
	}
	return true, nil
}

// putFinished records a run's end, replacing its pending record and
// dropping the code.
func (r *records) putFinished(ctx context.Context, key string, run Run) error {
	res, err := json.Marshal(run.Result)
	if err != nil {
		return fmt.Errorf("encode run %s: %w", run.ID, err)
	}
	item := runKey(key, run.ID)
	item["tenant"] = avS(run.Tenant)
	item["session"] = avS(run.SessionID)
	item["run_id"] = avS(run.ID)
	item["status"] = avS(string(run.Status))
	item["language"] = avS(run.Language)
	if run.Stateful {
		item["stateful"] = &types.AttributeValueMemberBOOL{Value: true}
	}
	item["timeout_ms"] = avN(run.Timeout.Milliseconds())
	item["created_at"] = avTime(run.CreatedAt)
	item["finished_at"] = avTime(run.FinishedAt)
	item["result"] = avS(string(res))
	item["expires_at"] = avN(run.FinishedAt.Add(RunRetention).Unix())
	if _, err := r.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &r.table, Item: item}); err != nil {
		return fmt.Errorf("record result of run %s: %w", run.ID, err)
	}
	return nil
}

func (r *records) getRun(ctx context.Context, key, runID string) (Run, error) {
	out, err := r.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &r.table, Key: runKey(key, runID), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return Run{}, fmt.Errorf("read run %s: %w", runID, err)
	}
	if len(out.Item) == 0 {
		return Run{}, errNoRecord
	}
	it := out.Item
	run := Run{
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
		run.Result = &Result{}
		if err := json.Unmarshal([]byte(raw), run.Result); err != nil {
			return Run{}, fmt.Errorf("decode run %s: %w", runID, err)
		}
	}
	return run, nil
}

// event is one event to append.
type event struct {
	typ  string
	data any
	// final: the session is gone, so its events expire after the
	// retention; revive: it starts (again), so they no longer do.
	final, revive bool
	// once, when set, writes the event only if the last event written
	// with a once value had another one.
	once string
}

// appendEvent adds an event to a session's list and drops the oldest
// beyond MaxEvents. It reports whether it wrote (see event.once).
func (r *records) appendEvent(ctx context.Context, key string, at time.Time, e event) (bool, error) {
	ev := map[string]types.AttributeValue{
		"type": avS(e.typ),
		"at":   avTime(at),
	}
	if e.data != nil {
		b, err := json.Marshal(e.data)
		if err != nil {
			return false, fmt.Errorf("encode event %s: %w", e.typ, err)
		}
		ev["data"] = avS(string(b))
	}
	names := map[string]string{"#e": "events"}
	values := map[string]types.AttributeValue{
		":new":   &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberM{Value: ev}}},
		":empty": &types.AttributeValueMemberL{Value: []types.AttributeValue{}},
	}
	update := "SET #e = list_append(if_not_exists(#e, :empty), :new)"
	if e.final {
		names["#x"] = "expires_at"
		values[":x"] = avN(at.Add(r.retention).Unix())
		update += ", #x = :x"
	}
	var cond *string
	if e.once != "" {
		names["#o"] = "once"
		values[":o"] = avS(e.once)
		update += ", #o = :o"
		cond = aws.String("attribute_not_exists(#o) OR #o <> :o")
	}
	if e.revive {
		names["#x"] = "expires_at"
		update += " REMOVE #x"
	}
	out, err := r.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &r.table,
		Key:                       eventsKey(key),
		UpdateExpression:          aws.String(update),
		ConditionExpression:       cond,
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
		ReturnValues:              types.ReturnValueUpdatedNew,
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("record event %s: %w", e.typ, err)
	}
	if l, ok := out.Attributes["events"].(*types.AttributeValueMemberL); ok && len(l.Value) > MaxEvents {
		r.trimEvents(ctx, key, len(l.Value))
	}
	return true, nil
}

// trimEvents drops the oldest events of a list that has n of them. The
// condition makes two trimmers of the same list trim it once; a list left
// long by a failed trim is trimmed by the next append.
func (r *records) trimEvents(ctx context.Context, key string, n int) {
	drop := n - MaxEvents
	remove := ""
	for i := range drop {
		if i > 0 {
			remove += ", "
		}
		remove += "#e[" + strconv.Itoa(i) + "]"
	}
	_, _ = r.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &r.table,
		Key:                       eventsKey(key),
		UpdateExpression:          aws.String("REMOVE " + remove + " ADD #b :drop"),
		ConditionExpression:       aws.String("size(#e) = :n"),
		ExpressionAttributeNames:  map[string]string{"#e": "events", "#b": "base"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":drop": avN(int64(drop)), ":n": avN(int64(n))},
	})
}

// events returns a session's events with seq > after, oldest first.
func (r *records) events(ctx context.Context, key string, after int64) ([]Event, error) {
	out, err := r.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &r.table, Key: eventsKey(key), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	base := getN(out.Item, "base")
	l, _ := out.Item["events"].(*types.AttributeValueMemberL)
	var evs []Event
	if l == nil {
		return evs, nil
	}
	for i, v := range l.Value {
		m, ok := v.(*types.AttributeValueMemberM)
		seq := base + int64(i) + 1
		if !ok || seq <= after {
			continue
		}
		ev := Event{Seq: seq, Type: getS(m.Value, "type"), At: getTime(m.Value, "at")}
		if d := getS(m.Value, "data"); d != "" {
			ev.Data = json.RawMessage(d)
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

func avS(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

func avN(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

func avTime(t time.Time) types.AttributeValue { return avN(t.UnixMilli()) }

func getS(item map[string]types.AttributeValue, k string) string {
	if v, ok := item[k].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func getN(item map[string]types.AttributeValue, k string) int64 {
	if v, ok := item[k].(*types.AttributeValueMemberN); ok {
		n, _ := strconv.ParseInt(v.Value, 10, 64)
		return n
	}
	return 0
}

func getTime(item map[string]types.AttributeValue, k string) time.Time {
	if _, ok := item[k]; !ok {
		return time.Time{}
	}
	return time.UnixMilli(getN(item, k)).UTC()
}

func getBool(item map[string]types.AttributeValue, k string) bool {
	b, ok := item[k].(*types.AttributeValueMemberBOOL)
	return ok && b.Value
}
