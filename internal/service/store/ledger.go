package store

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// LedgerState is where a sandbox is in its life, as far as we know.
type LedgerState string

const (
	// LedgerCreating: recorded before asking the provider; the sandbox may
	// or may not exist. The reaper treats it as live.
	LedgerCreating LedgerState = "creating"
	// LedgerRunning: the provider confirmed it, under ProviderID.
	LedgerRunning LedgerState = "running"
	// LedgerTerminated: terminated (or confirmed gone); the entry expires
	// after the retention.
	LedgerTerminated LedgerState = "terminated"
)

// LedgerEntry is one sandbox in the ledger. Every sandbox sandstep creates
// has one, written before the create call, so none is ever untracked.
type LedgerEntry struct {
	// Name is the sandbox name given to the provider (the job id, or a
	// session's sandbox name); it is the entry's key.
	Name       string
	Provider   string
	ProviderID string // known once running
	// Owner is who the sandbox belongs to, e.g. "job:<id>" or
	// "session:<id>"; LedgerListByOwner finds entries by it.
	Owner string
	// Parent is the owner's own owner, when it has one (a child sandbox's
	// parent); empty for jobs and sessions.
	Parent string
	// Job is the job whose usage the sandbox's counts (an agent run's
	// direct sandbox and its children), whoever owns it; empty for a
	// sandbox no job accounts for. A research job's own sandboxes (owner
	// "job:<key>") need no Job: their owner says it.
	Job    string
	Tenant string
	Labels map[string]string
	// Snapshot is the snapshot the sandbox boots from: the snapshot
	// cleanup keeps it while the entry is live (written before the
	// create, so a sandbox being created counts too).
	Snapshot string
	// MemoryMB is the size the sandbox was asked for (0: the provider's
	// default), which usage is priced by.
	MemoryMB int
	State    LedgerState
	// Deadline is when the sandbox must be gone at the latest; the reaper
	// terminates live sandboxes past it.
	Deadline     time.Time
	CreatedAt    time.Time
	RunningAt    time.Time
	TerminatedAt time.Time
	// Reason says why it was closed ("completed", "cancelled", "reaped").
	Reason string
	// BytesOut is what the sandbox sent to the network, as its provider
	// measured it when the owner terminated it; nil where the provider
	// does not count traffic, or the sandbox was found gone.
	BytesOut *int64
	// Execs counts the commands run in the sandbox (LedgerAddExec).
	Execs     int64
	ExpiresAt time.Time // DynamoDB TTL; set only once terminated
}

const (
	// ledgerLiveIndex holds only live entries (sparse: live_shard is removed
	// when an entry closes), keyed "<state>#<shard>" so that no partition
	// takes every live sandbox's writes.
	ledgerLiveIndex  = "by-live-deadline"
	ledgerOwnerIndex = "by-owner"
)

func ledgerKey(name string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": avS(name)}
}

// LedgerBegin records that the sandbox e.Name is about to be created; call
// it before every create. For a name whose entry is terminated it starts a
// new entry. If the entry is live and has the same owner (a retried create)
// it is returned unchanged; a live entry of another owner is ErrConflict.
func (s *Store) LedgerBegin(ctx context.Context, e LedgerEntry) (LedgerEntry, error) {
	if err := checkID("sandbox name", e.Name); err != nil {
		return LedgerEntry{}, err
	}
	if e.Owner == "" || e.Provider == "" || e.Deadline.IsZero() {
		return LedgerEntry{}, fmt.Errorf("ledger %s: owner, provider and deadline are required: %w", e.Name, ErrInvalid)
	}
	now := s.now()
	item := ledgerKey(e.Name)
	item["provider"] = avS(e.Provider)
	item["owner"] = avS(e.Owner)
	item["state"] = avS(string(LedgerCreating))
	item["live_shard"] = avS(shardKey(string(LedgerCreating), e.Name))
	item["deadline"] = avTime(e.Deadline)
	item["created_at"] = avTime(now)
	item["updated_at"] = avTime(now)
	if e.Tenant != "" {
		item["tenant"] = avS(e.Tenant)
	}
	if e.Parent != "" {
		item["parent"] = avS(e.Parent)
	}
	if e.Job != "" {
		item["job"] = avS(e.Job)
	}
	if e.MemoryMB > 0 {
		item["memory_mb"] = avN(int64(e.MemoryMB))
	}
	if len(e.Labels) > 0 {
		item["labels"] = avStrMap(e.Labels)
	}
	if e.Snapshot != "" {
		item["snapshot"] = avS(e.Snapshot)
	}
	_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           &s.sandboxes,
		Item:                                item,
		ConditionExpression:                 aws.String("attribute_not_exists(pk) OR #state = :terminated"),
		ExpressionAttributeNames:            map[string]string{"#state": "state"},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":terminated": avS(string(LedgerTerminated))},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return ledgerFromItem(item), nil
	}
	cur, err := s.ledgerConflict(ctx, e.Name, "begin", err)
	if cur.Owner == e.Owner && cur.State != LedgerTerminated {
		return cur, nil
	}
	return cur, err
}

