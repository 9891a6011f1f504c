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

// Tenant quotas are items of the sandboxes table, which every function that
// acquires a sandbox or submits a job can already write. Their keys start
// with '#', which no sandbox name (package ids: letters, digits, '.', '_',
// '-') does, and they carry none of the ledger's index attributes, so the
// ledger never sees them.
//
// A concurrency quota is one item per tenant and limit whose "holders" map
// names what holds a slot (a job key, a sandbox name) with when it took it.
// Taking a slot is one conditional update: the map has fewer entries than
// the limit and not this holder; giving it back removes the holder. Both
// are idempotent, so a retried Lambda neither takes two slots nor frees
// another's, and a crash that loses a release leaves a holder Reconcile can
// check against the job or the ledger. A rate quota is a fixed-window
// counter item per tenant, limit and window, expiring after it.
//
// The quota items of a busy tenant are single items by design: a limit is
// only exact where one conditional write decides it. docs/capacity.md has
// the figures (each holds at most MaxSlots holders).

// MaxSlots is the largest concurrency limit a quota item holds: at about
// 150 bytes a holder it stays far below DynamoDB's 400 KB item limit, and a
// write of it costs at most about 300 write units.
const MaxSlots = 2000

// quotaRegistryShards spread the registry of tenants with quota items, which
// Reconcile reads to find them without a scan.
const quotaRegistryShards = 16

func slotKey(tenant, limit string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": avS("#quota#" + tenant + "#" + limit)}
}

func windowKey(tenant, limit string, start time.Time) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": avS("#quota#" + tenant + "#" + limit + "#" + strconv.FormatInt(start.Unix(), 10))}
}

func registryKey(tenant string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": avS("#quotas#" + strconv.Itoa(shardOf(tenant)%quotaRegistryShards))}
}

// AcquireSlot takes holder's slot of the tenant's concurrency limit, of
// which there are max. Taking a slot holder already has succeeds. When all
// are taken it returns a *LimitError (scope "tenant", no RetryAfter: a
// release frees one).
func (s *Store) AcquireSlot(ctx context.Context, tenant, limit string, max int64, holder string) error {
	_, err := s.TakeSlot(ctx, tenant, limit, max, holder)
	return err
}

// TakeSlot is AcquireSlot, also saying whether this call took the slot
// (false: holder had it already), so that a caller undoing its admission
// gives back only what it took.
func (s *Store) TakeSlot(ctx context.Context, tenant, limit string, max int64, holder string) (taken bool, err error) {
	if tenant == "" || limit == "" || holder == "" {
		return false, fmt.Errorf("acquire slot: tenant, limit and holder are required: %w", ErrInvalid)
	}
	if max <= 0 || max > MaxSlots {
		return false, fmt.Errorf("acquire slot %s: limit %d is not 1 to %d: %w", limit, max, MaxSlots, ErrInvalid)
	}
	for attempt := 0; ; attempt++ {
		now := s.now()
		e := newExpr()
		e.setPath(e.name("holders")+"."+e.name(holder), avTime(now))
		e.set("updated_at", avTime(now))
		e.cond("attribute_exists(" + e.name("holders") + ")")
		e.cond("size(" + e.name("holders") + ") < " + e.value(avN(max)))
		e.cond("attribute_not_exists(" + e.name("holders") + "." + e.name(holder) + ")")
		_, err := s.db.UpdateItem(ctx, e.update(s.sandboxes, slotKey(tenant, limit)))
		if err == nil {
			return true, nil
		}
		old, ok := isConditionFailed(err)
		if !ok {
			return false, fmt.Errorf("acquire %s slot of %s: %w", limit, tenant, err)
		}
		if len(old) == 0 {
			if old, err = s.getItem(ctx, s.sandboxes, slotKey(tenant, limit)); err != nil && !errors.Is(err, ErrNotFound) {
				return false, err
			}
		}
		holders, exists := old["holders"].(*types.AttributeValueMemberM)
		switch {
		case exists && holders.Value[holder] != nil:
			return false, nil // a retry: the slot is already this holder's
		case exists:
			return false, &LimitError{Limit: limit, Max: max, Scope: "tenant"}
		}
		// The tenant's first slot: make the item, then take it as above.
		if err := s.createSlotItem(ctx, tenant, limit); err != nil {
			return false, err
		}
		if attempt >= 3 {
			return false, fmt.Errorf("acquire %s slot of %s: the quota item keeps changing: %w", limit, tenant, ErrConflict)
		}
	}
}

func (s *Store) createSlotItem(ctx context.Context, tenant, limit string) error {
	item := slotKey(tenant, limit)
	item["tenant"] = avS(tenant)
	item["limit"] = avS(limit)
	item["holders"] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}
	item["updated_at"] = avTime(s.now())
	_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &s.sandboxes, Item: item, ConditionExpression: aws.String("attribute_not_exists(pk)"),
	})
	if _, lost := isConditionFailed(err); err != nil && !lost {
		return fmt.Errorf("create %s quota of %s: %w", limit, tenant, err)
	}
	// Registered so that Reconcile finds the tenant without a scan.
	_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &s.sandboxes,
		Key:                       registryKey(tenant),
		UpdateExpression:          aws.String("ADD tenants :t"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": &types.AttributeValueMemberSS{Value: []string{tenant}}},
	})
	if err != nil {
		return fmt.Errorf("register the quotas of %s: %w", tenant, err)
	}
	return nil
}

