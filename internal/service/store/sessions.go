package store

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// SessionState is a session's state. The transitions are
// idle -> running -> idle (a run), idle -> deleting -> deleted (cleanup);
// every one is a conditional write, so a run and a deletion can never both
// win.
type SessionState string

const (
	SessionIdle     SessionState = "idle"
	SessionRunning  SessionState = "running"
	SessionDeleting SessionState = "deleting"
	SessionDeleted  SessionState = "deleted"
)

// Session is a run_code session: its volume and, while kept, its sandbox.
type Session struct {
	// ID is the session's internal key (ids.SessionKey of Tenant and
	// ClientID).
	ID     string
	Tenant string
	// ClientID is the id the client knows the session by, unique within
	// its tenant only.
	ClientID   string
	VolumeSlug string
	SandboxID  string
	State      SessionState
	// Version grows by one with every change; BeginRun, EndRun and
	// SetSessionSandbox apply only at the version the caller read.
	Version        int64
	CreatedAt      time.Time
	LastAccessedAt time.Time
	// IdleExpiresAt is LastAccessedAt plus the idle TTL: from then on the
	// cleanup may delete the session's volume. It is deliberately not the
	// table's TTL attribute, which would let DynamoDB drop the record of a
	// volume that still exists.
	IdleExpiresAt time.Time
	DeletedAt     time.Time
	// ExpiresAt is the DynamoDB TTL, set once the session is deleted.
	ExpiresAt time.Time
}

const sessionIndex = "by-state-expiry"

func sessionKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": avS(id)}
}

// gsiState is a session's partition value in the cleanup index: its state,
// sharded, so that frequent run updates spread over IndexShards partitions.
func gsiState(id string, st SessionState) string { return shardKey(string(st), id) }

// NewSession is what CreateSession needs.
type NewSession struct {
	ID         string
	Tenant     string
	ClientID   string
	VolumeSlug string
	// IdleTTL is how long after the last access the volume may be deleted.
	IdleTTL time.Duration
}

// CreateSession records a new idle session, or returns the existing one
// with created=false (ErrConflict if it belongs to another tenant or client
// id). A deleted session's id may be used again: that starts a new record.
func (s *Store) CreateSession(ctx context.Context, ns NewSession) (Session, bool, error) {
	if err := checkID("session id", ns.ID); err != nil {
		return Session{}, false, err
	}
	if ns.Tenant == "" || ns.VolumeSlug == "" {
		return Session{}, false, fmt.Errorf("session %s: tenant and volume slug are required: %w", ns.ID, ErrInvalid)
	}
	now := s.now()
	item := sessionKey(ns.ID)
	item["tenant"] = avS(ns.Tenant)
	item[tenantIndexAttr] = avS(ns.Tenant) // lists it (lists.go)
	if ns.ClientID != "" {
		item["client_id"] = avS(ns.ClientID)
	}
	item["volume_slug"] = avS(ns.VolumeSlug)
	item["state"] = avS(string(SessionIdle))
	item["gsi_state"] = avS(gsiState(ns.ID, SessionIdle))
	item["version"] = avN(1)
	item["created_at"] = avTime(now)
	item["last_accessed_at"] = avTime(now)
	item["idle_expires_at"] = avTime(now.Add(ns.IdleTTL))
	_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           &s.sessions,
		Item:                                item,
		ConditionExpression:                 aws.String("attribute_not_exists(pk) OR #state = :deleted"),
		ExpressionAttributeNames:            map[string]string{"#state": "state"},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":deleted": avS(string(SessionDeleted))},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return sessionFromItem(item), true, nil
	}
	cur, err := s.sessionConflict(ctx, ns.ID, "create", err)
	if cur.ID == "" {
		return Session{}, false, err
	}
	if cur.Tenant != ns.Tenant || cur.ClientID != ns.ClientID {
		return cur, false, fmt.Errorf("session %s belongs to another tenant or id: %w", ns.ID, ErrConflict)
	}
	return cur, false, nil
}

// GetSession reads a session (strongly consistent).
func (s *Store) GetSession(ctx context.Context, id string) (Session, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &s.sessions, Key: sessionKey(id), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return Session{}, fmt.Errorf("get session %s: %w", id, err)
	}
	if len(out.Item) == 0 {
		return Session{}, fmt.Errorf("session %s: %w", id, ErrNotFound)
	}
	return sessionFromItem(out.Item), nil
}

// BeginRun moves an idle session at the given version to running and
// records the access. Anything else (a run in progress, a deletion begun, a
// newer version) is ErrConflict with the current session.
func (s *Store) BeginRun(ctx context.Context, id string, version int64, idleTTL time.Duration) (Session, error) {
	return s.sessionTransition(ctx, id, "begin run", SessionIdle, SessionRunning, version, idleTTL)
}

// EndRun moves a running session at the given version back to idle and
// records the access, so the idle TTL counts from the end of the run.
func (s *Store) EndRun(ctx context.Context, id string, version int64, idleTTL time.Duration) (Session, error) {
	return s.sessionTransition(ctx, id, "end run", SessionRunning, SessionIdle, version, idleTTL)
}

