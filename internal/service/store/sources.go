package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Origin tells where a source's text came from.
type Origin string

const (
	OriginSearch Origin = "search" // a search result: title and snippet
	OriginCrawl  Origin = "crawl"  // a crawled page: extracted content
)

// Source is one collected source of a job. N is its citation number: the
// report's [n] refers to the source with that N.
type Source struct {
	N       int
	URL     string
	Title   string
	Snippet string
	Content string
	Origin  Origin
	// Truncated is set when Content (or another field) was cut to fit.
	Truncated bool
	// FinalURL, Mode and Pages describe a crawled page: where its
	// redirects ended, how its text was read ("http", "browser", "pdf")
	// and, for a PDF, its page count.
	FinalURL string
	Mode     string
	Pages    int
}

// Caps on a source's fields; longer values are cut and Truncated set.
const (
	MaxSourceContentBytes = 100 << 10
	MaxSourceURLBytes     = 4 << 10
	MaxSourceTitleBytes   = 1 << 10
	MaxSourceSnippetBytes = 4 << 10
)

const skSourcePrefix = "SOURCE#"

func sourceSK(n int) string { return sourceSKWith(skSourcePrefix, n) }

// sourceSKWith is prefix and n padded to six digits, so that items sort by n.
func sourceSKWith(prefix string, n int) string {
	s := strconv.Itoa(n)
	if len(s) < 6 {
		s = strings.Repeat("0", 6-len(s)) + s
	}
	return prefix + s
}

// PutSources writes sources under their numbers, replacing any earlier
// version of the same N (a crawl adds content to a search result). Sources
// are content, not state, so these are plain batched writes.
func (s *Store) PutSources(ctx context.Context, jobID string, sources []Source) error {
	if err := checkID("job id", jobID); err != nil {
		return err
	}
	now := s.now()
	reqs := make([]types.WriteRequest, 0, len(sources))
	seen := map[int]bool{}
	for _, src := range sources {
		if src.N <= 0 || src.N > 999999 {
			return fmt.Errorf("job %s: source number %d out of range 1..999999: %w", jobID, src.N, ErrInvalid)
		}
		if seen[src.N] {
			return fmt.Errorf("job %s: source number %d given twice: %w", jobID, src.N, ErrInvalid)
		}
		seen[src.N] = true
		var cut [4]bool
		src.URL, cut[0] = capField(src.URL, MaxSourceURLBytes)
		src.Title, cut[1] = capField(src.Title, MaxSourceTitleBytes)
		src.Snippet, cut[2] = capField(src.Snippet, MaxSourceSnippetBytes)
		src.Content, cut[3] = capField(src.Content, MaxSourceContentBytes)
		src.Truncated = src.Truncated || cut[0] || cut[1] || cut[2] || cut[3]
		item := map[string]types.AttributeValue{
			"pk":         avS(jobID),
			"sk":         avS(sourceSK(src.N)),
			"n":          avN(int64(src.N)),
			"url":        avS(src.URL),
			"origin":     avS(string(src.Origin)),
			"expires_at": s.expiry(now),
		}
		src.FinalURL, _ = capField(src.FinalURL, MaxSourceURLBytes)
		if src.Pages > 0 {
			item["pages"] = avN(int64(src.Pages))
		}
		for k, v := range map[string]string{"title": src.Title, "snippet": src.Snippet, "content": src.Content, "final_url": src.FinalURL, "mode": src.Mode} {
			if v != "" {
				item[k] = avS(v)
			}
		}
		if src.Truncated {
			item["truncated"] = avBool(true)
		}
		reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: item}})
	}
	if err := s.batchWrite(ctx, s.jobs, reqs); err != nil {
		return fmt.Errorf("put sources of job %s: %w", jobID, err)
	}
	return nil
}

// ListSources returns the job's sources ordered by N.
func (s *Store) ListSources(ctx context.Context, jobID string) ([]Source, error) {
	items, err := s.queryPrefix(ctx, jobID, skSourcePrefix)
	if err != nil {
		return nil, fmt.Errorf("list sources of job %s: %w", jobID, err)
	}
	out := make([]Source, 0, len(items))
	for _, it := range items {
		out = append(out, Source{
			N:         int(getN(it, "n")),
			URL:       getS(it, "url"),
			Title:     getS(it, "title"),
			Snippet:   getS(it, "snippet"),
			Content:   getS(it, "content"),
			Origin:    Origin(getS(it, "origin")),
			Truncated: getBool(it, "truncated"),
			FinalURL:  getS(it, "final_url"),
			Mode:      getS(it, "mode"),
			Pages:     int(getN(it, "pages")),
		})
	}
	return out, nil
}

func capField(v string, max int) (string, bool) {
	if len(v) <= max {
		return v, false
	}
	return truncate(v, max), true
}

// queryPrefix returns every item of partition pk whose sort key starts with
// prefix, in sort key order (strongly consistent).
func (s *Store) queryPrefix(ctx context.Context, pk, prefix string) ([]map[string]types.AttributeValue, error) {
	var items []map[string]types.AttributeValue
	p := dynamodb.NewQueryPaginator(s.db, &dynamodb.QueryInput{
		TableName:              &s.jobs,
		KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :prefix)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": avS(pk), ":prefix": avS(prefix),
		},
		ConsistentRead: aws.Bool(true),
	})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		items = append(items, out.Items...)
	}
	return items, nil
}

// batchWrite sends write requests 25 at a time (BatchWriteItem's limit),
// resending what DynamoDB left unprocessed, with backoff, a bounded number
// of times.
func (s *Store) batchWrite(ctx context.Context, table string, reqs []types.WriteRequest) error {
	const batch, tries = 25, 20
	for len(reqs) > 0 {
		n := min(batch, len(reqs))
		pending := reqs[:n]
		reqs = reqs[n:]
		for attempt := 0; len(pending) > 0; attempt++ {
			if attempt >= tries {
				return fmt.Errorf("%d writes still unprocessed after %d attempts", len(pending), tries)
			}
			if attempt > 0 {
				if err := backoff(ctx, attempt); err != nil {
					return err
				}
			}
			out, err := s.db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{
				RequestItems: map[string][]types.WriteRequest{table: pending},
			})
			if err != nil {
				return err
			}
			pending = out.UnprocessedItems[table]
		}
	}
	return nil
}
