package store_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
)

// hotShare is the most of an index's writes that one partition key value
// may take. An index partition takes about 1,000 write units a second; at
// 1/10 the index as a whole can take ten times that before any partition
// is hot, and the share does not grow with the number of items (a key per
// state would take a fixed share of every write whatever the load).
const hotShare = 0.10

// indexModel is how DynamoDB maintains one global secondary index: the
// partition key value an item image has in it (ok false: not indexed), and
// which attributes an index entry holds (a write that changes none of them
// does not write the index).
type indexModel struct {
	table, name string
	// perTenant: the index is keyed by tenant, one partition per tenant by
	// design (a listing). A big tenant's share cannot be spread, so what is
	// checked is that only an item's arrival and departure write it, never
	// its progress: its partition's rate is then the tenant's creation rate.
	perTenant bool
	key       func(img map[string]types.AttributeValue) (string, bool)
	projected func(attr string) bool
}

// indexWrites counts, per index and partition key value, the index writes
// DynamoDB performs for a sequence of item writes: an item entering or
// leaving an index is one write at its key; an indexed item whose projected
// attributes change is one write, two when its key moves (a delete and a
// put).
type indexWrites struct {
	mu      sync.Mutex
	counts  map[string]map[string]int // index -> key value -> writes
	perItem map[string]map[string]int // index -> item pk -> writes
}

func (w *indexWrites) record(models []indexModel, table string, before, after map[string]types.AttributeValue) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range models {
		if m.table != table {
			continue
		}
		bk, bok := m.key(before)
		ak, aok := m.key(after)
		pk := attrString(after["pk"])
		if after == nil {
			pk = attrString(before["pk"])
		}
		add := func(k string) {
			if w.counts[m.name] == nil {
				w.counts[m.name] = map[string]int{}
				w.perItem[m.name] = map[string]int{}
			}
			w.counts[m.name][k]++
			w.perItem[m.name][pk]++
		}
		switch {
		case bok && aok && bk != ak:
			add(bk)
			add(ak)
		case bok && aok:
			if projectedChanged(m, before, after) {
				add(ak)
			}
		case bok:
			add(bk)
		case aok:
			add(ak)
		}
	}
}

func projectedChanged(m indexModel, a, b map[string]types.AttributeValue) bool {
	for k := range a {
		if m.projected(k) && !reflect.DeepEqual(a[k], b[k]) {
			return true
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok && m.projected(k) {
			return true
		}
	}
	return false
}

// hottest returns the largest share one key value has of the index's writes.
func (w *indexWrites) hottest(index string) (string, float64, int) {
	total, best, bestKey := 0, 0, ""
	for k, n := range w.counts[index] {
		total += n
		if n > best {
			best, bestKey = n, k
		}
	}
	if total == 0 {
		return "", 0, 0
	}
	return bestKey, float64(best) / float64(total), total
}

// templateModels reads every global secondary index of the test's tables
// from DynamoDB Local (created from template.yaml), so the check follows the
// real definitions.
func templateModels(t *testing.T, ctx context.Context, raw *dynamodb.Client, prefix string) []indexModel {
	t.Helper()
	var models []indexModel
	for _, suffix := range []string{store.SessionsTableSuffix, store.SandboxesTableSuffix, store.JobsTableSuffix} {
		out, err := raw.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(prefix + suffix)})
		if err != nil {
			t.Fatal(err)
		}
		var tableKeys []string
		for _, k := range out.Table.KeySchema {
			tableKeys = append(tableKeys, aws.ToString(k.AttributeName))
		}
		for _, g := range out.Table.GlobalSecondaryIndexes {
			var hash string
			keys := slices.Clone(tableKeys)
			for _, k := range g.KeySchema {
				keys = append(keys, aws.ToString(k.AttributeName))
				if k.KeyType == types.KeyTypeHash {
					hash = aws.ToString(k.AttributeName)
				}
			}
			proj := g.Projection
			models = append(models, indexModel{
				table: prefix + suffix, name: suffix + "/" + aws.ToString(g.IndexName),
				perTenant: hash == "gsi_tenant",
				key: func(img map[string]types.AttributeValue) (string, bool) {
					for _, k := range keys[len(tableKeys):] {
						if _, ok := img[k]; !ok {
							return "", false
						}
					}
					return attrString(img[hash]), true
				},
				projected: func(attr string) bool {
					if proj.ProjectionType == types.ProjectionTypeAll || slices.Contains(keys, attr) {
						return true
					}
					return proj.ProjectionType == types.ProjectionTypeInclude && slices.Contains(proj.NonKeyAttributes, attr)
				},
			})
		}
	}
	return models
}

