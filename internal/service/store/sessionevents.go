package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sandstep/sandstep/internal/service/ids"
)

// MaxSessionEvents is how many events a session keeps; older ones are
// dropped (their seqs are not reused).
const MaxSessionEvents = 100

// SessionEvent is something that happened to a session, in the list of
// its latest events. Seqs count 1, 2, 3... per session.
type SessionEvent struct {
	Seq  int64
	Type string
	At   time.Time
	Data json.RawMessage
}

// NewSessionEvent is an event to append.
type NewSessionEvent struct {
	Type string
	Data json.RawMessage
	// Final: the session is gone, so its events expire after the store's
	// retention. Revive: it starts (again), so they no longer do.
	Final, Revive bool
	// Once, when set, writes the event only if the last event written with
	// a Once value had another one.
	Once string
}

func eventsKey(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": avS(eventsKeyPrefix + key)}
}

// AppendSessionEvent adds an event to the list of the session key and
// drops the oldest beyond MaxSessionEvents. It reports whether it wrote
// (see NewSessionEvent.Once).
func (s *Store) AppendSessionEvent(ctx context.Context, key string, at time.Time, e NewSessionEvent) (bool, error) {
	ev := map[string]types.AttributeValue{
		"type": avS(e.Type),
		"at":   avTime(at),
	}
	if e.Data != nil {
		ev["data"] = avS(string(e.Data))
	}
	names := map[string]string{"#e": "events"}
	values := map[string]types.AttributeValue{
		":new":   &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberM{Value: ev}}},
		":empty": &types.AttributeValueMemberL{Value: []types.AttributeValue{}},
	}
	update := "SET #e = list_append(if_not_exists(#e, :empty), :new)"
	if e.Final {
		names["#x"] = "expires_at"
		values[":x"] = s.expiry(at)
		update += ", #x = :x"
	}
	// Every append carries a fresh token, kept as the list's last: the
	// SDK retries an update whose answer was lost, and list_append is not
	// idempotent, so a retry that finds its own token already there is the
	// same append, already done, not a second event.
	token := ids.Random(16)
	names["#l"] = "last_append"
	values[":l"] = avS(token)
	update += ", #l = :l"
	cond := "(attribute_not_exists(#l) OR #l <> :l)"
	if e.Once != "" {
		names["#o"] = "once"
		values[":o"] = avS(e.Once)
		update += ", #o = :o"
		cond += " AND (attribute_not_exists(#o) OR #o <> :o)"
	}
	if e.Revive {
		names["#x"] = "expires_at"
		update += " REMOVE #x"
	}
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           &s.sessions,
		Key:                                 eventsKey(key),
		UpdateExpression:                    aws.String(update),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValues:                        types.ReturnValueUpdatedNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if old, ok := isConditionFailed(err); ok {
		// Our own retried append landed already; otherwise the Once
		// value was there.
		return getS(old, "last_append") == token, nil
	}
	if err != nil {
		return false, fmt.Errorf("record event %s: %w", e.Type, err)
	}
	if l, ok := out.Attributes["events"].(*types.AttributeValueMemberL); ok && len(l.Value) > MaxSessionEvents {
		s.trimSessionEvents(ctx, key, len(l.Value))
	}
	return true, nil
}

// trimSessionEvents drops the oldest events of a list that has n of them.
// The condition makes two trimmers of the same list trim it once; a list
// left long by a failed trim is trimmed by the next append.
func (s *Store) trimSessionEvents(ctx context.Context, key string, n int) {
	drop := n - MaxSessionEvents
	remove := ""
	for i := range drop {
		if i > 0 {
			remove += ", "
		}
		remove += "#e[" + strconv.Itoa(i) + "]"
	}
	_, _ = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &s.sessions,
		Key:                       eventsKey(key),
		UpdateExpression:          aws.String("REMOVE " + remove + " ADD #b :drop"),
		ConditionExpression:       aws.String("size(#e) = :n"),
		ExpressionAttributeNames:  map[string]string{"#e": "events", "#b": "base"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":drop": avN(int64(drop)), ":n": avN(int64(n))},
	})
}

// SessionEvents returns the events of the session key with seq > after,
// oldest first.
func (s *Store) SessionEvents(ctx context.Context, key string, after int64) ([]SessionEvent, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &s.sessions, Key: eventsKey(key), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	base := getN(out.Item, "base")
	l, _ := out.Item["events"].(*types.AttributeValueMemberL)
	var evs []SessionEvent
	if l == nil {
		return evs, nil
	}
	for i, v := range l.Value {
		m, ok := v.(*types.AttributeValueMemberM)
		seq := base + int64(i) + 1
		if !ok || seq <= after {
			continue
		}
		ev := SessionEvent{Seq: seq, Type: getS(m.Value, "type"), At: getTime(m.Value, "at")}
		if d := getS(m.Value, "data"); d != "" {
			ev.Data = json.RawMessage(d)
		}
		evs = append(evs, ev)
	}
	return evs, nil
}
