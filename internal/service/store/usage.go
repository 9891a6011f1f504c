package store

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Usage is what some work consumed: one phase invocation's record, or the
// sum of a job's records. Zero fields are absent.
type Usage struct {
	// SandboxSeconds are seconds of sandbox life by SandboxSize.Key
	// ("<provider>/<memory MB>"), from the ledger's create and terminate
	// times.
	SandboxSeconds map[string]float64 `json:"sandbox_seconds,omitempty"`
	// Execs counts commands run in sandboxes.
	Execs int64 `json:"execs,omitempty"`
	// Tokens are model tokens by model name.
	Tokens map[string]TokenCount `json:"tokens,omitempty"`
	// SearchCalls count web search calls by backend.
	SearchCalls map[string]int64 `json:"search_calls,omitempty"`
	// PagesCrawled counts the pages the crawler fetched.
	PagesCrawled int64 `json:"pages_crawled,omitempty"`
	// BytesOut is what sandboxes sent to the network, by provider, as the
	// provider measured it; a provider that does not count traffic has
	// no entry (not a zero).
	BytesOut map[string]int64 `json:"bytes_out,omitempty"`
	// AgentRuns counts agent runs.
	AgentRuns int64 `json:"agent_runs,omitempty"`
}

// TokenCount is one model's tokens.
type TokenCount struct {
	// Input counts the input tokens read afresh; CacheRead and CacheWrite
	// the input tokens read from and written to the model's prompt cache,
	// where its API reports them apart (Anthropic's), priced apart.
	Input      int64 `json:"input"`
	Output     int64 `json:"output"`
	CacheRead  int64 `json:"cache_read,omitempty"`
	CacheWrite int64 `json:"cache_write,omitempty"`
	// Estimated: some of the count was estimated from the text (a server
	// that reports no usage), not reported by the model's API.
	Estimated bool `json:"estimated,omitempty"`
}

// SandboxSize is a SandboxSeconds key: the provider and the memory size.
func SandboxSize(provider string, memoryMB int) string {
	return provider + "/" + strconv.Itoa(memoryMB)
}

// ParseSandboxSize reads a SandboxSeconds key.
func ParseSandboxSize(key string) (provider string, memoryMB int) {
	provider, mb, _ := strings.Cut(key, "/")
	memoryMB, _ = strconv.Atoi(mb)
	return provider, memoryMB
}

// Add adds o to u.
func (u *Usage) Add(o Usage) {
	for k, v := range o.SandboxSeconds {
		if u.SandboxSeconds == nil {
			u.SandboxSeconds = map[string]float64{}
		}
		u.SandboxSeconds[k] += v
	}
	u.Execs += o.Execs
	for k, v := range o.Tokens {
		if u.Tokens == nil {
			u.Tokens = map[string]TokenCount{}
		}
		t := u.Tokens[k]
		t.Input += v.Input
		t.Output += v.Output
		t.CacheRead += v.CacheRead
		t.CacheWrite += v.CacheWrite
		t.Estimated = t.Estimated || v.Estimated
		u.Tokens[k] = t
	}
	for k, v := range o.SearchCalls {
		if u.SearchCalls == nil {
			u.SearchCalls = map[string]int64{}
		}
		u.SearchCalls[k] += v
	}
	u.PagesCrawled += o.PagesCrawled
	for k, v := range o.BytesOut {
		if u.BytesOut == nil {
			u.BytesOut = map[string]int64{}
		}
		u.BytesOut[k] += v
	}
	u.AgentRuns += o.AgentRuns
}

// TotalTokens is every model's input (cached too) and output tokens.
func (u Usage) TotalTokens() int64 {
	var n int64
	for _, t := range u.Tokens {
		n += t.Input + t.Output + t.CacheRead + t.CacheWrite
	}
	return n
}

// TotalBytesOut is every provider's bytes out; ok is false when no
// sandbox's traffic was measured.
func (u Usage) TotalBytesOut() (n int64, ok bool) {
	for _, v := range u.BytesOut {
		n += v
	}
	return n, len(u.BytesOut) > 0
}

// TotalSandboxSeconds is every size's sandbox seconds.
func (u Usage) TotalSandboxSeconds() float64 {
	var n float64
	for _, k := range slices.Sorted(maps.Keys(u.SandboxSeconds)) {
		n += u.SandboxSeconds[k]
	}
	return n
}

// IsZero reports whether nothing was used.
func (u Usage) IsZero() bool {
	return len(u.SandboxSeconds) == 0 && u.Execs == 0 && len(u.Tokens) == 0 && len(u.SearchCalls) == 0 && u.PagesCrawled == 0 &&
		len(u.BytesOut) == 0 && u.AgentRuns == 0
}

const skUsagePrefix = "USAGE#"

