package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ExecutionRecord is the local engine's checkpoint of one running
// execution: enough to resume it after the process running it died (the
// execution as it started, and the top-level state to run next with its
// input and retry counters). It is local-emulation state, as Step Functions
// keeps its executions itself: in AWS nothing writes it.
//
// The records live in the jobs table under one partition of their own
// (executionsPK; no job key starts with '#'), sorted by execution name, so
// a starting server lists them with one query. A record exists only while
// its execution needs it: it is deleted once the execution ended and its
// cleanup ran.
type ExecutionRecord struct {
	// Name is the execution's name, the engine's key for it (the job).
	Name         string
	StateMachine string
	// Fingerprint identifies the definition the execution started with.
	Fingerprint string
	Input       json.RawMessage
	StartTime   time.Time
	RoleARN     string
	// State is the top-level state to run (again) on resume, with
	// StateInput, EnteredTime and the retry counters of its visit.
	State       string
	StateInput  json.RawMessage
	EnteredTime time.Time
	RetryCounts []int64
	RetryCount  int64
	// Status is ExecutionRunning while the execution runs. An execution
	// that ended ABORTED, FAILED or TIMED_OUT keeps its record, with that
	// status, Error, Cause and StopTime, until its cleanup has run.
	Status   string
	Error    string
	Cause    string
	StopTime time.Time
	// Version grows by one with every write; PutExecution writes only at
	// the version read.
	Version   int64
	UpdatedAt time.Time
}

// ExecutionRunning is the Status of a running execution's record.
const ExecutionRunning = "RUNNING"

// MaxExecutionBytes bounds the inputs an execution record holds (the
// execution's and the state's), under DynamoDB's 400 KB item limit; Step
// Functions' payload limit is 256 KiB each.
const MaxExecutionBytes = 380 << 10

const executionsPK = "#local-executions"

func executionKey(name string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": avS(executionsPK), "sk": avS(name)}
}

// PutExecution writes rec and returns it as stored, at rec.Version+1.
// Version 0 creates the record, which must not exist; any other version
// replaces the record only at that version. A refused condition is
// ErrConflict with the record as it is (empty if there is none).
func (s *Store) PutExecution(ctx context.Context, rec ExecutionRecord) (ExecutionRecord, error) {
	if err := checkID("execution name", rec.Name); err != nil {
		return ExecutionRecord{}, err
	}
	if rec.Status == "" || rec.State == "" || rec.StartTime.IsZero() {
		return ExecutionRecord{}, fmt.Errorf("execution %s: status, state and start time are required: %w", rec.Name, ErrInvalid)
	}
	if n := len(rec.Input) + len(rec.StateInput) + len(rec.Cause); n > MaxExecutionBytes {
		return ExecutionRecord{}, fmt.Errorf("execution %s: %d bytes of input, limit %d: %w", rec.Name, n, MaxExecutionBytes, ErrTooLarge)
	}
	now := s.now()
	prev := rec.Version
	rec.Version, rec.UpdatedAt = prev+1, now
	item := executionItem(rec)
	item["expires_at"] = s.expiry(rec.StartTime)
	in := &dynamodb.PutItemInput{
		TableName:                           &s.jobs,
		Item:                                item,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	if prev == 0 {
		in.ConditionExpression = aws.String("attribute_not_exists(pk)")
	} else {
		in.ConditionExpression = aws.String("version = :v")
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":v": avN(prev)}
	}
	_, err := s.db.PutItem(ctx, in)
	if err == nil {
		return rec, nil
	}
	old, ok := isConditionFailed(err)
	if !ok {
		return ExecutionRecord{}, fmt.Errorf("put execution %s: %w", rec.Name, err)
	}
	var cur ExecutionRecord
	if len(old) > 0 {
		cur = executionFromItem(old)
	}
	return cur, fmt.Errorf("put execution %s at version %d (stored: %d): %w", rec.Name, prev, cur.Version, ErrConflict)
}

// DeleteExecution removes an execution's record at the given version
// (ErrConflict otherwise); version 0 removes it whatever its version (a
// record too damaged to have one). A record already gone is not an error.
func (s *Store) DeleteExecution(ctx context.Context, name string, version int64) error {
	in := &dynamodb.DeleteItemInput{TableName: &s.jobs, Key: executionKey(name)}
	if version != 0 {
		in.ConditionExpression = aws.String("attribute_not_exists(pk) OR version = :v")
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":v": avN(version)}
	}
	_, err := s.db.DeleteItem(ctx, in)
	if _, ok := isConditionFailed(err); ok {
		return fmt.Errorf("delete execution %s at version %d: %w", name, version, ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("delete execution %s: %w", name, err)
	}
	return nil
}

