package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Direct sandboxes (the /v1/sandboxes API) live in the sandboxes table
// beside the ledger, under keys of their own:
//
//	dsbx#<id>                  the sandbox's record (tenant, parent, token hash, ports, activity)
//	dsbxname#<tenant>#<name>   a name's claim, which makes a named create idempotent
//	dsbxkids#<parent id>       the parent's child counters: alive now, created in the window
//
// A record carries owner "directs:<tenant>" (the by-owner index lists a
// tenant's sandboxes) and, while live, live_shard "dsbx#<n>" with its end as
// deadline (the live index lists them for the reaper; LedgerListLive reads
// other shard values and never sees them). The ledger entry of the sandbox
// itself is the owner package's (package sandboxes), as for every sandbox.

// Direct sandbox states.
const (
	DirectCreating   = "creating"
	DirectRunning    = "running"
	DirectTerminated = "terminated"
)

// DirectSandbox is one sandbox of the /v1/sandboxes API.
type DirectSandbox struct {
	ID     string
	Tenant string
	// Name, when set, made the create idempotent for the tenant.
	Name string
	// ParentID is the sandbox whose token created this one ("" for a
	// sandbox a tenant's own token created); Depth counts the parents.
	ParentID string
	Depth    int
	// Ledger is the sandbox's ledger entry (and provider name).
	Ledger string
	// Job is the job whose usage the sandbox counts in (an agent run's
	// sandbox; its children inherit it), "" for a sandbox of its own.
	Job        string
	ProviderID string
	State      string
	Ports      []int
	// URLToken guards the public URLs of the exposed ports; TokenHash is
	// the SHA-256 (hex) of the sandbox's SANDSTEP_TOKEN.
	URLToken  string
	TokenHash string
	// PortURLs are the provider's own URLs of the exposed ports.
	PortURLs   map[string]string
	Network    string
	Labels     map[string]string
	CreatedAt  time.Time
	EndsAt     time.Time
	LastActive time.Time
	// KeepAliveUntil: a background exec that opted in (keep_alive) counts
	// as activity until then.
	KeepAliveUntil time.Time
	// Expiring is set once the sandbox.expiring event was recorded.
	Expiring bool
	Reason   string
	Events   []DirectEvent
}

// DirectEvent is one event in a direct sandbox's life.
type DirectEvent struct {
	Type    string    `json:"type"`
	At      time.Time `json:"at"`
	Message string    `json:"message,omitempty"`
}

// ChildLimits are the per-parent limits a child's create is held to.
type ChildLimits struct {
	MaxAlive int
	PerHour  int
}

func directKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": avS("dsbx#" + id)}
}

func directOwner(tenant string) string { return "directs:" + tenant }

func directItem(d DirectSandbox) map[string]types.AttributeValue {
	item := directKey(d.ID)
	item["kind"] = avS("dsbx")
	item["id"] = avS(d.ID)
	item["tenant"] = avS(d.Tenant)
	item["owner"] = avS(directOwner(d.Tenant))
	item["ledger"] = avS(d.Ledger)
	item["state"] = avS(d.State)
	item["depth"] = avN(int64(d.Depth))
	item["url_token"] = avS(d.URLToken)
	item["token_hash"] = avS(d.TokenHash)
	item["created_at"] = avTime(d.CreatedAt)
	item["deadline"] = avTime(d.EndsAt)
	item["last_active"] = avTime(d.LastActive)
	item["live_shard"] = avS(shardKey("dsbx", d.ID))
	if d.Name != "" {
		item["name"] = avS(d.Name)
	}
	if d.ParentID != "" {
		item["parent_id"] = avS(d.ParentID)
	}
	if d.Job != "" {
		item["job"] = avS(d.Job)
	}
	if d.Network != "" {
		item["network"] = avS(d.Network)
	}
	if len(d.Labels) > 0 {
		item["labels"] = avStrMap(d.Labels)
	}
	if len(d.Ports) > 0 {
		l := make([]types.AttributeValue, len(d.Ports))
		for i, p := range d.Ports {
			l[i] = avN(int64(p))
		}
		item["ports"] = &types.AttributeValueMemberL{Value: l}
	}
	item["events"] = &types.AttributeValueMemberL{Value: []types.AttributeValue{eventAV(DirectEvent{Type: "sandbox.created", At: d.CreatedAt})}}
	return item
}

