package localexec_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/emulation/localexec"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
)

// BenchmarkDeepResearchOverhead runs statemachine/deep-research.asl.json
// with phases that do nothing (three crawl rounds, then report and
// cleanup) on the local engine, in memory and durable (a checkpoint in
// DynamoDB Local before every Task): what the engine adds to a job
// (DESIGN budget: 25 ms per job).
func BenchmarkDeepResearchOverhead(b *testing.B) {
	def, err := os.ReadFile(filepath.Join("..", "..", "..", "statemachine", "deep-research.asl.json"))
	if err != nil {
		b.Fatal(err)
	}
	subs := map[string]string{}
	for _, ph := range []string{"Discover", "Provision", "Crawl", "Summarize", "Report", "Cleanup"} {
		subs[ph+"FunctionArn"] = ph + "Function"
	}
	type in struct {
		JobID  string `json:"job_id"`
		Offset int    `json:"offset"`
		Slice  int    `json:"slice"`
	}
	ok := func(context.Context, in) (map[string]any, error) {
		return map[string]any{"ok": true, "summarize": true}, nil
	}
	fns := localexec.Functions{
		"DiscoverFunction": ok,
		"ProvisionFunction": func(context.Context, in) (map[string]any, error) {
			return map[string]any{"ok": true, "sandbox_id": "sb"}, nil
		},
		"CrawlFunction": func(_ context.Context, i in) (map[string]any, error) {
			return map[string]any{"done": i.Offset >= 2, "offset": i.Offset + 1, "slice": i.Slice + 1, "sources": 3}, nil
		},
		"SummarizeFunction": ok,
		"ReportFunction":    ok,
		"CleanupFunction": func(context.Context, map[string]any) (map[string]any, error) {
			return map[string]any{"status": "succeeded"}, nil
		},
	}
	for _, durable := range []bool{false, true} {
		name := "memory"
		if durable {
			name = "durable"
		}
		b.Run(name, func(b *testing.B) {
			var st *store.Store
			if durable {
				env := testddb.ForTests(b)
				st = store.New(env.Client, env.Prefix)
			}
			l, err := localexec.NewLocal(localexec.LocalOptions{
				Definition: def, Substitutions: subs, Invoker: localexec.NewInvoker(fns),
				StatusChangeFunction: "CleanupFunction", Store: st, Logger: slog.New(slog.DiscardHandler),
			})
			if err != nil {
				b.Fatal(err)
			}
			var before store.Stats
			if st != nil {
				before = st.Stats()
			}
			var seq atomic.Int64
			ctx := context.Background()
			start := time.Now()
			n := 0
			for b.Loop() {
				id := fmt.Sprintf("bench-%d", seq.Add(1))
				if _, err := l.Start(ctx, id, []byte(`{"job_id":"`+id+`"}`)); err != nil {
					b.Fatal(err)
				}
				x, _ := l.Execution(id)
				if res, _ := x.Wait(ctx); res.Status != "SUCCEEDED" {
					b.Fatalf("%+v", res)
				}
				n++
			}
			elapsed := time.Since(start)
			if err := l.Shutdown(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(elapsed.Microseconds())/1000/float64(n), "ms/job")
			if st != nil {
				d := st.Stats().Sub(before)
				b.ReportMetric(float64(d.ItemWrites)/float64(n), "ddb-writes/job")
			}
		})
	}
}
