package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The usage of sandboxes no job accounts for (sessions', direct
// sandboxes') is kept in usage items of the sandboxes table, one per
// ledger entry, written when the entry closes: its time, its bytes out
// where measured, its execs. A job's sandboxes (a research job's own, an
// agent run's sandbox and its children: LedgerEntry.Job) are counted in
// the job's own usage records instead (its cleanup), so they have none.
//
// An item's key starts with '#', which no sandbox name does, and it
// carries none of the ledger's index attributes ("owner", "live_shard"),
// so the ledger never sees it. GET /v1/usage finds a tenant's items by
// the sparse index by-tenant-usage: the partition key is
// "<tenant>#<0..15>" from the sandbox name's hash, so no tenant's busy day
// is one partition, and the sort key is when the sandbox started.

const sandboxUsageIndex = "by-tenant-usage"

// SandboxUsage is the sandbox time of one closed ledger entry.
type SandboxUsage struct {
	// Name is the ledger entry's name.
	Name string
	// OwnerKind is the kind of the entry's owner ("session", "tenant",
	// "sandbox"), which GET /v1/usage groups by.
	OwnerKind string
	Tenant    string
	Provider  string
	MemoryMB  int
	// RunningAt and TerminatedAt are the ledger's: the sandbox counts
	// from when its create was confirmed to when it was terminated.
	RunningAt    time.Time
	TerminatedAt time.Time
	// BytesOut is the ledger entry's (nil: not measured).
	BytesOut *int64
	// Execs counts the commands run in it.
	Execs int64
}

// Seconds is the sandbox time the record counts.
func (u SandboxUsage) Seconds() float64 {
	if s := u.TerminatedAt.Sub(u.RunningAt).Seconds(); s > 0 {
		return s
	}
	return 0
}

// Usage is the record as a Usage.
func (u SandboxUsage) Usage() Usage {
	out := Usage{SandboxSeconds: map[string]float64{SandboxSize(u.Provider, u.MemoryMB): u.Seconds()}, Execs: u.Execs}
	if u.BytesOut != nil {
		out.BytesOut = map[string]int64{u.Provider: *u.BytesOut}
	}
	return out
}

// EntryUsage is what a ledger entry counts: its time from running to
// terminated (to now while live), its bytes out where measured, its
// execs. An entry whose create was never confirmed counts its execs only.
func EntryUsage(e LedgerEntry, now time.Time) Usage {
	u := Usage{Execs: e.Execs}
	if !e.RunningAt.IsZero() {
		end := e.TerminatedAt
		if end.IsZero() {
			end = now
		}
		if secs := end.Sub(e.RunningAt).Seconds(); secs > 0 {
			u.SandboxSeconds = map[string]float64{SandboxSize(e.Provider, e.MemoryMB): secs}
		}
	}
	if e.BytesOut != nil {
		u.BytesOut = map[string]int64{e.Provider: *e.BytesOut}
	}
	return u
}

// sandboxUsageKey is keyed by the ledger entry: its name and when it ran,
// since a name whose entry closed may start a new entry (a session's
// sandbox made again).
func sandboxUsageKey(name string, runningAt time.Time) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": avS("#usage#" + name + "#" + strconv.FormatInt(runningAt.UnixMilli(), 10))}
}

// PutSandboxUsage records the sandbox time of a closed ledger entry.
// Writing the same entry's record again replaces it with the same values,
// so a retried release or a reaper pass that closes the entry again
// counts it once.
func (s *Store) PutSandboxUsage(ctx context.Context, u SandboxUsage) error {
	if err := checkID("sandbox name", u.Name); err != nil {
		return err
	}
	if u.Tenant == "" || u.Provider == "" || u.RunningAt.IsZero() || u.TerminatedAt.IsZero() {
		return fmt.Errorf("sandbox usage %s: tenant, provider, running and terminated times are required: %w", u.Name, ErrInvalid)
	}
	item := sandboxUsageKey(u.Name, u.RunningAt)
	item["usage_shard"] = avS(shardKey(u.Tenant, u.Name))
	item["usage_at"] = avTime(u.RunningAt)
	item["name"] = avS(u.Name)
	item["owner_kind"] = avS(u.OwnerKind)
	item["tenant"] = avS(u.Tenant)
	item["provider"] = avS(u.Provider)
	item["memory_mb"] = avN(int64(u.MemoryMB))
	item["terminated_at"] = avTime(u.TerminatedAt)
	item["expires_at"] = s.expiry(u.TerminatedAt)
	if u.BytesOut != nil {
		item["bytes_out"] = avN(*u.BytesOut)
	}
	if u.Execs > 0 {
		item["execs"] = avN(u.Execs)
	}
	if _, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.sandboxes, Item: item}); err != nil {
		return fmt.Errorf("record the usage of sandbox %s: %w", u.Name, err)
	}
	return nil
}

// MaxSandboxUsages is the most records one TenantSandboxUsageBetween reads.
const MaxSandboxUsages = 20000

// TenantSandboxUsageBetween returns the usage records of the tenant's
// sandboxes that started in [from, to), oldest first, at most max (0:
// MaxSandboxUsages); truncated says more were there. It queries each shard
// of the index by its sort key (eventually consistent: a sandbox closed a
// moment ago may be missing).
func (s *Store) TenantSandboxUsageBetween(ctx context.Context, tenant string, from, to time.Time, max int) (recs []SandboxUsage, truncated bool, err error) {
	if tenant == "" {
		return nil, false, fmt.Errorf("tenant is empty: %w", ErrInvalid)
	}
	if max <= 0 || max > MaxSandboxUsages {
		max = MaxSandboxUsages
	}
	items, err := s.queryShards(ctx, shardQuery{
		table: s.sandboxes, index: sandboxUsageIndex,
		keyAttr: "usage_shard", rangeAttr: "usage_at", rangeCond: "#r BETWEEN :from AND :to",
		values: map[string]types.AttributeValue{":from": avTime(from), ":to": avN(to.UnixMilli() - 1)},
		limit:  max + 1,
	}, tenant)
	if err != nil {
		return nil, false, fmt.Errorf("sandbox usage of %s: %w", tenant, err)
	}
	if len(items) > max {
		items, truncated = items[:max], true
	}
	for _, it := range items {
		recs = append(recs, SandboxUsage{
			Name: getS(it, "name"), OwnerKind: getS(it, "owner_kind"), Tenant: getS(it, "tenant"),
			Provider: getS(it, "provider"), MemoryMB: int(getN(it, "memory_mb")),
			RunningAt: getTime(it, "usage_at"), TerminatedAt: getTime(it, "terminated_at"),
			BytesOut: getOptN(it, "bytes_out"), Execs: getN(it, "execs"),
		})
	}
	return recs, truncated, nil
}