// PutUsage records what one unit of a job's work used, under key: one
// phase invocation ("discover", "crawl:<offset>", "sandbox:<name>"...).
// Writing a key again replaces its record, so an invocation Lambda
// delivers twice, or a phase the state machine retries, counts once.
func (s *Store) PutUsage(ctx context.Context, jobID, key string, u Usage) error {
	if err := checkID("usage key", key); err != nil {
		return err
	}
	data, err := json.Marshal(u)
	if err != nil {
		return fmt.Errorf("encode usage: %w", err)
	}
	now := s.now()
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &s.jobs,
		Item: map[string]types.AttributeValue{
			"pk": avS(jobID), "sk": avS(skUsagePrefix + key),
			"usage": avS(string(data)), "updated_at": avTime(now), "expires_at": s.expiry(now),
		},
	})
	if err != nil {
		return fmt.Errorf("record usage %s of job %s: %w", key, jobID, err)
	}
	return nil
}

// JobUsage sums the job's usage records (strongly consistent): what it has
// used so far.
func (s *Store) JobUsage(ctx context.Context, jobID string) (Usage, error) {
	recs, err := s.JobUsageRecords(ctx, jobID)
	if err != nil {
		return Usage{}, err
	}
	var total Usage
	for _, u := range recs {
		total.Add(u)
	}
	return total, nil
}

// JobUsageRecords returns the job's usage records by key (strongly
// consistent).
func (s *Store) JobUsageRecords(ctx context.Context, jobID string) (map[string]Usage, error) {
	items, err := s.queryPrefix(ctx, jobID, skUsagePrefix)
	if err != nil {
		return nil, fmt.Errorf("usage of job %s: %w", jobID, err)
	}
	out := make(map[string]Usage, len(items))
	for _, it := range items {
		var u Usage
		if err := json.Unmarshal([]byte(getS(it, "usage")), &u); err != nil {
			return nil, fmt.Errorf("usage record %s of job %s: %w", getS(it, "sk"), jobID, err)
		}
		out[strings.TrimPrefix(getS(it, "sk"), skUsagePrefix)] = u
	}
	return out, nil
}

// SetJobUsage keeps the job's total usage on its record once the job is
// done, where a tenant's listing reads it without the job's records.
func (s *Store) SetJobUsage(ctx context.Context, jobID string, u Usage) error {
	data, err := json.Marshal(u)
	if err != nil {
		return fmt.Errorf("encode usage: %w", err)
	}
	_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &s.jobs,
		Key:                       jobKey(jobID),
		UpdateExpression:          aws.String("SET #u = :u"),
		ConditionExpression:       aws.String("attribute_exists(pk)"),
		ExpressionAttributeNames:  map[string]string{"#u": "usage"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":u": avS(string(data))},
	})
	if _, missing := isConditionFailed(err); missing {
		return fmt.Errorf("job %s: %w", jobID, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("record the usage of job %s: %w", jobID, err)
	}
	return nil
}

// usageOf reads a job record's total usage; nil when none was kept.
func usageOf(item map[string]types.AttributeValue) *Usage {
	raw := getS(item, "usage")
	if raw == "" {
		return nil
	}
	var u Usage
	if json.Unmarshal([]byte(raw), &u) != nil {
		return nil
	}
	return &u
}

// MaxUsageJobs is the most jobs one TenantJobsBetween reads.
const MaxUsageJobs = 10000

// TenantJobsBetween returns the tenant's jobs created in [from, to), oldest
// first, at most max (0: MaxUsageJobs); truncated says more were there. It
// reads the by-tenant index by its sort key, so a range costs what it
// holds, and only reads: no partition takes writes for it.
func (s *Store) TenantJobsBetween(ctx context.Context, tenant string, from, to time.Time, max int) (jobs []Job, truncated bool, err error) {
	if tenant == "" {
		return nil, false, fmt.Errorf("tenant is empty: %w", ErrInvalid)
	}
	if max <= 0 || max > MaxUsageJobs {
		max = MaxUsageJobs
	}
	keys, err := s.queryIndex(ctx, s.jobs, tenantIndex, "#t = :t AND #c BETWEEN :from AND :to",
		map[string]string{"#t": tenantIndexAttr, "#c": "created_at"},
		map[string]types.AttributeValue{":t": avS(tenant), ":from": avTime(from), ":to": avN(to.UnixMilli() - 1)}, max+1)
	if err != nil {
		return nil, false, fmt.Errorf("jobs of %s: %w", tenant, err)
	}
	if len(keys) > max {
		keys, truncated = keys[:max], true
	}
	items, err := s.records(s.jobs, jobKey)(ctx, keys)
	if err != nil {
		return nil, false, err
	}
	for _, it := range items {
		jobs = append(jobs, jobFromItem(it))
	}
	return jobs, truncated, nil
}