func eventAV(e DirectEvent) types.AttributeValue {
	m := map[string]types.AttributeValue{"type": avS(e.Type), "at": avTime(e.At)}
	if e.Message != "" {
		m["message"] = avS(truncate(e.Message, 1024))
	}
	return &types.AttributeValueMemberM{Value: m}
}

func directFromItem(item map[string]types.AttributeValue) DirectSandbox {
	d := DirectSandbox{
		ID: getS(item, "id"), Tenant: getS(item, "tenant"), Name: getS(item, "name"),
		ParentID: getS(item, "parent_id"), Depth: int(getN(item, "depth")), Ledger: getS(item, "ledger"), Job: getS(item, "job"),
		ProviderID: getS(item, "provider_id"), State: getS(item, "state"), URLToken: getS(item, "url_token"),
		TokenHash: getS(item, "token_hash"), PortURLs: getStrMap(item, "port_urls"), Network: getS(item, "network"),
		Labels: getStrMap(item, "labels"), CreatedAt: getTime(item, "created_at"), EndsAt: getTime(item, "deadline"),
		LastActive: getTime(item, "last_active"), KeepAliveUntil: getTime(item, "keep_alive_until"),
		Expiring: getBool(item, "expiring"), Reason: getS(item, "reason"),
	}
	if l, ok := item["ports"].(*types.AttributeValueMemberL); ok {
		for _, v := range l.Value {
			if n, ok := v.(*types.AttributeValueMemberN); ok {
				p, _ := strconv.Atoi(n.Value)
				d.Ports = append(d.Ports, p)
			}
		}
	}
	if l, ok := item["events"].(*types.AttributeValueMemberL); ok {
		for _, v := range l.Value {
			if m, ok := v.(*types.AttributeValueMemberM); ok {
				d.Events = append(d.Events, DirectEvent{Type: getS(m.Value, "type"), At: getTime(m.Value, "at"), Message: getS(m.Value, "message")})
			}
		}
	}
	return d
}

// DirectClaimName claims name for the sandbox id within tenant. It returns
// the id that holds the name: id itself when the claim is new, or the
// sandbox that claimed it first. A claim whose sandbox is terminated passes
// to id (conditionally on that sandbox, so two racing creates agree).
func (s *Store) DirectClaimName(ctx context.Context, tenant, name, id string) (string, error) {
	key := map[string]types.AttributeValue{"pk": avS("dsbxname#" + tenant + "#" + name)}
	for range 3 {
		item := map[string]types.AttributeValue{"pk": key["pk"], "id": avS(id), "expires_at": s.expiry(s.now())}
		_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: &s.sandboxes, Item: item,
			ConditionExpression:                 aws.String("attribute_not_exists(pk)"),
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		if err == nil {
			return id, nil
		}
		old, ok := isConditionFailed(err)
		if !ok {
			return "", fmt.Errorf("claim sandbox name %q: %w", name, err)
		}
		held := getS(old, "id")
		cur, err := s.DirectGet(ctx, held)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return "", err
		}
		if err == nil && cur.State != DirectTerminated {
			return held, nil
		}
		// The holder is gone: take the name over, unless another create
		// did first.
		_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: &s.sandboxes, Item: item,
			ConditionExpression:       aws.String("id = :old"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":old": avS(held)},
		})
		if err == nil {
			return id, nil
		}
		if _, ok := isConditionFailed(err); !ok {
			return "", fmt.Errorf("claim sandbox name %q: %w", name, err)
		}
	}
	return "", fmt.Errorf("claim sandbox name %q: %w", name, ErrConflict)
}

