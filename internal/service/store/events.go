package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Event is one progress event of a job. Events are numbered 1, 2, 3... per
// job without gaps, in the order they were appended.
type Event struct {
	// Seq is assigned by AppendEvents.
	Seq int64
	// Key makes the append idempotent: an event whose key the job has seen
	// before is not written again (a retried phase re-sends its events).
	// Empty: no deduplication.
	Key  string
	Type string
	// Data is the payload, JSON. Beyond MaxEventDataBytes it is replaced by
	// a JSON string holding its beginning, and Truncated is set.
	Data      json.RawMessage
	Truncated bool
	At        time.Time // default: when appended
}

// MaxEventDataBytes caps one event's payload.
const MaxEventDataBytes = 32 << 10

const (
	skEventPrefix = "EVENT#"
	skEvKeyPrefix = "EVKEY#"
	seqWidth      = 12
	// A transaction holds at most 100 items: the counter update plus up to
	// 99 event puts and idempotency markers.
	maxTxItems     = 100
	maxAppendTries = 100
)

func eventSK(seq int64) string {
	s := strconv.FormatInt(seq, 10)
	for len(s) < seqWidth {
		s = "0" + s
	}
	return skEventPrefix + s
}

// evKeySK is the marker's sort key; long keys are hashed to stay far below
// the 1 KB sort key limit.
func evKeySK(key string) string {
	if len(key) > 200 {
		sum := sha256.Sum256([]byte(key))
		return skEvKeyPrefix + "sha256:" + hex.EncodeToString(sum[:])
	}
	return skEvKeyPrefix + key
}

// AppendEvents appends events to a job and returns each one's seq, in input
// order. Events whose Key was appended before are skipped and get the seq
// they were first written with, so a retried call writes nothing new.
//
// Seqs come from a counter on the job record, advanced in the same
// transaction that writes the events and their key markers: concurrent
// appenders get gapless, increasing, unique seqs. Up to 49 keyed (99
// unkeyed) events go in one transaction; a larger batch is split, each part
// atomic on its own. A missing job is ErrNotFound.
func (s *Store) AppendEvents(ctx context.Context, jobID string, events []Event) ([]int64, error) {
	if err := checkID("job id", jobID); err != nil {
		return nil, err
	}
	seqs := make([]int64, len(events))
	type pending struct {
		idx  int
		ev   Event
		item map[string]types.AttributeValue
	}
	now := s.now()
	firstByKey := map[string]int{}
	dupOf := map[int]int{} // input index -> index of the first event with its key
	var todo []pending
	for i, ev := range events {
		if ev.Key != "" {
			if j, ok := firstByKey[ev.Key]; ok {
				dupOf[i] = j
				continue
			}
			firstByKey[ev.Key] = i
		}
		if ev.At.IsZero() {
			ev.At = now
		}
		ev.Data, ev.Truncated = capData(ev.Data)
		todo = append(todo, pending{idx: i, ev: ev})
	}

	for len(todo) > 0 {
		// Take the next chunk that fits one transaction.
		n, items := 0, 1
		for n < len(todo) {
			need := 1
			if todo[n].ev.Key != "" {
				need = 2
			}
			if items+need > maxTxItems {
				break
			}
			items += need
			n++
		}
		chunk := todo[:n]
		todo = todo[n:]

		cur, known := s.seqs.get(jobID)
		if !known {
			var err error
			if cur, err = s.readEventSeq(ctx, jobID); err != nil {
				return nil, err
			}
		}
		for attempt := 0; ; attempt++ {
			if len(chunk) == 0 {
				break
			}
			if attempt >= maxAppendTries {
				return nil, fmt.Errorf("append events to job %s: gave up after %d attempts: %w", jobID, attempt, ErrConflict)
			}
			if attempt > 0 {
				if err := backoff(ctx, attempt-1); err != nil {
					return nil, err
				}
			}
			next := cur + int64(len(chunk))
			tx := []types.TransactWriteItem{{Update: &types.Update{
				TableName:                           &s.jobs,
				Key:                                 jobKey(jobID),
				UpdateExpression:                    aws.String("SET event_seq = :next"),
				ConditionExpression:                 aws.String("event_seq = :cur"),
				ExpressionAttributeValues:           map[string]types.AttributeValue{":next": avN(next), ":cur": avN(cur)},
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
			}}}
			// marker[i] is the tx index of chunk[i]'s key marker (0: none).
			marker := make([]int, len(chunk))
			for i, p := range chunk {
				seq := cur + int64(i) + 1
				tx = append(tx, types.TransactWriteItem{Put: &types.Put{
					TableName: &s.jobs,
					Item:      s.eventItem(jobID, seq, p.ev, now),
				}})
				if p.ev.Key != "" {
					marker[i] = len(tx)
					tx = append(tx, types.TransactWriteItem{Put: &types.Put{
						TableName: &s.jobs,
						Item: map[string]types.AttributeValue{
							"pk": avS(jobID), "sk": avS(evKeySK(p.ev.Key)),
							"seq": avN(seq), "expires_at": s.expiry(now),
						},
						ConditionExpression:                 aws.String("attribute_not_exists(pk)"),
						ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
					}})
				}
			}
			_, err := s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx})
			if err == nil {
				for i, p := range chunk {
					seqs[p.idx] = cur + int64(i) + 1
				}
				s.seqs.set(jobID, next)
				break
			}
			reasons, ok := txReasons(err)
			if !ok || len(reasons) != len(tx) {
				return nil, fmt.Errorf("append events to job %s: %w", jobID, err)
			}
			progressed := false
			if reasonCode(reasons[0]) == "ConditionalCheckFailed" {
				if len(reasons[0].Item) == 0 {
					if cur, err = s.readEventSeq(ctx, jobID); err != nil {
						return nil, err
					}
				} else {
					cur = getN(reasons[0].Item, "event_seq")
				}
				s.seqs.set(jobID, cur)
				progressed = true
			}
			// Drop events whose key is already recorded: they were written
			// before, under the seq their marker holds.
			kept := chunk[:0:0]
			for i, p := range chunk {
				if marker[i] != 0 && reasonCode(reasons[marker[i]]) == "ConditionalCheckFailed" {
					seqs[p.idx] = getN(reasons[marker[i]].Item, "seq")
					progressed = true
					continue
				}
				kept = append(kept, p)
			}
			chunk = kept
			if !progressed && !txConflict(reasons) {
				return nil, fmt.Errorf("append events to job %s: %w", jobID, err)
			}
		}
	}
	for i, j := range dupOf {
		seqs[i] = seqs[j]
	}
	return seqs, nil
}