func attrString(v types.AttributeValue) string {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return v.Value
	}
	return fmt.Sprint(v)
}

// previousModels are the indexes this design replaced, for the same items:
// the ledger's by-state-deadline keyed by state alone, and the sessions'
// cleanup index over 4 shards with every pending run on one key.
func previousModels(prefix string) []indexModel {
	all := func(string) bool { return true }
	return []indexModel{
		{table: prefix + store.SandboxesTableSuffix, name: "previous sandboxes/by-state-deadline", projected: all,
			key: func(img map[string]types.AttributeValue) (string, bool) {
				if img["state"] == nil || img["deadline"] == nil {
					return "", false
				}
				return attrString(img["state"]), true
			}},
		{table: prefix + store.SessionsTableSuffix, name: "previous sessions/by-state-expiry", projected: all,
			key: func(img map[string]types.AttributeValue) (string, bool) {
				g, ok := img["gsi_state"].(*types.AttributeValueMemberS)
				if !ok || img["idle_expires_at"] == nil {
					return "", false
				}
				st, _, _ := strings.Cut(g.Value, "#")
				if st == "run-pending" {
					return "run#pending", true // every pending run on one key
				}
				h := fnv.New32a()
				h.Write([]byte(attrString(img["pk"])))
				return st + "#" + strconv.Itoa(int(h.Sum32()%4)), true
			}},
	}
}

// recorder is client middleware that reads the item before and after every
// single-item write (with a client of its own, consistently) and feeds the
// images to the index model.
func recorder(raw *dynamodb.Client, models []indexModel, w *indexWrites) func(*middleware.Stack) error {
	return func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("hotkeyRecorder",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				var table string
				var key map[string]types.AttributeValue
				switch p := in.Parameters.(type) {
				case *dynamodb.PutItemInput:
					table, key = aws.ToString(p.TableName), map[string]types.AttributeValue{"pk": p.Item["pk"]}
					if sk, ok := p.Item["sk"]; ok {
						key["sk"] = sk
					}
				case *dynamodb.UpdateItemInput:
					table, key = aws.ToString(p.TableName), p.Key
				case *dynamodb.DeleteItemInput:
					table, key = aws.ToString(p.TableName), p.Key
				case *dynamodb.TransactWriteItemsInput, *dynamodb.BatchWriteItemInput:
					// The sandbox and session paths write one item at a time;
					// a batch here would be uncounted, so say so.
					panic("hot-key recorder: multi-item write on the sandbox or session path")
				default:
					return next.HandleInitialize(ctx, in)
				}
				get := func() map[string]types.AttributeValue {
					out, err := raw.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: key, ConsistentRead: aws.Bool(true)})
					if err != nil {
						panic(err)
					}
					return out.Item
				}
				before := get()
				out, md, err := next.HandleInitialize(ctx, in)
				w.record(models, table, before, get())
				return out, md, err
			}), middleware.After)
	}
}