// DirectCreate records a new sandbox (state creating). With a ParentID, the
// parent's child counters are checked and counted in the same transaction:
// at most limits.MaxAlive children alive and limits.PerHour created in the
// parent's current hour-long window (which starts at the first creation
// after the previous window ended). A limit reached is a *LimitError; no
// write happens then.
func (s *Store) DirectCreate(ctx context.Context, d DirectSandbox, limits ChildLimits, now time.Time) error {
	if err := checkID("sandbox id", d.ID); err != nil {
		return err
	}
	if d.Tenant == "" || d.Ledger == "" {
		return fmt.Errorf("sandbox %s: tenant and ledger are required: %w", d.ID, ErrInvalid)
	}
	d.State = DirectCreating
	put := &types.Put{
		TableName: &s.sandboxes, Item: directItem(d),
		ConditionExpression: aws.String("attribute_not_exists(pk)"),
	}
	if d.ParentID == "" {
		_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: put.TableName, Item: put.Item, ConditionExpression: put.ConditionExpression})
		if _, ok := isConditionFailed(err); ok {
			return fmt.Errorf("sandbox %s exists: %w", d.ID, ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("create sandbox %s: %w", d.ID, err)
		}
		return nil
	}
	if limits.MaxAlive < 1 {
		return &LimitError{Limit: "max_children", Max: int64(limits.MaxAlive), Scope: "parent"}
	}
	if limits.PerHour < 1 {
		return &LimitError{Limit: "children_per_hour", Max: int64(limits.PerHour), Scope: "parent", RetryAfter: time.Hour}
	}
	cutoff := now.Add(-time.Hour)
	for attempt := range 6 {
		// Two ways to count a child: within the current window, or
		// opening a new one once the last ended. Exactly one can hold.
		for _, fresh := range []bool{false, true} {
			up := childSlotUpdate(s.sandboxes, d.ParentID, limits, now, cutoff, fresh)
			_, err := s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
				TransactItems: []types.TransactWriteItem{{Put: put}, {Update: up}},
			})
			if err == nil {
				return nil
			}
			reasons, ok := txReasons(err)
			if !ok {
				return fmt.Errorf("create sandbox %s: %w", d.ID, err)
			}
			if len(reasons) == 2 && reasonCode(reasons[0]) == "ConditionalCheckFailed" {
				return fmt.Errorf("sandbox %s exists: %w", d.ID, ErrConflict)
			}
			if txConflict(reasons) {
				break
			}
		}
		// Neither held (or a race): read the counters to say which limit.
		c, err := s.childCounters(ctx, d.ParentID)
		if err != nil {
			return err
		}
		if c.alive >= int64(limits.MaxAlive) {
			return &LimitError{Limit: "max_children", Max: int64(limits.MaxAlive), Scope: "parent"}
		}
		if c.windowStart.After(cutoff) && c.windowCount >= int64(limits.PerHour) {
			return &LimitError{Limit: "children_per_hour", Max: int64(limits.PerHour), Scope: "parent",
				RetryAfter: c.windowStart.Add(time.Hour).Sub(now)}
		}
		if err := backoff(ctx, attempt); err != nil {
			return err
		}
	}
	return fmt.Errorf("create sandbox %s: the parent's counters kept changing: %w", d.ID, ErrConflict)
}

func childSlotUpdate(table, parent string, l ChildLimits, now, cutoff time.Time, fresh bool) *types.Update {
	e := newExpr()
	e.setExpr("alive", "if_not_exists("+e.name("alive")+", "+e.value(avN(0))+") + "+e.value(avN(1)))
	alive := "(attribute_not_exists(" + e.name("alive") + ") OR " + e.name("alive") + " < " + e.value(avN(int64(l.MaxAlive))) + ")"
	e.cond(alive)
	if fresh {
		e.set("window_start", avTime(now))
		e.set("window_count", avN(1))
		e.cond("(attribute_not_exists(" + e.name("window_start") + ") OR " + e.name("window_start") + " <= " + e.value(avTime(cutoff)) + ")")
	} else {
		e.setExpr("window_count", e.name("window_count")+" + "+e.value(avN(1)))
		e.cond(e.name("window_start") + " > " + e.value(avTime(cutoff)))
		e.cond(e.name("window_count") + " < " + e.value(avN(int64(l.PerHour))))
	}
	return &types.Update{
		TableName: aws.String(table), Key: map[string]types.AttributeValue{"pk": avS("dsbxkids#" + parent)},
		UpdateExpression: aws.String(e.updateExpression()), ConditionExpression: e.condition(),
		ExpressionAttributeNames: e.names, ExpressionAttributeValues: e.valuesOrNil(),
	}
}

type childCounters struct {
	alive, windowCount int64
	windowStart        time.Time
}

func (s *Store) childCounters(ctx context.Context, parent string) (childCounters, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &s.sandboxes, ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": avS("dsbxkids#" + parent)},
	})
	if err != nil {
		return childCounters{}, fmt.Errorf("read child counters of %s: %w", parent, err)
	}
	return childCounters{alive: getN(out.Item, "alive"), windowCount: getN(out.Item, "window_count"), windowStart: getTime(out.Item, "window_start")}, nil
}

// DirectChildrenAlive is how many children of parent count as alive.
func (s *Store) DirectChildrenAlive(ctx context.Context, parent string) (int64, error) {
	c, err := s.childCounters(ctx, parent)
	return c.alive, err
}

