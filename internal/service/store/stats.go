package store

import (
	"context"
	"maps"
	"sync"

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
		Calls:      make(map[string]int64, len(s.Calls)),
		ItemWrites: s.ItemWrites - earlier.ItemWrites,
		ReadUnits:  s.ReadUnits - earlier.ReadUnits,
		WriteUnits: s.WriteUnits - earlier.WriteUnits,
	}
	for op, n := range s.Calls {
		if d := n - earlier.Calls[op]; d != 0 {
			out.Calls[op] = d
		}
	}
	return out
}

// Stats returns a snapshot of the Store's counters.
func (s *Store) Stats() Stats { return s.stats.snapshot() }

type counter struct {
	mu     sync.Mutex
	calls  map[string]int64
	writes int64
	rcu    float64
	wcu    float64
}

func newCounter() *counter { return &counter{calls: map[string]int64{}} }

func (c *counter) snapshot() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{Calls: maps.Clone(c.calls), ItemWrites: c.writes, ReadUnits: c.rcu, WriteUnits: c.wcu}
}

// register is an APIOptions entry: it adds the counting middleware to every
// operation's stack.
func (c *counter) register(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("sandstepStoreStats",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			writes := prepare(in.Parameters)
			out, md, err := next.HandleInitialize(ctx, in)
			var r, w float64
			if err == nil {
				r, w = capacity(out.Result)
			}
			c.mu.Lock()
			c.calls[middleware.GetOperationName(ctx)]++
			c.writes += writes
			c.rcu += r
			c.wcu += w
			c.mu.Unlock()
			return out, md, err
		}), middleware.After)
}

// prepare makes DynamoDB report consumed capacity for the operations the
// store uses (unless the caller already chose) and returns how many item
// writes the call requests.
func prepare(params any) (writes int64) {
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
		return 1
	case *dynamodb.UpdateItemInput:
		p.ReturnConsumedCapacity = orDefault(p.ReturnConsumedCapacity, total)
		return 1
	case *dynamodb.DeleteItemInput:
		p.ReturnConsumedCapacity = orDefault(p.ReturnConsumedCapacity, total)
		return 1
	case *dynamodb.BatchWriteItemInput:
		p.ReturnConsumedCapacity = orDefault(p.ReturnConsumedCapacity, total)
		for _, reqs := range p.RequestItems {
			writes += int64(len(reqs))
		}
	case *dynamodb.TransactWriteItemsInput:
		p.ReturnConsumedCapacity = orDefault(p.ReturnConsumedCapacity, total)
		return int64(len(p.TransactItems))
	}
	return writes
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
