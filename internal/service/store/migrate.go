package store

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// MigrateLedgerIndex gives every live ledger entry written before the
// sharded live index existed (no live_shard) its key in that index, so the
// reaper's passes see it. It is safe to run at any time and any number of
// times, concurrently with the ledger's own writes: each update is
// conditional on the entry being unchanged and still unmigrated. It scans
// the sandboxes table (closed entries expire, so the table holds about as
// many items as sandboxes were closed in the retention period) and returns
// how many entries it changed. docs/capacity.md describes the migration.
func (s *Store) MigrateLedgerIndex(ctx context.Context) (int, error) {
	n := 0
	var start map[string]types.AttributeValue
	for {
		out, err := s.db.Scan(ctx, &dynamodb.ScanInput{
			TableName:                &s.sandboxes,
			FilterExpression:         aws.String("#s IN (:c, :r) AND attribute_not_exists(live_shard)"),
			ExpressionAttributeNames: map[string]string{"#s": "state"},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":c": avS(string(LedgerCreating)), ":r": avS(string(LedgerRunning)),
			},
			ExclusiveStartKey: start,
		})
		if err != nil {
			return n, fmt.Errorf("migrate ledger index: %w", err)
		}
		for _, it := range out.Items {
			e := ledgerFromItem(it)
			u := newExpr()
			u.set("live_shard", avS(shardKey(string(e.State), e.Name)))
			u.cond("attribute_not_exists(live_shard)")
			u.cond(u.name("state") + " = " + u.value(avS(string(e.State))))
			if _, err := s.db.UpdateItem(ctx, u.update(s.sandboxes, ledgerKey(e.Name))); err != nil {
				if _, failed := isConditionFailed(err); failed {
					continue // changed meanwhile: its own write set or removed the key
				}
				return n, fmt.Errorf("migrate ledger entry %s: %w", e.Name, err)
			}
			n++
		}
		if len(out.LastEvaluatedKey) == 0 {
			return n, nil
		}
		start = out.LastEvaluatedKey
	}
}
