package sessions_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sandstep/sandstep/providers"

	"github.com/sandstep/sandstep/internal/service/store"
)

// percentiles reports the p50 and p95 of the samples in milliseconds.
func percentiles(b *testing.B, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	at := func(p float64) float64 {
		i := min(int(p*float64(len(samples))), len(samples)-1)
		return float64(samples[i].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.95), "p95-ms")
}

// BenchmarkFirstRun is a session's first run over HTTP: its record and
// volume, a sandbox from the (already built) snapshot, the code.
func BenchmarkFirstRun(b *testing.B) { firstRun(b, envConfig{}) }

// BenchmarkFirstRunOnDeno is BenchmarkFirstRun with provider "deno"
// against the fake Deno on this machine.
func BenchmarkFirstRunOnDeno(b *testing.B) { firstRun(b, envConfig{deno: startDeno(b, nil, 1<<20)}) }

func firstRun(b *testing.B, ec envConfig) {
	e := newEnv(b, ec)
	if err := e.stack.Sessions.EnsureSnapshot(ctxFor(b)); err != nil {
		b.Fatal(err)
	}
	var samples []time.Duration
	i := 0
	for b.Loop() {
		start := time.Now()
		wantOK(b, e.run(tokenAcme, fmt.Sprintf("first%d", i), "shell", "true"))
		samples = append(samples, time.Since(start))
		i++
	}
	b.StopTimer()
	percentiles(b, samples)
}

// BenchmarkWarmRun is a run in a session whose sandbox is up, over HTTP,
// by language.
func BenchmarkWarmRun(b *testing.B) { warmRun(b, envConfig{}) }

// BenchmarkWarmRunOnDeno is BenchmarkWarmRun with provider "deno" against
// the fake Deno on this machine.
func BenchmarkWarmRunOnDeno(b *testing.B) { warmRun(b, envConfig{deno: startDeno(b, nil, 0)}) }

func warmRun(b *testing.B, ec envConfig) {
	e := newEnv(b, ec)
	for _, c := range []struct{ lang, code string }{
		{"shell", "true"},
		{"javascript", "1 + 1"},
		{"python", "1 + 1"},
	} {
		b.Run(c.lang, func(b *testing.B) {
			sid := "warm-" + c.lang
			wantOK(b, e.run(tokenAcme, sid, c.lang, c.code))
			before := e.st.Stats()
			var samples []time.Duration
			for b.Loop() {
				start := time.Now()
				wantOK(b, e.run(tokenAcme, sid, c.lang, c.code))
				samples = append(samples, time.Since(start))
			}
			b.StopTimer()
			percentiles(b, samples)
			d := e.st.Stats().Sub(before)
			b.ReportMetric(float64(d.Total())/float64(len(samples)), "store-calls/op")
			b.ReportMetric(float64(d.ItemWrites)/float64(len(samples)), "item-writes/op")
			b.ReportMetric(float64(d.TableWrites[store.SessionsTableSuffix])/float64(len(samples)), "writes-sessions/op")
		})
	}
}

// BenchmarkCleanupPass is one reaper pass over 1,000 sessions: all idle
// and unexpired (nothing to do), or all expired with their volumes (all
// deleted).
func BenchmarkCleanupPass(b *testing.B) {
	const n = 1000
	e := newEnv(b, envConfig{})
	svc := e.stack.Sessions
	seq := 0
	populate := func(withVolumes bool) {
		ctx := ctxFor(b)
		ids := make(chan string)
		var wg sync.WaitGroup
		var once sync.Once
		var failed error
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for id := range ids {
					v, _, err := svc.Open(ctx, "acme", id)
					if err == nil && withVolumes {
						_, err = e.stack.Provider.CreateVolume(ctx, providers.VolumeSpec{Slug: v.Volume})
					}
					if err != nil {
						once.Do(func() { failed = err })
					}
				}
			}()
		}
		for range n {
			seq++
			ids <- fmt.Sprintf("bulk%d", seq)
		}
		close(ids)
		wg.Wait()
		if failed != nil {
			b.Fatal(failed)
		}
	}
	pass := func(b *testing.B, now time.Time, want func(c int) bool) {
		e.stack.Reaper.Now = func() time.Time { return now }
		c, err := e.stack.Reaper.Pass(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if !want(c.SessionsExpired) {
			b.Fatalf("counts = %+v", c)
		}
	}

	b.Run("idle", func(b *testing.B) {
		populate(false)
		b.ResetTimer()
		for b.Loop() {
			pass(b, time.Now(), func(c int) bool { return c == 0 })
		}
		b.StopTimer()
		// Leave the next case only its own sessions to delete.
		pass(b, time.Now().Add(time.Hour), func(c int) bool { return c == n })
	})
	b.Run("expired", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			populate(true)
			b.StartTimer()
			pass(b, time.Now().Add(time.Hour), func(c int) bool { return c == n })
		}
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N*n), "ms/session")
	})
}