func (s *Store) sessionTransition(ctx context.Context, id, op string, from, to SessionState, version int64, idleTTL time.Duration) (Session, error) {
	now := s.now()
	e := newExpr()
	e.set("state", avS(string(to)))
	e.set("gsi_state", avS(gsiState(id, to)))
	e.set("last_accessed_at", avTime(now))
	e.set("idle_expires_at", avTime(now.Add(idleTTL)))
	e.add("version", avN(1))
	e.cond(e.name("state") + " = " + e.value(avS(string(from))))
	e.cond(e.name("version") + " = " + e.value(avN(version)))
	out, err := s.db.UpdateItem(ctx, e.update(s.sessions, sessionKey(id)))
	if err != nil {
		return s.sessionConflict(ctx, id, op, err)
	}
	return sessionFromItem(out.Attributes), nil
}

// SetSessionSandbox records (or, with "", clears) the sandbox kept for the
// session, at the given version, while it is idle or running.
func (s *Store) SetSessionSandbox(ctx context.Context, id string, version int64, sandboxID string) (Session, error) {
	e := newExpr()
	e.setOrRemove("sandbox_id", &sandboxID)
	e.add("version", avN(1))
	e.condIn("state", []types.AttributeValue{avS(string(SessionIdle)), avS(string(SessionRunning))})
	e.cond(e.name("version") + " = " + e.value(avN(version)))
	out, err := s.db.UpdateItem(ctx, e.update(s.sessions, sessionKey(id)))
	if err != nil {
		return s.sessionConflict(ctx, id, "set sandbox of", err)
	}
	return sessionFromItem(out.Attributes), nil
}

// BeginDelete moves a session to deleting if it is idle and its idle expiry
// is before the given time; only then may the cleanup delete its volume. A
// session that is running, or was used since, is ErrConflict.
func (s *Store) BeginDelete(ctx context.Context, id string, expiredBefore time.Time) (Session, error) {
	e := newExpr()
	e.set("state", avS(string(SessionDeleting)))
	e.set("gsi_state", avS(gsiState(id, SessionDeleting)))
	e.add("version", avN(1))
	e.cond(e.name("state") + " = " + e.value(avS(string(SessionIdle))))
	e.cond(e.name("idle_expires_at") + " < " + e.value(avTime(expiredBefore)))
	out, err := s.db.UpdateItem(ctx, e.update(s.sessions, sessionKey(id)))
	if err != nil {
		return s.sessionConflict(ctx, id, "begin delete of", err)
	}
	return sessionFromItem(out.Attributes), nil
}

// FinishDelete marks a deleting session deleted once its volume is gone:
// it leaves the cleanup index and expires after the retention. Finishing a
// deleted session again is a no-op.
func (s *Store) FinishDelete(ctx context.Context, id string) (Session, error) {
	now := s.now()
	e := newExpr()
	e.set("state", avS(string(SessionDeleted)))
	e.set("deleted_at", avTime(now))
	e.set("expires_at", s.expiry(now))
	e.remove("gsi_state")
	e.remove("sandbox_id")
	e.add("version", avN(1))
	e.cond(e.name("state") + " = " + e.value(avS(string(SessionDeleting))))
	out, err := s.db.UpdateItem(ctx, e.update(s.sessions, sessionKey(id)))
	if err == nil {
		return sessionFromItem(out.Attributes), nil
	}
	cur, err := s.sessionConflict(ctx, id, "finish delete of", err)
	if cur.State == SessionDeleted {
		return cur, nil
	}
	return cur, err
}

// ListSessions returns up to limit sessions in state (idle, running or
// deleting) whose idle expiry is before the given time, earliest first, from the
// cleanup index's shards (eventually consistent; the conditional writes decide). limit <= 0
// means all.
func (s *Store) ListSessions(ctx context.Context, state SessionState, before time.Time, limit int) ([]Session, error) {
	if state == SessionDeleted {
		return nil, fmt.Errorf("deleted sessions are not indexed: %w", ErrInvalid)
	}
	items, err := s.queryShards(ctx, shardQuery{
		table: s.sessions, index: sessionIndex,
		keyAttr: "gsi_state", rangeAttr: "idle_expires_at", rangeCond: "#r < :before",
		values: map[string]types.AttributeValue{":before": avTime(before)},
		limit:  limit,
	}, string(state))
	if err != nil {
		return nil, fmt.Errorf("list %s sessions: %w", state, err)
	}
	out := make([]Session, len(items))
	for i, it := range items {
		out[i] = sessionFromItem(it)
	}
	return out, nil
}

func (s *Store) sessionConflict(ctx context.Context, id, op string, err error) (Session, error) {
	old, ok := isConditionFailed(err)
	if !ok {
		return Session{}, fmt.Errorf("%s session %s: %w", op, id, err)
	}
	var cur Session
	if len(old) == 0 {
		if cur, err = s.GetSession(ctx, id); err != nil {
			return Session{}, err
		}
	} else {
		cur = sessionFromItem(old)
	}
	return cur, fmt.Errorf("%s session %s (state %s, version %d): %w", op, id, cur.State, cur.Version, ErrConflict)
}

func sessionFromItem(item map[string]types.AttributeValue) Session {
	return Session{
		ID:             getS(item, "pk"),
		Tenant:         getS(item, "tenant"),
		ClientID:       getS(item, "client_id"),
		VolumeSlug:     getS(item, "volume_slug"),
		SandboxID:      getS(item, "sandbox_id"),
		State:          SessionState(getS(item, "state")),
		Version:        getN(item, "version"),
		CreatedAt:      getTime(item, "created_at"),
		LastAccessedAt: getTime(item, "last_accessed_at"),
		IdleExpiresAt:  getTime(item, "idle_expires_at"),
		DeletedAt:      getTime(item, "deleted_at"),
		ExpiresAt:      getUnix(item, "expires_at"),
	}
}