// DirectGet reads one record; ErrNotFound when there is none.
func (s *Store) DirectGet(ctx context.Context, id string) (DirectSandbox, error) {
	if id == "" {
		return DirectSandbox{}, fmt.Errorf("sandbox %q: %w", id, ErrNotFound)
	}
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.sandboxes, Key: directKey(id), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return DirectSandbox{}, fmt.Errorf("get sandbox %s: %w", id, err)
	}
	if len(out.Item) == 0 {
		return DirectSandbox{}, fmt.Errorf("sandbox %s: %w", id, ErrNotFound)
	}
	return directFromItem(out.Item), nil
}

// DirectRunning records the provider's id and the ports' own URLs once the
// create answered. A record closed meanwhile is ErrConflict.
func (s *Store) DirectRunning(ctx context.Context, id, providerID string, portURLs map[string]string) (DirectSandbox, error) {
	e := newExpr()
	e.set("state", avS(DirectRunning))
	e.set("provider_id", avS(providerID))
	if len(portURLs) > 0 {
		e.set("port_urls", avStrMap(portURLs))
	}
	e.cond(e.name("state") + " = " + e.value(avS(DirectCreating)))
	out, err := s.db.UpdateItem(ctx, e.update(s.sandboxes, directKey(id)))
	if _, ok := isConditionFailed(err); ok {
		return DirectSandbox{}, fmt.Errorf("sandbox %s is no longer being created: %w", id, ErrConflict)
	}
	if err != nil {
		return DirectSandbox{}, fmt.Errorf("sandbox %s running: %w", id, err)
	}
	return directFromItem(out.Attributes), nil
}

// DirectTouch records activity at now (the reaper's idle clock), and, with
// keepAlive later than now, that a background exec keeps the sandbox busy
// until then. Only a live sandbox is touched, and only forward.
func (s *Store) DirectTouch(ctx context.Context, id string, now, keepAlive time.Time) error {
	e := newExpr()
	e.set("last_active", avTime(now))
	e.cond("attribute_exists(pk)")
	e.cond(e.name("state") + " <> " + e.value(avS(DirectTerminated)))
	e.cond(e.name("last_active") + " < " + e.value(avTime(now)))
	if keepAlive.After(now) {
		e.set("keep_alive_until", avTime(keepAlive))
	}
	_, err := s.db.UpdateItem(ctx, e.update(s.sandboxes, directKey(id)))
	if _, ok := isConditionFailed(err); ok {
		return nil
	}
	if err != nil {
		return fmt.Errorf("touch sandbox %s: %w", id, err)
	}
	return nil
}

// DirectEventAdd appends an event; with expiring set, only once (the
// sandbox.expiring event), and false comes back when it was there already.
func (s *Store) DirectEventAdd(ctx context.Context, id string, ev DirectEvent, expiring bool) (bool, error) {
	e := newExpr()
	e.setExpr("events", "list_append(if_not_exists("+e.name("events")+", "+e.value(&types.AttributeValueMemberL{})+"), "+
		e.value(&types.AttributeValueMemberL{Value: []types.AttributeValue{eventAV(ev)}})+")")
	e.cond("attribute_exists(pk)")
	if expiring {
		e.set("expiring", avBool(true))
		e.cond("attribute_not_exists(" + e.name("expiring") + ")")
	}
	_, err := s.db.UpdateItem(ctx, e.update(s.sandboxes, directKey(id)))
	if _, ok := isConditionFailed(err); ok {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("sandbox %s event: %w", id, err)
	}
	return true, nil
}