// readEventSeq reads the job's event counter (ErrNotFound if no job).
func (s *Store) readEventSeq(ctx context.Context, jobID string) (int64, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:            &s.jobs,
		Key:                  jobKey(jobID),
		ConsistentRead:       aws.Bool(true),
		ProjectionExpression: aws.String("event_seq"),
	})
	if err != nil {
		return 0, fmt.Errorf("read event counter of job %s: %w", jobID, err)
	}
	if len(out.Item) == 0 {
		return 0, fmt.Errorf("job %s: %w", jobID, ErrNotFound)
	}
	return getN(out.Item, "event_seq"), nil
}

func (s *Store) eventItem(jobID string, seq int64, ev Event, now time.Time) map[string]types.AttributeValue {
	item := map[string]types.AttributeValue{
		"pk":         avS(jobID),
		"sk":         avS(eventSK(seq)),
		"seq":        avN(seq),
		"type":       avS(ev.Type),
		"at":         avTime(ev.At),
		"expires_at": s.expiry(now),
	}
	if len(ev.Data) > 0 {
		item["data"] = avS(string(ev.Data))
	}
	if ev.Key != "" {
		item["key"] = avS(ev.Key)
	}
	if ev.Truncated {
		item["truncated"] = avBool(true)
	}
	return item
}

// capData keeps event data under MaxEventDataBytes: too long, it becomes a
// JSON string of its beginning, which is still valid JSON.
func capData(d json.RawMessage) (json.RawMessage, bool) {
	if len(d) <= MaxEventDataBytes {
		return d, false
	}
	for cut := MaxEventDataBytes / 2; cut > 0; cut /= 2 {
		b, err := json.Marshal(truncate(string(d), cut))
		if err == nil && len(b) <= MaxEventDataBytes {
			return b, true
		}
	}
	return json.RawMessage(`""`), true
}

// DefaultEventPage and MaxEventPage bound ListEvents' limit.
const (
	DefaultEventPage = 100
	MaxEventPage     = 1000
)

// ListEvents returns up to limit events with seq > after, oldest first
// (limit <= 0: DefaultEventPage; capped at MaxEventPage). Page on with the
// last returned Seq; an empty result means no newer events yet.
func (s *Store) ListEvents(ctx context.Context, jobID string, after int64, limit int) ([]Event, error) {
	if limit <= 0 {
		limit = DefaultEventPage
	}
	limit = min(limit, MaxEventPage)
	if after < 0 {
		after = 0
	}
	var events []Event
	var start map[string]types.AttributeValue
	for len(events) < limit {
		out, err := s.db.Query(ctx, &dynamodb.QueryInput{
			TableName:              &s.jobs,
			KeyConditionExpression: aws.String("pk = :pk AND sk BETWEEN :from AND :to"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":pk":   avS(jobID),
				":from": avS(eventSK(after + 1)),
				":to":   avS(skEventPrefix + ":"), // ':' sorts right after '9'
			},
			ConsistentRead:    aws.Bool(true),
			Limit:             aws.Int32(int32(limit - len(events))),
			ExclusiveStartKey: start,
		})
		if err != nil {
			return nil, fmt.Errorf("list events of job %s: %w", jobID, err)
		}
		for _, item := range out.Items {
			events = append(events, eventFromItem(item))
		}
		if len(out.LastEvaluatedKey) == 0 {
			break
		}
		start = out.LastEvaluatedKey
	}
	return events, nil
}

func eventFromItem(item map[string]types.AttributeValue) Event {
	ev := Event{
		Seq:       getN(item, "seq"),
		Key:       getS(item, "key"),
		Type:      getS(item, "type"),
		Truncated: getBool(item, "truncated"),
		At:        getTime(item, "at"),
	}
	if d := getS(item, "data"); d != "" {
		ev.Data = json.RawMessage(d)
	}
	return ev
}
