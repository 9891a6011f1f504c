package localstack_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/emulation/asl"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/fixturesite"
)

// BenchmarkResearchJob runs whole light-mode jobs over HTTP (a local
// sandbox, the crawler on two fixture pages, an extractive report) and
// reports the DynamoDB operations and item writes each job costs, the
// submit included.
func BenchmarkResearchJob(b *testing.B) {
	site := fixturesite.Start(b, fixturesite.Options{Hosts: 1})
	s := newStackWith(b, stackOpts{config: "[research]\nrender = \"never\"\n", allowPrivate: site.AllowPrivate()})
	seeds := []string{site.Hosts[0].Page("/a"), site.Hosts[0].Page("/b")}
	before := s.st.Stats()
	start := time.Now()
	var transitions, invocations int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := fmt.Sprintf("bench-%d-%d", b.N, i)
		if code, out := s.do(b, "POST", "/v1/jobs", map[string]any{"query": "kestrels", "job_id": id, "seed_urls": seeds}); code != 202 {
			b.Fatalf("submit: %d %v", code, out)
		}
		// Wait on the execution itself: polling the API would count its
		// reads as the job's.
		x, ok := s.Engine.Execution(devKey(id))
		if !ok {
			b.Fatal("no execution")
		}
		<-x.Done()
		t, n := workflowCounts(x.History())
		transitions, invocations = transitions+t, invocations+n
	}
	b.StopTimer()
	d := s.st.Stats().Sub(before)
	b.ReportMetric(float64(d.Total())/float64(b.N), "ddb-calls/job")
	b.ReportMetric(float64(d.ItemWrites)/float64(b.N), "item-writes/job")
	for _, t := range []string{store.JobsTableSuffix, store.SandboxesTableSuffix, store.SessionsTableSuffix} {
		b.ReportMetric(float64(d.TableWrites[t])/float64(b.N), "writes-"+t+"/job")
	}
	b.ReportMetric(d.ReadUnits/float64(b.N), "read-units/job")
	b.ReportMetric(d.WriteUnits/float64(b.N), "write-units/job")
	b.ReportMetric(float64(d.Calls["TransactWriteItems"])/float64(b.N), "transactions/job")
	b.ReportMetric(float64(transitions)/float64(b.N), "transitions/job")
	b.ReportMetric(float64(invocations)/float64(b.N), "lambda-calls/job")
	b.ReportMetric(float64(time.Since(start).Milliseconds())/float64(b.N), "ms/job")
}

// workflowCounts is what Step Functions would bill and Lambda would run for
// one execution: state transitions (every state entered, as Standard
// workflows count them) and Lambda invocations (Task states scheduled,
// retries included). The stack's clock is instant, so the history's times
// say nothing about durations; ms/job is the job's wall time.
func workflowCounts(h []asl.HistoryEvent) (transitions, invocations int) {
	for _, e := range h {
		switch {
		case strings.HasSuffix(string(e.Type), "StateEntered"):
			transitions++
		case e.Type == asl.EventTaskScheduled || e.Type == asl.EventLambdaFunctionScheduled:
			invocations++
		}
	}
	return transitions, invocations
}
