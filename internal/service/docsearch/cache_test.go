package docsearch_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/docsearch"
	"github.com/sandstep/sandstep/internal/service/store"
)

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// A warm process (a Lambda between invocations) keeps the index in
// memory: searches within cache_refresh read nothing from the store, and
// after it one small read tells whether another process (the scheduled
// indexing) changed the docs; only then is the index loaded again.
func TestWarmProcessReloadsOnlyWhenTheIndexChanged(t *testing.T) {
	s := newSetup(t, false, "")
	ctx := testCtx(t)
	if _, err := s.svc.Index(ctx); err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Now()}
	// The API process: its own Store, so its reads are counted apart.
	apiStore := store.NewLocal(s.db.Endpoint, s.db.Prefix)
	warm := docsearch.New(docsearch.Options{Config: s.cfg, Store: apiStore, Logger: quiet, Now: clk.now})
	search := func(q string) string {
		ans, err := warm.Search(ctx, docsearch.Query{Text: q, Package: "zod", K: 1})
		if err != nil || len(ans.Results) != 1 {
			t.Fatalf("search %q: %+v, %v", q, ans, err)
		}
		return ans.Results[0].Text
	}
	search("safeParse") // loads
	before := apiStore.Stats()
	for range 5 {
		search("safeParse")
	}
	if d := apiStore.Stats().Sub(before); d.Total() != 0 {
		t.Fatalf("warm searches read the store: %v", d.Calls)
	}

	// Past cache_refresh, unchanged: one GetItem, no reload.
	clk.add(31 * time.Second)
	before = apiStore.Stats()
	search("safeParse")
	if d := apiStore.Stats().Sub(before); d.Total() != 1 || d.Calls["GetItem"] != 1 {
		t.Fatalf("refresh of an unchanged index: %v", d.Calls)
	}

	// The scheduled indexing changes a section: seen after cache_refresh.
	s.docs.set("/zod.md", strings.Replace(readFile(t, "zod.md"), "never throws", "never throws (new in v4)", 1))
	if rep, err := s.svc.Index(ctx); err != nil || rep.Written != 1 {
		t.Fatalf("re-index: %+v, %v", rep, err)
	}
	if got := search("safeParse"); strings.Contains(got, "new in v4") {
		t.Fatal("a change seen before cache_refresh")
	}
	clk.add(31 * time.Second)
	if got := search("safeParse"); !strings.Contains(got, "new in v4") {
		t.Fatalf("the change not seen after cache_refresh: %s", got)
	}
}