// LedgerRunning records the provider's id once the create succeeded. If the
// entry was closed meanwhile (a cancel raced the create) it is ErrConflict:
// the caller must terminate the sandbox it just created.
func (s *Store) LedgerRunning(ctx context.Context, name, providerID string) (LedgerEntry, error) {
	now := s.now()
	e := newExpr()
	e.set("state", avS(string(LedgerRunning)))
	e.set("live_shard", avS(shardKey(string(LedgerRunning), name)))
	e.set("provider_id", avS(providerID))
	e.setExpr("running_at", "if_not_exists("+e.name("running_at")+", "+e.value(avTime(now))+")")
	e.set("updated_at", avTime(now))
	e.cond("attribute_exists(pk)")
	e.condIn("state", []types.AttributeValue{avS(string(LedgerCreating)), avS(string(LedgerRunning))})
	out, err := s.db.UpdateItem(ctx, e.update(s.sandboxes, ledgerKey(name)))
	if err != nil {
		return s.ledgerConflict(ctx, name, "mark running", err)
	}
	return ledgerFromItem(out.Attributes), nil
}

// LedgerClose marks the sandbox terminated; call it after every terminate.
// bytesOut, when measured, is what the sandbox sent (kept with its times
// for usage). Closing a closed entry is a no-op that returns it; an
// unknown name is ErrNotFound.
func (s *Store) LedgerClose(ctx context.Context, name, reason string, bytesOut *int64) (LedgerEntry, error) {
	now := s.now()
	e := newExpr()
	e.set("state", avS(string(LedgerTerminated)))
	e.set("terminated_at", avTime(now))
	e.set("updated_at", avTime(now))
	e.set("expires_at", s.expiry(now))
	if reason != "" {
		e.set("reason", avS(truncate(reason, 1024)))
	}
	if bytesOut != nil {
		e.set("bytes_out", avN(*bytesOut))
	}
	e.remove("live_shard")
	e.cond("attribute_exists(pk)")
	e.cond(e.name("state") + " <> " + e.value(avS(string(LedgerTerminated))))
	out, err := s.db.UpdateItem(ctx, e.update(s.sandboxes, ledgerKey(name)))
	if err == nil {
		return ledgerFromItem(out.Attributes), nil
	}
	cur, err := s.ledgerConflict(ctx, name, "close", err)
	if cur.State == LedgerTerminated {
		return cur, nil
	}
	return cur, err
}

// LedgerAddExec counts one command run in the live sandbox name. An entry
// that closed meanwhile, or is unknown, is left as it is (the command
// could not have run).
func (s *Store) LedgerAddExec(ctx context.Context, name string) error {
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &s.sandboxes,
		Key:                       ledgerKey(name),
		UpdateExpression:          aws.String("ADD execs :one"),
		ConditionExpression:       aws.String("attribute_exists(pk) AND #state <> :terminated"),
		ExpressionAttributeNames:  map[string]string{"#state": "state"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": avN(1), ":terminated": avS(string(LedgerTerminated))},
	})
	if _, ok := isConditionFailed(err); ok {
		return nil
	}
	if err != nil {
		return fmt.Errorf("count an exec of sandbox %s: %w", name, err)
	}
	return nil
}

// LedgerGet reads one entry.
func (s *Store) LedgerGet(ctx context.Context, name string) (LedgerEntry, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &s.sandboxes, Key: ledgerKey(name), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return LedgerEntry{}, fmt.Errorf("get ledger entry %s: %w", name, err)
	}
	if len(out.Item) == 0 {
		return LedgerEntry{}, fmt.Errorf("ledger entry %s: %w", name, ErrNotFound)
	}
	return ledgerFromItem(out.Item), nil
}