// DirectClose marks the sandbox terminated with an event; for a child, the
// parent's alive count drops in the same transaction, so a child is
// counted out exactly once. Closing a closed record is a no-op returning
// false.
func (s *Store) DirectClose(ctx context.Context, id, reason string, event DirectEvent) (bool, error) {
	d, err := s.DirectGet(ctx, id)
	if err != nil {
		return false, err
	}
	if d.State == DirectTerminated {
		return false, nil
	}
	now := s.now()
	e := newExpr()
	e.set("state", avS(DirectTerminated))
	e.set("reason", avS(truncate(reason, 1024)))
	e.set("terminated_at", avTime(now))
	e.set("expires_at", s.expiry(now))
	e.setExpr("events", "list_append(if_not_exists("+e.name("events")+", "+e.value(&types.AttributeValueMemberL{})+"), "+
		e.value(&types.AttributeValueMemberL{Value: []types.AttributeValue{eventAV(event)}})+")")
	e.remove("live_shard")
	e.cond(e.name("state") + " <> " + e.value(avS(DirectTerminated)))
	items := []types.TransactWriteItem{{Update: &types.Update{
		TableName: &s.sandboxes, Key: directKey(id), UpdateExpression: aws.String(e.updateExpression()),
		ConditionExpression: e.condition(), ExpressionAttributeNames: e.names, ExpressionAttributeValues: e.valuesOrNil(),
	}}}
	if d.ParentID != "" {
		items = append(items, types.TransactWriteItem{Update: &types.Update{
			TableName: &s.sandboxes, Key: map[string]types.AttributeValue{"pk": avS("dsbxkids#" + d.ParentID)},
			UpdateExpression:          aws.String("SET alive = alive - :one"),
			ConditionExpression:       aws.String("alive >= :one"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": avN(1)},
		}})
	}
	for attempt := 0; ; attempt++ {
		_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		if err == nil {
			return true, nil
		}
		reasons, ok := txReasons(err)
		if !ok {
			return false, fmt.Errorf("close sandbox %s: %w", id, err)
		}
		if reasonCode(reasons[0]) == "ConditionalCheckFailed" {
			return false, nil
		}
		if len(reasons) > 1 && reasonCode(reasons[1]) == "ConditionalCheckFailed" {
			// The counter is already at zero (it never counted this one):
			// close the record alone.
			items = items[:1]
			continue
		}
		if !txConflict(reasons) || attempt >= 8 {
			return false, fmt.Errorf("close sandbox %s: %w", id, err)
		}
		if err := backoff(ctx, attempt); err != nil {
			return false, err
		}
	}
}

// DirectPage is a page of a tenant's sandboxes, newest first.
type DirectPage struct {
	Sandboxes []DirectSandbox
	Next      *ListPosition
}

// DirectList returns a page of a tenant's sandboxes (terminated ones too,
// until they expire), newest first, from an index (eventually consistent).
func (s *Store) DirectList(ctx context.Context, tenant string, q ListQuery) (DirectPage, error) {
	if q.Limit < 1 || q.Limit > MaxListPage {
		return DirectPage{}, fmt.Errorf("limit %d is not 1 to %d: %w", q.Limit, MaxListPage, ErrInvalid)
	}
	in := &dynamodb.QueryInput{
		TableName: &s.sandboxes, IndexName: aws.String(ledgerOwnerIndex),
		KeyConditionExpression:    aws.String("#o = :o"),
		ExpressionAttributeNames:  map[string]string{"#o": "owner"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":o": avS(directOwner(tenant))},
		ScanIndexForward:          aws.Bool(false),
		Limit:                     aws.Int32(int32(q.Limit + 1)),
	}
	if q.After != nil {
		in.ExclusiveStartKey = map[string]types.AttributeValue{
			"pk": avS("dsbx#" + q.After.Key), "owner": avS(directOwner(tenant)), "created_at": avTime(q.After.CreatedAt),
		}
	}
	out, err := s.db.Query(ctx, in)
	if err != nil {
		return DirectPage{}, fmt.Errorf("list sandboxes of %s: %w", tenant, err)
	}
	var page DirectPage
	for _, it := range out.Items {
		if len(page.Sandboxes) == q.Limit {
			last := page.Sandboxes[len(page.Sandboxes)-1]
			page.Next = &ListPosition{CreatedAt: last.CreatedAt, Key: last.ID}
			break
		}
		page.Sandboxes = append(page.Sandboxes, directFromItem(it))
	}
	return page, nil
}

// DirectListLive returns every live (creating or running) direct sandbox,
// from an index (eventually consistent): the reaper's view.
func (s *Store) DirectListLive(ctx context.Context) ([]DirectSandbox, error) {
	items, err := s.queryShards(ctx, shardQuery{
		table: s.sandboxes, index: ledgerLiveIndex, keyAttr: "live_shard", rangeAttr: "deadline",
		rangeCond: "#r > :zero", values: map[string]types.AttributeValue{":zero": avN(0)},
	}, "dsbx")
	if err != nil {
		return nil, fmt.Errorf("list live sandboxes: %w", err)
	}
	out := make([]DirectSandbox, len(items))
	for i, it := range items {
		out[i] = directFromItem(it)
	}
	return out, nil
}