// GetExecution reads an execution's record (strongly consistent).
func (s *Store) GetExecution(ctx context.Context, name string) (ExecutionRecord, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &s.jobs, Key: executionKey(name), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return ExecutionRecord{}, fmt.Errorf("get execution %s: %w", name, err)
	}
	if len(out.Item) == 0 {
		return ExecutionRecord{}, fmt.Errorf("execution %s: %w", name, ErrNotFound)
	}
	return executionFromItem(out.Item), nil
}

// ListExecutions returns every execution record, in name order. A record
// that does not decode is returned with Status empty and the problem in
// Error, so that the caller can fail its execution instead of losing it.
func (s *Store) ListExecutions(ctx context.Context) ([]ExecutionRecord, error) {
	var out []ExecutionRecord
	var start map[string]types.AttributeValue
	for {
		page, err := s.db.Query(ctx, &dynamodb.QueryInput{
			TableName:                 &s.jobs,
			KeyConditionExpression:    aws.String("pk = :pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": avS(executionsPK)},
			ConsistentRead:            aws.Bool(true),
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return nil, fmt.Errorf("list executions: %w", err)
		}
		for _, item := range page.Items {
			out = append(out, executionFromItem(item))
		}
		if len(page.LastEvaluatedKey) == 0 {
			return out, nil
		}
		start = page.LastEvaluatedKey
	}
}

func executionItem(rec ExecutionRecord) map[string]types.AttributeValue {
	item := executionKey(rec.Name)
	item["state_machine"] = avS(rec.StateMachine)
	item["fingerprint"] = avS(rec.Fingerprint)
	item["input"] = avS(string(rec.Input))
	item["start_time"] = avTime(rec.StartTime)
	item["state"] = avS(rec.State)
	item["state_input"] = avS(string(rec.StateInput))
	item["retry_count"] = avN(rec.RetryCount)
	item["status"] = avS(rec.Status)
	item["version"] = avN(rec.Version)
	item["updated_at"] = avTime(rec.UpdatedAt)
	if rec.RoleARN != "" {
		item["role_arn"] = avS(rec.RoleARN)
	}
	if !rec.EnteredTime.IsZero() {
		item["entered_time"] = avTime(rec.EnteredTime)
	}
	if len(rec.RetryCounts) > 0 {
		counts := make([]types.AttributeValue, len(rec.RetryCounts))
		for i, c := range rec.RetryCounts {
			counts[i] = avN(c)
		}
		item["retry_counts"] = &types.AttributeValueMemberL{Value: counts}
	}
	if rec.Error != "" {
		item["error"] = avS(rec.Error)
	}
	if rec.Cause != "" {
		item["cause"] = avS(rec.Cause)
	}
	if !rec.StopTime.IsZero() {
		item["stop_time"] = avTime(rec.StopTime)
	}
	return item
}

func executionFromItem(item map[string]types.AttributeValue) ExecutionRecord {
	rec := ExecutionRecord{
		Name:         getS(item, "sk"),
		StateMachine: getS(item, "state_machine"),
		Fingerprint:  getS(item, "fingerprint"),
		Input:        json.RawMessage(getS(item, "input")),
		StartTime:    getTime(item, "start_time"),
		RoleARN:      getS(item, "role_arn"),
		State:        getS(item, "state"),
		StateInput:   json.RawMessage(getS(item, "state_input")),
		EnteredTime:  getTime(item, "entered_time"),
		RetryCount:   getN(item, "retry_count"),
		Status:       getS(item, "status"),
		Error:        getS(item, "error"),
		Cause:        getS(item, "cause"),
		StopTime:     getTime(item, "stop_time"),
		Version:      getN(item, "version"),
		UpdatedAt:    getTime(item, "updated_at"),
	}
	var errs []error
	if l, ok := item["retry_counts"]; ok {
		list, isList := l.(*types.AttributeValueMemberL)
		if !isList {
			errs = append(errs, errors.New("retry_counts is not a list"))
		} else {
			for _, v := range list.Value {
				n, isN := v.(*types.AttributeValueMemberN)
				var c int64
				if isN {
					_, err := fmt.Sscan(n.Value, &c)
					isN = err == nil
				}
				if !isN {
					errs = append(errs, errors.New("retry_counts holds a value that is not a number"))
					break
				}
				rec.RetryCounts = append(rec.RetryCounts, c)
			}
		}
	}
	if rec.Status == "" {
		errs = append(errs, errors.New("no status"))
	}
	if err := errors.Join(errs...); err != nil {
		rec.Status, rec.Error = "", "corrupt execution record: "+err.Error()
	}
	return rec
}
