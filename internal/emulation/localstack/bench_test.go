package localstack_test

import (
	"fmt"
	"testing"
	"time"

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
	}
	b.StopTimer()
	d := s.st.Stats().Sub(before)
	b.ReportMetric(float64(d.Total())/float64(b.N), "ddb-calls/job")
	b.ReportMetric(float64(d.ItemWrites)/float64(b.N), "item-writes/job")
	b.ReportMetric(float64(time.Since(start).Milliseconds())/float64(b.N), "ms/job")
}
