package store

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// A tenant's jobs and sessions are listed, newest first, from the by-tenant
// index of their table (see template.yaml). Only the job record and the
// session record carry gsi_tenant, so the index is sparse: a job's events,
// sources and report, and a session's runs and events, are never in it.
const (
	tenantIndex     = "by-tenant"
	tenantIndexAttr = "gsi_tenant"
)

// MaxListPage is the most items one List call returns.
const MaxListPage = 100

// listExamineLimit is the default ListQuery.MaxExamined: a rare status in
// a long history costs a bounded read per page.
const listExamineLimit = 10 * MaxListPage

// ListPosition is a place in a tenant's listing: the item listed last.
// Listing after it continues with the next older item.
type ListPosition struct {
	// CreatedAt is the item's creation time (milliseconds, as stored).
	CreatedAt time.Time
	// Key is the item's internal key (a job's or session's ID).
	Key string
}

// ListQuery asks for one page of a tenant's items.
type ListQuery struct {
	// Limit is the page size, 1 to MaxListPage.
	Limit int
	// After continues a listing after that item; nil starts at the newest.
	After *ListPosition
	// MaxExamined bounds how many items a filtered listing reads for one
	// page (default 1000): past it, the page is shorter than Limit, and
	// Next goes on after the last item read.
	MaxExamined int
}

// JobPage is a page of a tenant's jobs, newest first. The listing index
// holds a summary of each job: its Steps are all pending, and UpdatedAt,
// Version and LastEventSeq are zero (read the job for those).
type JobPage struct {
	Jobs []Job
	// Next continues the listing; nil when nothing older is left.
	Next *ListPosition
}

// ListTenantJobs returns a page of the tenant's jobs, newest first; keep, when
// not nil, filters them (the page is filled with jobs it keeps). The index
// is eventually consistent: a job created a moment ago may be missing.
func (s *Store) ListTenantJobs(ctx context.Context, tenant string, q ListQuery, keep func(Job) bool) (JobPage, error) {
	items, next, err := s.listByTenant(ctx, s.jobs, tenant, q, s.records(s.jobs, jobKey),
		func(p ListPosition) map[string]types.AttributeValue {
			k := jobKey(p.Key)
			k[tenantIndexAttr], k["created_at"] = avS(tenant), avTime(p.CreatedAt)
			return k
		},
		filter(keep, jobFromItem))
	if err != nil {
		return JobPage{}, fmt.Errorf("list jobs of %s: %w", tenant, err)
	}
	page := JobPage{Jobs: make([]Job, len(items)), Next: next}
	for i, it := range items {
		page.Jobs[i] = jobFromItem(it)
	}
	return page, nil
}

// SessionPage is a page of a tenant's sessions, newest first.
type SessionPage struct {
	Sessions []Session
	// Next continues the listing; nil when nothing older is left.
	Next *ListPosition
}

// ListTenantSessions returns a page of the tenant's sessions (deleted ones
// included until they expire), newest first; keep, when not nil, filters
// them. The index is eventually consistent.
func (s *Store) ListTenantSessions(ctx context.Context, tenant string, q ListQuery, keep func(Session) bool) (SessionPage, error) {
	items, next, err := s.listByTenant(ctx, s.sessions, tenant, q, s.records(s.sessions, sessionKey),
		func(p ListPosition) map[string]types.AttributeValue {
			k := sessionKey(p.Key)
			k[tenantIndexAttr], k["created_at"] = avS(tenant), avTime(p.CreatedAt)
			return k
		},
		filter(keep, sessionFromItem))
	if err != nil {
		return SessionPage{}, fmt.Errorf("list sessions of %s: %w", tenant, err)
	}
	page := SessionPage{Sessions: make([]Session, len(items)), Next: next}
	for i, it := range items {
		page.Sessions[i] = sessionFromItem(it)
	}
	return page, nil
}

// filter turns a filter on records into one on items; nil stays nil.
func filter[T any](keep func(T) bool, decode func(map[string]types.AttributeValue) T) func(map[string]types.AttributeValue) bool {
	if keep == nil {
		return nil
	}
	return func(item map[string]types.AttributeValue) bool { return keep(decode(item)) }
}

