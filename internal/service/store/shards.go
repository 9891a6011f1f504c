package store

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// IndexShards is how many partition key values each low-cardinality index
// key is spread over: "<state>#<n>" with n from the item's id. One index
// partition takes about 1,000 write units a second, and a throttled index
// throttles its table's writes, so a key shared by every live sandbox or
// every running session would cap the whole deployment (docs/capacity.md
// has the figures). Changing it changes the values written: raising it is
// safe (queries cover every value below the new count, which includes the
// old ones); lowering it strands items until they are written again.
const IndexShards = 16

// shardOf is the shard of an item id.
func shardOf(id string) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int(h.Sum32() % IndexShards)
}

// shardKey is an item's partition value in a sharded index.
func shardKey(prefix, id string) string {
	return prefix + "#" + strconv.Itoa(shardOf(id))
}

// shardQuery is one sharded index's query: items whose key is
// "<prefix>#<n>" for some n, with rangeCond on the sort key.
type shardQuery struct {
	table, index string
	// keyAttr is the sharded partition attribute; rangeCond a condition on
	// the sort key written with #r and its values (":k" is taken).
	keyAttr, rangeAttr, rangeCond string
	values                        map[string]types.AttributeValue
	// limit bounds the result (0: all).
	limit int
}

// queryShards runs q on every shard of prefix concurrently, each query
// paginated to the end (or to limit), and returns the items in order of
// the sort key, at most limit.
func (s *Store) queryShards(ctx context.Context, q shardQuery, prefix string) ([]map[string]types.AttributeValue, error) {
	var (
		wg      sync.WaitGroup
		results [IndexShards][]map[string]types.AttributeValue
		errs    [IndexShards]error
	)
	for n := range IndexShards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			values := make(map[string]types.AttributeValue, len(q.values)+1)
			for k, v := range q.values {
				values[k] = v
			}
			values[":k"] = avS(prefix + "#" + strconv.Itoa(n))
			results[n], errs[n] = s.queryIndex(ctx, q.table, q.index, "#k = :k AND "+q.rangeCond,
				map[string]string{"#k": q.keyAttr, "#r": q.rangeAttr}, values, q.limit)
		}()
	}
	wg.Wait()
	var all []map[string]types.AttributeValue
	for n := range IndexShards {
		if errs[n] != nil {
			return nil, fmt.Errorf("%s shard %d: %w", q.index, n, errs[n])
		}
		all = append(all, results[n]...)
	}
	slices.SortStableFunc(all, func(a, b map[string]types.AttributeValue) int {
		return cmp.Compare(getN(a, q.rangeAttr), getN(b, q.rangeAttr))
	})
	if q.limit > 0 && len(all) > q.limit {
		all = all[:q.limit]
	}
	return all, nil
}
