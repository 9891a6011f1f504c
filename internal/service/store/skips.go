package store

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Skip is a URL the crawl found but could not use, and why: Reason is a
// code of the crawler's closed set (crawler/spec.Reasons), Message the
// specifics. N is the source number when the URL is one of the job's
// sources, else 0.
type Skip struct {
	URL     string
	Reason  string
	Message string
	N       int
}

// MaxSkips bounds the skips kept per job; a crawl plans far fewer URLs.
const MaxSkips = 2000

const skSkipPrefix = "SKIP#"

// PutSkips stores skips in their order, keyed by their position: a retried
// phase that stores the same list writes the same items.
func (s *Store) PutSkips(ctx context.Context, jobID string, skips []Skip) error {
	if err := checkID("job id", jobID); err != nil {
		return err
	}
	if len(skips) > MaxSkips {
		skips = skips[:MaxSkips]
	}
	now := s.now()
	reqs := make([]types.WriteRequest, 0, len(skips))
	for i, sk := range skips {
		url, _ := capField(sk.URL, MaxSourceURLBytes)
		msg, _ := capField(sk.Message, 1<<10)
		item := map[string]types.AttributeValue{
			"pk":         avS(jobID),
			"sk":         avS(sourceSKWith(skSkipPrefix, i+1)),
			"url":        avS(url),
			"reason":     avS(sk.Reason),
			"expires_at": s.expiry(now),
		}
		if msg != "" {
			item["message"] = avS(msg)
		}
		if sk.N > 0 {
			item["n"] = avN(int64(sk.N))
		}
		reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: item}})
	}
	if err := s.batchWrite(ctx, s.jobs, reqs); err != nil {
		return fmt.Errorf("put skips of job %s: %w", jobID, err)
	}
	return nil
}

// ListSkips returns the job's skips in the order they were stored.
func (s *Store) ListSkips(ctx context.Context, jobID string) ([]Skip, error) {
	items, err := s.queryPrefix(ctx, jobID, skSkipPrefix)
	if err != nil {
		return nil, fmt.Errorf("list skips of job %s: %w", jobID, err)
	}
	out := make([]Skip, 0, len(items))
	for _, it := range items {
		out = append(out, Skip{
			URL:     getS(it, "url"),
			Reason:  getS(it, "reason"),
			Message: getS(it, "message"),
			N:       int(getN(it, "n")),
		})
	}
	return out, nil
}