// listByTenant queries the by-tenant index of table backwards from q.After
// and collects up to q.Limit items that keep (nil: all) accepts. It reads
// one item more than it returns, so that Next is nil exactly when nothing
// is left (no empty last page). Filtering, it reads in larger batches and
// stops early after listExamineLimit items.
func (s *Store) listByTenant(ctx context.Context, table, tenant string, q ListQuery,
	hydrate func(context.Context, []map[string]types.AttributeValue) ([]map[string]types.AttributeValue, error),
	startKey func(ListPosition) map[string]types.AttributeValue,
	keep func(map[string]types.AttributeValue) bool,
) ([]map[string]types.AttributeValue, *ListPosition, error) {
	if tenant == "" {
		return nil, nil, fmt.Errorf("tenant is empty: %w", ErrInvalid)
	}
	if q.Limit < 1 || q.Limit > MaxListPage {
		return nil, nil, fmt.Errorf("limit %d is not 1 to %d: %w", q.Limit, MaxListPage, ErrInvalid)
	}
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(table),
		IndexName:                 aws.String(tenantIndex),
		KeyConditionExpression:    aws.String("#t = :t"),
		ExpressionAttributeNames:  map[string]string{"#t": tenantIndexAttr},
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": avS(tenant)},
		ScanIndexForward:          aws.Bool(false),
	}
	batch, budget := q.Limit+1, q.MaxExamined
	if keep != nil {
		batch = max(batch, MaxListPage)
		if budget <= 0 {
			budget = listExamineLimit
		}
	}
	if q.After != nil {
		if err := checkID("list position", q.After.Key); err != nil {
			return nil, nil, err
		}
		in.ExclusiveStartKey = startKey(*q.After)
	}
	var kept []map[string]types.AttributeValue
	var last map[string]types.AttributeValue // the last item examined
	examined := 0
	for {
		n := batch
		if keep != nil {
			n = min(n, budget-examined)
		}
		in.Limit = aws.Int32(int32(n))
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, nil, err
		}
		items := out.Items
		if hydrate != nil {
			if items, err = hydrate(ctx, items); err != nil {
				return nil, nil, err
			}
		}
		for _, it := range items {
			examined++
			last = it
			if keep != nil && !keep(it) {
				continue
			}
			if len(kept) == q.Limit {
				// One more than asked: there is a next page, and it
				// starts after the last item returned.
				return kept, position(kept[len(kept)-1]), nil
			}
			kept = append(kept, it)
		}
		if len(out.LastEvaluatedKey) == 0 {
			return kept, nil, nil
		}
		if keep != nil && examined >= budget {
			// A short page: the listing goes on after the last item
			// looked at, kept or not.
			return kept, position(last), nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// records returns what reads the whole records a page of a by-tenant index
// names, in the index's order. The indexes hold keys only: a job's progress
// and a session's runs rewrite their records many times, and an index
// holding the records would put all of a tenant's activity on the tenant's
// one index partition (TestIndexesHaveNoHotKey); a listing reads its page's
// records with BatchGetItem instead. An item deleted since the index was
// read is left out.
func (s *Store) records(table string, key func(string) map[string]types.AttributeValue) func(context.Context, []map[string]types.AttributeValue) ([]map[string]types.AttributeValue, error) {
	return func(ctx context.Context, keys []map[string]types.AttributeValue) ([]map[string]types.AttributeValue, error) {
		got := make(map[string]map[string]types.AttributeValue, len(keys))
		for start := 0; start < len(keys); start += 100 {
			batch := make([]map[string]types.AttributeValue, 0, 100)
			for _, k := range keys[start:min(start+100, len(keys))] {
				batch = append(batch, key(getS(k, "pk")))
			}
			req := map[string]types.KeysAndAttributes{table: {Keys: batch}}
			for tries := 0; len(req) > 0; tries++ {
				if tries == 10 {
					return nil, fmt.Errorf("read %s: DynamoDB left keys unprocessed 10 times", table)
				}
				if tries > 0 {
					if err := backoff(ctx, tries); err != nil {
						return nil, err
					}
				}
				out, err := s.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
				if err != nil {
					return nil, fmt.Errorf("read %s: %w", table, err)
				}
				for _, it := range out.Responses[table] {
					got[getS(it, "pk")] = it
				}
				req = out.UnprocessedKeys
			}
		}
		items := make([]map[string]types.AttributeValue, 0, len(keys))
		for _, k := range keys {
			if it, ok := got[getS(k, "pk")]; ok && getS(it, tenantIndexAttr) != "" {
				items = append(items, it)
			}
		}
		return items, nil
	}
}

func position(item map[string]types.AttributeValue) *ListPosition {
	return &ListPosition{CreatedAt: getTime(item, "created_at"), Key: getS(item, "pk")}
}
