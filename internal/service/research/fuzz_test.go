package research

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/internal/service/crawler/spec"
	"github.com/sandstep/sandstep/internal/service/store"
)

// The crawl phase reads what the crawler writes inside the sandbox, where
// nothing is trusted: its progress log and its output file.

// FuzzProgressEvents reads a progress log: no panic, every event keyed by
// its own line's offset, and a log read in two slices (the next read
// starting where the last one stopped) gives exactly the events of one
// read, none lost and none twice.
func FuzzProgressEvents(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte, offset int64, cut uint16) {
		offset = max(offset, 0) % (1 << 40)
		whole := progressEvents(data, offset)
		if whole.next < offset || whole.next > offset+int64(len(data)) || len(whole.keys) != len(whole.evs) {
			t.Fatalf("read of %d bytes at %d: next %d, %d keys, %d events", len(data), offset, whole.next, len(whole.keys), len(whole.evs))
		}
		if whole.next > offset && data[whole.next-offset-1] != '\n' {
			t.Fatalf("next %d is not after a line end", whole.next)
		}
		for i, k := range whole.keys {
			at, err := strconv.ParseInt(strings.TrimPrefix(k, "crawl:progress:"), 10, 64)
			if err != nil || at < offset || at >= whole.next || (i > 0 && k == whole.keys[i-1]) {
				t.Fatalf("key %q outside [%d, %d) or repeated", k, offset, whole.next)
			}
			if st := whole.evs[i].Stage; st != spec.StageBrowser && st != string(store.StepCrawl) {
				t.Fatalf("event stage %q", st)
			}
		}
		k := int(cut) % (len(data) + 1)
		first := progressEvents(data[:k], offset)
		second := progressEvents(data[first.next-offset:], first.next)
		if got := append(slices.Clone(first.keys), second.keys...); !slices.Equal(got, whole.keys) || second.next != whole.next {
			t.Fatalf("read in two slices at %d: keys %v next %d; in one: %v next %d", k, got, second.next, whole.keys, whole.next)
		}
	})
}

// fuzzSeeds are a job's sources before the crawl, as discovery stores
// them; the seed corpus holds real outputs of crawls from these.
var fuzzSeeds = []store.Source{
	{N: 1, URL: "http://alpha.example:8080/", Title: "alpha", Snippet: "The alpha site", Origin: store.OriginSearch},
	{N: 2, URL: "http://beta.example:8080/", Origin: store.OriginSearch},
	{N: 3, URL: "http://alpha.example:8080/report.pdf", Title: "A report", Origin: store.OriginSearch},
	{N: 4, URL: "http://beta.example:8080/gzip", Origin: store.OriginSearch},
	{N: 5, URL: "http://alpha.example:8080/challenge", Title: "Just a moment...", Origin: store.OriginSearch},
}

// FuzzCrawledSources maps an output file onto the job's sources: whatever
// the file says, the result is what the store takes (numbers within range,
// each once) and seeds keep their URLs.
func FuzzCrawledSources(f *testing.F) {
	f.Fuzz(func(t *testing.T, output []byte) {
		var out spec.Output
		if err := json.Unmarshal(output, &out); err != nil {
			return // readOutput falls back to the snippets
		}
		c := crawledSources(slices.Clone(fuzzSeeds), out)
		put, blocked := c.put, c.blocked
		if blocked < 0 || blocked > len(put) {
			t.Fatalf("%d blocked of %d", blocked, len(put))
		}
		if len(c.skips) != len(out.Skipped) {
			t.Fatalf("%d skips stored of %d", len(c.skips), len(out.Skipped))
		}
		for _, sk := range c.skips {
			if !spec.KnownReason(sk.Reason) {
				t.Fatalf("skip with unknown reason %q", sk.Reason)
			}
		}
		if blocked < 0 || blocked > len(put) {
			t.Fatalf("%d blocked of %d", blocked, len(put))
		}
		seen := map[int]bool{}
		for _, s := range put {
			if s.N < 1 || s.N > 999999 || seen[s.N] {
				t.Fatalf("source number %d out of range or given twice: %+v", s.N, put)
			}
			seen[s.N] = true
			if s.N <= len(fuzzSeeds) && s.URL != fuzzSeeds[s.N-1].URL {
				t.Fatalf("seed %d lost its URL: %q", s.N, s.URL)
			}
		}
	})
}
