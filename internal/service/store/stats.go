package store

import (
	"context"
	"maps"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
)

// Stats counts what a Store asked of DynamoDB since it was created.
type Stats struct {
	// Calls per DynamoDB operation name ("PutItem", "TransactWriteItems",
	// ...), one per API call (SDK-internal retries are not counted again).
	Calls map[string]int64
	// ItemWrites counts item writes requested: one per PutItem, UpdateItem
	// or DeleteItem, one per item of a BatchWriteItem or TransactWriteItems
	// (refused ones included). It is the number to watch for "writes per
	// job": on-demand billing charges at least one write unit per item
	// write, two inside a transaction.
	ItemWrites int64
	// TableWrites splits ItemWrites by table, named by its suffix
	// (JobsTableSuffix, ...): the capacity model's per-table figures.
	TableWrites map[string]int64
	// ReadUnits and WriteUnits are the capacity DynamoDB reported as
	// consumed by successful calls (the store asks for it on every call).
	// Refused writes report none. DynamoDB Local reports transactions per
	// table rather than per item, so there they undercount.
	ReadUnits, WriteUnits float64
}

// Total returns the number of calls over all operations.
func (s Stats) Total() int64 {
	var n int64
	for _, c := range s.Calls {
		n += c
	}
	return n
}

// Sub returns s minus an earlier snapshot, the activity in between.
func (s Stats) Sub(earlier Stats) Stats {
	out := Stats{
		Calls:       make(map[string]int64, len(s.Calls)),
		TableWrites: make(map[string]int64, len(s.TableWrites)),
		ItemWrites:  s.ItemWrites - earlier.ItemWrites,
		ReadUnits:   s.ReadUnits - earlier.ReadUnits,
		WriteUnits:  s.WriteUnits - earlier.WriteUnits,
	}
	for op, n := range s.Calls {
		if d := n - earlier.Calls[op]; d != 0 {
			out.Calls[op] = d
		}
	}
	for t, n := range s.TableWrites {
		if d := n - earlier.TableWrites[t]; d != 0 {
			out.TableWrites[t] = d
		}
	}
	return out
}

// Stats returns a snapshot of the Store's counters.
func (s *Store) Stats() Stats {
	st := s.stats.snapshot()
	byName := st.TableWrites
	st.TableWrites = make(map[string]int64, len(byName))
	for name, n := range byName {
		st.TableWrites[strings.TrimPrefix(name, s.prefix)] += n
	}
	return st
}

type counter struct {
	mu     sync.Mutex
	calls  map[string]int64
	writes int64
	tables map[string]int64
	rcu    float64
	wcu    float64
}

func newCounter() *counter { return &counter{calls: map[string]int64{}, tables: map[string]int64{}} }

func (c *counter) snapshot() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{Calls: maps.Clone(c.calls), ItemWrites: c.writes, TableWrites: maps.Clone(c.tables), ReadUnits: c.rcu, WriteUnits: c.wcu}
}

// register is an APIOptions entry: it adds the counting middleware to every
// operation's stack.
func (c *counter) register(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("sandstepStoreStats",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			tables := prepare(in.Parameters)
			out, md, err := next.HandleInitialize(ctx, in)
			var r, w float64
			if err == nil {
				r, w = capacity(out.Result)
			}
			c.mu.Lock()
			c.calls[middleware.GetOperationName(ctx)]++
			for t, n := range tables {
				c.writes += n
				c.tables[t] += n
			}
			c.rcu += r
			c.wcu += w
			c.mu.Unlock()
			return out, md, err
		}), middleware.After)
}

// prepare makes DynamoDB report consumed capacity for the operations the
// store uses (unless the caller already chose) and returns how many item
// writes the call requests, per table.
func prepare(params any) map[string]int64 {
	const total = types.ReturnConsumedCapacityTotal
	switch p := params.(type) {
	case *dynamodb.GetItemInput:
		p.ReturnConsumedCapacity = orDefault(p.ReturnConsumedCapacity, total)
	case *dynamodb.QueryInput:
		p.ReturnConsumedCapacity = orDefault(p.ReturnConsumedCapacity, total)
	case *dynamodb.BatchGetItemInput:
		p.ReturnConsumedCapacity = orDefault(p.ReturnConsumedCapacity, total)
	case *dynamodb.PutItemInput:
		p.ReturnConsumedCapacity = orDefault(p.ReturnConsumedCapacity, total)
		return map[string]int64{aws.ToString(p.TableName): 1}
	case *dynamodb.UpdateItemInput:
		p.ReturnConsumedCapacity = orDefault(p.ReturnConsumedCapacity, total)
		return map[string]int64{aws.ToString(p.TableName): 1}
	case *dynamodb.DeleteItemInput:
		p.ReturnConsumedCapacity = orDefault(p.ReturnConsumedCapacity, total)
		return map[string]int64{aws.ToString(p.TableName): 1}
	case *dynamodb.BatchWriteItemInput:
		p.ReturnConsumedCapacity = orDefault(p.ReturnConsumedCapacity, total)
		w := map[string]int64{}
		for t, reqs := range p.RequestItems {
			w[t] += int64(len(reqs))
		}
		return w
	case *dynamodb.TransactWriteItemsInput:
		p.ReturnConsumedCapacity = orDefault(p.ReturnConsumedCapacity, total)
		w := map[string]int64{}
		for _, it := range p.TransactItems {
			switch {
			case it.Put != nil:
				w[aws.ToString(it.Put.TableName)]++
			case it.Update != nil:
				w[aws.ToString(it.Update.TableName)]++
			case it.Delete != nil:
				w[aws.ToString(it.Delete.TableName)]++
			case it.ConditionCheck != nil:
				w[aws.ToString(it.ConditionCheck.TableName)]++
			}
		}
		return w
	}
	return nil
}

func orDefault(v, def types.ReturnConsumedCapacity) types.ReturnConsumedCapacity {
	if v == "" {
		return def
	}
	return v
}

// capacity returns the read and write units a result reports. DynamoDB
// gives only the total (CapacityUnits) for ReturnConsumedCapacity=TOTAL, so
// the operation's kind decides which side it counts on.
func capacity(result any) (read, write float64) {
	sum := func(cs ...*types.ConsumedCapacity) float64 {
		var n float64
		for _, c := range cs {
			if c != nil && c.CapacityUnits != nil {
				n += *c.CapacityUnits
			}
		}
		return n
	}
	sumAll := func(cs []types.ConsumedCapacity) float64 {
		var n float64
		for i := range cs {
			n += sum(&cs[i])
		}
		return n
	}
	switch r := result.(type) {
	case *dynamodb.GetItemOutput:
		return sum(r.ConsumedCapacity), 0
	case *dynamodb.QueryOutput:
		return sum(r.ConsumedCapacity), 0
	case *dynamodb.BatchGetItemOutput:
		return sumAll(r.ConsumedCapacity), 0
	case *dynamodb.PutItemOutput:
		return 0, sum(r.ConsumedCapacity)
	case *dynamodb.UpdateItemOutput:
		return 0, sum(r.ConsumedCapacity)
	case *dynamodb.DeleteItemOutput:
		return 0, sum(r.ConsumedCapacity)
	case *dynamodb.BatchWriteItemOutput:
		return 0, sumAll(r.ConsumedCapacity)
	case *dynamodb.TransactWriteItemsOutput:
		return 0, sumAll(r.ConsumedCapacity)
	}
	return 0, 0
}