// ReleaseSlot gives holder's slot back; releasing a slot not held is a
// no-op.
func (s *Store) ReleaseSlot(ctx context.Context, tenant, limit, holder string) error {
	if tenant == "" || holder == "" {
		return nil
	}
	e := newExpr()
	e.removes = append(e.removes, e.name("holders")+"."+e.name(holder))
	e.set("updated_at", avTime(s.now()))
	e.cond("attribute_exists(" + e.name("holders") + "." + e.name(holder) + ")")
	_, err := s.db.UpdateItem(ctx, e.update(s.sandboxes, slotKey(tenant, limit)))
	if _, notHeld := isConditionFailed(err); err != nil && !notHeld {
		return fmt.Errorf("release %s slot of %s: %w", limit, tenant, err)
	}
	return nil
}

// SlotHolders returns who holds the tenant's slots of limit, with when each
// took it (strongly consistent).
func (s *Store) SlotHolders(ctx context.Context, tenant, limit string) (map[string]time.Time, error) {
	item, err := s.getItem(ctx, s.sandboxes, slotKey(tenant, limit))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	out := map[string]time.Time{}
	if m, ok := item["holders"].(*types.AttributeValueMemberM); ok {
		for h := range m.Value {
			out[h] = getTime(m.Value, h)
		}
	}
	return out, nil
}

// CountInWindow counts one event against a rate limit of max per window
// (fixed windows aligned to the Unix epoch). Past the limit it counts
// nothing and returns a *LimitError whose RetryAfter is the window's end.
func (s *Store) CountInWindow(ctx context.Context, tenant, limit string, max int64, window time.Duration) error {
	if max <= 0 || window <= 0 {
		return fmt.Errorf("count %s: limit %d per %s: %w", limit, max, window, ErrInvalid)
	}
	now := s.now()
	start := now.Truncate(window)
	e := newExpr()
	e.add("n", avN(1))
	e.set("expires_at", avN(start.Add(2*window).Unix()))
	e.cond("(attribute_not_exists(" + e.name("n") + ") OR " + e.name("n") + " < " + e.value(avN(max)) + ")")
	_, err := s.db.UpdateItem(ctx, e.update(s.sandboxes, windowKey(tenant, limit, start)))
	if _, full := isConditionFailed(err); full {
		return &LimitError{Limit: limit, Max: max, Scope: "tenant", RetryAfter: start.Add(window).Sub(now)}
	}
	if err != nil {
		return fmt.Errorf("count %s of %s: %w", limit, tenant, err)
	}
	return nil
}

// QuotaTenants returns every tenant that has had a concurrency slot.
func (s *Store) QuotaTenants(ctx context.Context) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for n := range quotaRegistryShards {
		item, err := s.getItem(ctx, s.sandboxes, map[string]types.AttributeValue{"pk": avS("#quotas#" + strconv.Itoa(n))})
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if ss, ok := item["tenants"].(*types.AttributeValueMemberSS); ok {
			for _, t := range ss.Value {
				if !seen[t] {
					seen[t] = true
					out = append(out, t)
				}
			}
		}
	}
	return out, nil
}

// getItem reads an item strongly consistently; an absent one is an empty
// item with ErrNotFound.
func (s *Store) getItem(ctx context.Context, table string, key map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", getS(key, "pk"), err)
	}
	if len(out.Item) == 0 {
		return map[string]types.AttributeValue{}, fmt.Errorf("%s: %w", getS(key, "pk"), ErrNotFound)
	}
	return out.Item, nil
}

// Tenant spending, for the daily and monthly cost budgets of [quotas]: one
// counter item per tenant and day and per tenant and month, in millionths
// of the [pricing] currency.

func spendKey(tenant, period string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": avS("#spend#" + tenant + "#" + period)}
}

func spendPeriods(t time.Time) (day, month string) {
	t = t.UTC()
	return t.Format(time.DateOnly), t.Format("2006-01")
}

// AddTenantSpend adds what a job cost (in millionths) to its tenant's
// spending of the day and month of at, once per job: the job record is
// marked in the same transaction, so a Cleanup that runs again adds
// nothing.
func (s *Store) AddTenantSpend(ctx context.Context, jobID, tenant string, micros int64, at time.Time) error {
	if micros <= 0 {
		return nil
	}
	day, month := spendPeriods(at)
	update := func(period string, ttl time.Duration) types.TransactWriteItem {
		return types.TransactWriteItem{Update: &types.Update{
			TableName:                 &s.sandboxes,
			Key:                       spendKey(tenant, period),
			UpdateExpression:          aws.String("ADD micros :m SET expires_at = :x, tenant = :t"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":m": avN(micros), ":x": avN(at.Add(ttl).Unix()), ":t": avS(tenant)},
		}}
	}
	_, err := s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Update: &types.Update{
			TableName:                 &s.jobs,
			Key:                       jobKey(jobID),
			UpdateExpression:          aws.String("SET spend_counted = :m"),
			ConditionExpression:       aws.String("attribute_exists(pk) AND attribute_not_exists(spend_counted)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":m": avN(micros)},
		}},
		update(day, 3*24*time.Hour),
		update(month, 63*24*time.Hour),
	}})
	if reasons, ok := txReasons(err); ok && len(reasons) > 0 && reasonCode(reasons[0]) == "ConditionalCheckFailed" {
		return nil // counted already (or the job is gone)
	}
	if err != nil {
		return fmt.Errorf("count the spending of job %s: %w", jobID, err)
	}
	return nil
}

// TenantSpend returns what the tenant spent (in millionths) on the day and
// in the month of at.
func (s *Store) TenantSpend(ctx context.Context, tenant string, at time.Time) (day, month int64, err error) {
	d, m := spendPeriods(at)
	for _, p := range []struct {
		period string
		into   *int64
	}{{d, &day}, {m, &month}} {
		item, err := s.getItem(ctx, s.sandboxes, spendKey(tenant, p.period))
		if err != nil && !errors.Is(err, ErrNotFound) {
			return 0, 0, err
		}
		*p.into = getN(item, "micros")
	}
	return day, month, nil
}