// TestIndexesHaveNoHotKey drives sandboxes, sessions and jobs through their
// whole lives in the store on DynamoDB Local and checks, from the items written,
// that no index partition key takes more than hotShare of its index's
// writes. The same writes are also replayed against the indexes this design
// replaced, which must fail the check: that is what shows the check can.
func TestIndexesHaveNoHotKey(t *testing.T) {
	ctx := testCtx(t)
	env := testddb.ForTests(t)
	raw := env.Client
	models := append(templateModels(t, ctx, raw, env.Prefix), previousModels(env.Prefix)...)
	w := &indexWrites{counts: map[string]map[string]int{}, perItem: map[string]map[string]int{}}
	opts := raw.Options()
	opts.APIOptions = append(slices.Clone(opts.APIOptions), recorder(raw, models, w))
	st := store.New(dynamodb.New(opts), env.Prefix)

	const sandboxes, sessions, runs, jobs = 160, 60, 3, 60
	now := time.Now()
	work := make(chan func() error)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range work {
				if err := f(); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range sandboxes {
		name := fmt.Sprintf("sb-%04d", i)
		work <- func() error {
			e := store.LedgerEntry{Name: name, Provider: "local", Owner: fmt.Sprintf("job-%d", i/2), Tenant: fmt.Sprintf("t%d", i%7), Deadline: now.Add(time.Hour)}
			if _, err := st.LedgerBegin(ctx, e); err != nil {
				return err
			}
			if _, err := st.LedgerRunning(ctx, name, "p-"+name); err != nil {
				return err
			}
			closed, err := st.LedgerClose(ctx, name, "completed", nil)
			if err != nil {
				return err
			}
			// As the owner records a closed sandbox that no job owns.
			return st.PutSandboxUsage(ctx, store.SandboxUsage{Name: name, OwnerKind: "session", Tenant: closed.Tenant, Provider: closed.Provider,
				RunningAt: closed.RunningAt, TerminatedAt: closed.TerminatedAt})
		}
	}
	for i := range sessions {
		id := fmt.Sprintf("s-%04d", i)
		work <- func() error {
			sess, _, err := st.CreateSession(ctx, store.NewSession{ID: id, Tenant: fmt.Sprintf("t%d", i%7), VolumeSlug: "v" + id, IdleTTL: time.Hour})
			if err != nil {
				return err
			}
			for r := range runs {
				if sess, err = st.BeginRun(ctx, id, sess.Version, time.Hour); err != nil {
					return err
				}
				run := store.SessionRun{ID: fmt.Sprintf("r%d", r), Tenant: sess.Tenant, SessionID: id, Status: store.RunRunning,
					Language: "python", Timeout: time.Minute, CreatedAt: time.Now()}
				if _, err := st.PutPendingRun(ctx, id, run); err != nil {
					return err
				}
				run.Status, run.FinishedAt, run.Result = store.RunSucceeded, time.Now(), []byte(`{}`)
				if err := st.PutFinishedRun(ctx, id, run); err != nil {
					return err
				}
				if sess, err = st.EndRun(ctx, id, sess.Version, time.Hour); err != nil {
					return err
				}
			}
			if _, err := st.BeginDelete(ctx, id, now.Add(2*time.Hour)); err != nil {
				return err
			}
			_, err = st.FinishDelete(ctx, id)
			return err
		}
	}
	for i := range jobs {
		id := fmt.Sprintf("j-%04d", i)
		work <- func() error {
			if _, _, err := st.CreateJob(ctx, store.NewJob{ID: id, Tenant: fmt.Sprintf("t%d", i%7), ClientID: id, Request: []byte(`{}`), RequestHash: "h"}); err != nil {
				return err
			}
			for n, phase := range []string{"discover", "provision", "crawl", "summarize", "report", "cleanup"} {
				u := store.JobUpdate{IfStatus: []store.Status{store.StatusRunning}, Phase: &phase}
				if n == 0 {
					u = store.JobUpdate{IfStatus: []store.Status{store.StatusQueued}, Status: store.StatusRunning, Phase: &phase}
				}
				if _, err := st.UpdateJob(ctx, id, u); err != nil {
					return err
				}
			}
			_, err := st.SetStatus(ctx, id, []store.Status{store.StatusRunning}, store.StatusSucceeded)
			return err
		}
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	checked := 0
	for _, m := range models {
		key, share, total := w.hottest(m.name)
		if total == 0 {
			continue
		}
		t.Logf("%s: %d index writes, hottest key %q takes %.1f%%", m.name, total, key, 100*share)
		previous := strings.HasPrefix(m.name, "previous ")
		if m.perTenant {
			for item, n := range w.perItem[m.name] {
				if n > 2 {
					t.Errorf("%s: item %s wrote the tenant's partition %d times; only its arrival and departure may", m.name, item, n)
					break
				}
			}
			checked++
			continue
		}
		switch {
		case previous && share <= hotShare:
			t.Errorf("%s: the replaced design passes the check (%.1f%% <= %.0f%%): the check cannot fail", m.name, 100*share, 100*hotShare)
		case !previous && share > hotShare:
			t.Errorf("%s: key %q takes %.1f%% of %d index writes, more than %.0f%%", m.name, key, 100*share, total, 100*hotShare)
		}
		if !previous {
			checked++
		}
	}
	if checked < 5 {
		t.Fatalf("only %d of the template's indexes saw writes: the workload misses some", checked)
	}
}