// LedgerListLive returns up to limit live entries (creating or running)
// whose deadline is before the given time, earliest deadline first within
// each state; creating entries come first. limit <= 0 means all. It reads an
// index, so an entry written a moment ago may be missing (eventual
// consistency): the reaper's next round finds it.
func (s *Store) LedgerListLive(ctx context.Context, before time.Time, limit int) ([]LedgerEntry, error) {
	var out []LedgerEntry
	for _, st := range []LedgerState{LedgerCreating, LedgerRunning} {
		items, err := s.queryShards(ctx, shardQuery{
			table: s.sandboxes, index: ledgerLiveIndex,
			keyAttr: "live_shard", rangeAttr: "deadline", rangeCond: "#r < :before",
			values: map[string]types.AttributeValue{":before": avTime(before)},
			limit:  remaining(limit, len(out)),
		}, string(st))
		if err != nil {
			return nil, fmt.Errorf("list live sandboxes: %w", err)
		}
		for _, it := range items {
			out = append(out, ledgerFromItem(it))
		}
		if limit > 0 && len(out) >= limit {
			break
		}
	}
	return out, nil
}

// LedgerListByOwner returns every entry of an owner, oldest first (from an
// index: eventually consistent).
func (s *Store) LedgerListByOwner(ctx context.Context, owner string) ([]LedgerEntry, error) {
	items, err := s.queryIndex(ctx, s.sandboxes, ledgerOwnerIndex, "#k = :k",
		map[string]string{"#k": "owner"}, map[string]types.AttributeValue{":k": avS(owner)}, 0)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes of %s: %w", owner, err)
	}
	out := make([]LedgerEntry, len(items))
	for i, it := range items {
		out[i] = ledgerFromItem(it)
	}
	return out, nil
}

func (s *Store) ledgerConflict(ctx context.Context, name, op string, err error) (LedgerEntry, error) {
	old, ok := isConditionFailed(err)
	if !ok {
		return LedgerEntry{}, fmt.Errorf("%s ledger entry %s: %w", op, name, err)
	}
	var cur LedgerEntry
	if len(old) == 0 {
		if cur, err = s.LedgerGet(ctx, name); err != nil {
			return LedgerEntry{}, err
		}
	} else {
		cur = ledgerFromItem(old)
	}
	return cur, fmt.Errorf("%s ledger entry %s (state %s, owner %s): %w", op, name, cur.State, cur.Owner, ErrConflict)
}

func ledgerFromItem(item map[string]types.AttributeValue) LedgerEntry {
	return LedgerEntry{
		Name:         getS(item, "pk"),
		Provider:     getS(item, "provider"),
		ProviderID:   getS(item, "provider_id"),
		Owner:        getS(item, "owner"),
		Parent:       getS(item, "parent"),
		Job:          getS(item, "job"),
		Tenant:       getS(item, "tenant"),
		Labels:       getStrMap(item, "labels"),
		Snapshot:     getS(item, "snapshot"),
		MemoryMB:     int(getN(item, "memory_mb")),
		State:        LedgerState(getS(item, "state")),
		Deadline:     getTime(item, "deadline"),
		CreatedAt:    getTime(item, "created_at"),
		RunningAt:    getTime(item, "running_at"),
		TerminatedAt: getTime(item, "terminated_at"),
		Reason:       getS(item, "reason"),
		BytesOut:     getOptN(item, "bytes_out"),
		Execs:        getN(item, "execs"),
		ExpiresAt:    getUnix(item, "expires_at"),
	}
}

// getOptN reads a number attribute that may be absent (nil then).
func getOptN(item map[string]types.AttributeValue, k string) *int64 {
	if _, ok := item[k].(*types.AttributeValueMemberN); !ok {
		return nil
	}
	n := getN(item, k)
	return &n
}

// remaining is how many more items a query may return (0: unlimited).
func remaining(limit, have int) int {
	if limit <= 0 {
		return 0
	}
	return limit - have
}

// queryIndex runs a query on a global secondary index, following pages
// until limit items (0: all).
func (s *Store) queryIndex(ctx context.Context, table, index, keyCond string, names map[string]string, values map[string]types.AttributeValue, limit int) ([]map[string]types.AttributeValue, error) {
	var items []map[string]types.AttributeValue
	var start map[string]types.AttributeValue
	for {
		in := &dynamodb.QueryInput{
			TableName:                 aws.String(table),
			IndexName:                 aws.String(index),
			KeyConditionExpression:    aws.String(keyCond),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: values,
			ExclusiveStartKey:         start,
		}
		if limit > 0 {
			in.Limit = aws.Int32(int32(limit - len(items)))
		}
		if s.pageSize > 0 && (in.Limit == nil || *in.Limit > s.pageSize) {
			in.Limit = aws.Int32(s.pageSize)
		}
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, err
		}
		items = append(items, out.Items...)
		if len(out.LastEvaluatedKey) == 0 || (limit > 0 && len(items) >= limit) {
			return items, nil
		}
		start = out.LastEvaluatedKey
	}
}
