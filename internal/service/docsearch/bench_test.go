package docsearch_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/docsearch"
)

// synthPages writes pages of sections sections each, words words long,
// drawn from a Zipf-distributed vocabulary the size of a technical
// manual's; salt changes every section's text.
func synthPages(pages, sections, words int, salt string) map[string]string {
	r := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(rand.New(rand.NewPCG(3, 4)), 1.1, 2, 20000)
	out := map[string]string{}
	for p := range pages {
		var b strings.Builder
		fmt.Fprintf(&b, "# Package page %d\n\n", p)
		for s := range sections {
			fmt.Fprintf(&b, "## Section %d.%d %s\n\n", p, s, salt)
			for w := range words {
				if w > 0 && r.IntN(12) == 0 {
					b.WriteString(".\n")
				}
				fmt.Fprintf(&b, "term%d ", z.Uint64())
			}
			b.WriteString("\n\n")
		}
		out[fmt.Sprintf("/p%d.md", p)] = b.String()
	}
	return out
}

// benchSetup is a service over one dependency whose docs are the given
// pages on a fixture site.
func benchSetup(b *testing.B, pages map[string]string, withEmb bool) *setup {
	b.Helper()
	s := &setup{docs: newDocsServer(b, pages)}
	var urls []string
	for p := range pages {
		urls = append(urls, fmt.Sprintf("%q", s.docs.URL+p))
	}
	slices.Sort(urls)
	toml := fmt.Sprintf("[[sessions.dependencies]]\npackage = \"bench\"\ndocs = [%s]\n[tools]\nchunk_max_chars = 4000\n", strings.Join(urls, ", "))
	return finishSetup(b, s, toml, withEmb)
}

// BenchmarkIndex1000Chunks: one op indexes 1,000 new chunks (10 pages of
// 100 sections, every section changed since the last op, so each op also
// deletes the 1,000 of the op before) into DynamoDB Local.
func BenchmarkIndex1000Chunks(b *testing.B) {
	for _, withEmb := range []bool{false, true} {
		name := "bm25"
		if withEmb {
			name = "embeddings"
		}
		b.Run(name, func(b *testing.B) {
			s := benchSetup(b, synthPages(10, 100, 60, "v0"), withEmb)
			ctx := testCtx(b)
			i := 0
			for b.Loop() {
				b.StopTimer()
				i++
				for p, body := range synthPages(10, 100, 60, fmt.Sprintf("v%d", i)) {
					s.docs.set(p, body)
				}
				b.StartTimer()
				rep, err := s.svc.Index(ctx)
				if err != nil || rep.Written != 1000 {
					b.Fatalf("%+v, %v", rep, err)
				}
			}
		})
	}
}

// BenchmarkSearch10000Chunks: searches of a warm process over 10,000
// chunks; p50 is reported as p50-ms. The hybrid case includes the query's
// embedding over HTTP from the fake server on 127.0.0.1 (256 dimensions).
// index-MiB is the heap the loaded index holds, load-ms the cold load
// from DynamoDB Local (what a cold Lambda pays on its first search).
func BenchmarkSearch10000Chunks(b *testing.B) {
	for _, withEmb := range []bool{false, true} {
		name := "bm25"
		if withEmb {
			name = "hybrid"
		}
		b.Run(name, func(b *testing.B) {
			s := benchSetup(b, synthPages(20, 500, 60, "v0"), withEmb)
			ctx := testCtx(b)
			if rep, err := s.svc.Index(ctx); err != nil || rep.Written != 10000 {
				b.Fatalf("%+v, %v", rep, err)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			loadStart := time.Now()
			if _, err := s.svc.Search(ctx, docsearch.Query{Text: "term1"}); err != nil { // loads the index
				b.Fatal(err)
			}
			load := time.Since(loadStart)
			runtime.GC()
			runtime.ReadMemStats(&after)
			r := rand.New(rand.NewPCG(5, 6))
			var took []time.Duration
			for b.Loop() {
				q := fmt.Sprintf("term%d term%d term%d", 2+r.IntN(50), 2+r.IntN(2000), 2+r.IntN(20000))
				start := time.Now()
				ans, err := s.svc.Search(ctx, docsearch.Query{Text: q, K: 5})
				took = append(took, time.Since(start))
				if err != nil || len(ans.Results) == 0 {
					b.Fatalf("%+v, %v", ans, err)
				}
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "index-MiB")
			b.ReportMetric(float64(load.Milliseconds()), "load-ms")
		})
	}
}
