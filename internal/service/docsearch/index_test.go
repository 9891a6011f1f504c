package docsearch_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/docsearch"
)

func TestIndexAndReindexOneChangedSection(t *testing.T) {
	s := newSetup(t, true, "")
	ctx := testCtx(t)
	rep, err := s.svc.Index(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// 9 + 7 + 7 sections; missing.md is reported and is not fatal.
	if rep.Packages != 3 || rep.Pages != 3 || rep.Chunks != 23 || rep.Written != 23 || rep.Embedded != 23 || rep.Unchanged != 0 {
		t.Fatalf("first indexing: %+v", rep)
	}
	if len(rep.Failures) != 1 || rep.Failures[0].Package != "requests" || !strings.HasSuffix(rep.Failures[0].URL, "/missing.md") || rep.Failures[0].Error != "HTTP 404" {
		t.Fatalf("failures: %+v", rep.Failures)
	}
	if got := s.emb.texts.Load(); got != 23 {
		t.Fatalf("embedded %d texts", got)
	}
	chunks, err := s.st.DocChunks(ctx, "@linear/sdk")
	if err != nil || len(chunks) != 9 {
		t.Fatalf("stored linear chunks: %d, %v", len(chunks), err)
	}
	for _, c := range chunks {
		if c.Model != "fake-concepts" || len(c.Vector) != fakeDims || c.Package != "@linear/sdk" || !strings.HasPrefix(c.Title, "Linear SDK") {
			t.Fatalf("chunk %+v", c)
		}
	}

	// One section of one page changes: only it is written and embedded,
	// and its old version goes.
	page := readFile(t, "zod.md")
	changed := strings.Replace(page, "`.transform(fn)` maps the parsed value;", "`.transform(fn)` maps the parsed value to another type;", 1)
	if changed == page {
		t.Fatal("fixture edit did not apply")
	}
	s.docs.set("/zod.md", changed)
	rep, err = s.svc.Index(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Written != 1 || rep.Embedded != 1 || rep.Deleted != 1 || rep.Unchanged != 22 {
		t.Fatalf("re-indexing with one changed section: %+v", rep)
	}
	if got := s.emb.texts.Load(); got != 24 {
		t.Fatalf("embedded %d texts in all, want 23+1", got)
	}
	// The one embedded again is the changed section; no text was
	// embedded twice.
	changedEmbedded := 0
	s.emb.inputs.Range(func(k, v any) bool {
		if n := v.(*atomic.Int64).Load(); n != 1 {
			t.Errorf("embedded %d times: %q", n, k)
		}
		if strings.Contains(k.(string), "to another type") {
			changedEmbedded++
		}
		return true
	})
	if changedEmbedded != 1 {
		t.Fatalf("the changed section was embedded %d times", changedEmbedded)
	}
	ans, err := s.svc.Search(ctx, docsearch.Query{Text: "transform refine", Package: "zod", K: 1})
	if err != nil || len(ans.Results) != 1 || !strings.Contains(ans.Results[0].Text, "another type") {
		t.Fatalf("search after re-indexing: %+v, %v", ans, err)
	}

	// A page that stops answering keeps its chunks.
	s.docs.set("/linear.md", "")
	s.docs.mu.Lock()
	delete(s.docs.pages, "/linear.md")
	s.docs.mu.Unlock()
	rep, err = s.svc.Index(ctx)
	if err != nil || rep.Deleted != 0 || len(rep.Failures) != 2 {
		t.Fatalf("indexing with a page gone: %+v, %v", rep, err)
	}
	if chunks, _ := s.st.DocChunks(ctx, "@linear/sdk"); len(chunks) != 9 {
		t.Fatalf("linear chunks after a failed fetch: %d", len(chunks))
	}
}

func TestIndexIfDue(t *testing.T) {
	s := newSetup(t, false, "")
	ctx := testCtx(t)
	rep, err := s.svc.IndexIfDue(ctx)
	if err != nil || rep.Skipped != "" || rep.Written != 23 {
		t.Fatalf("first IndexIfDue: %+v, %v", rep, err)
	}
	hits := s.docs.hits.Load()
	rep, err = s.svc.IndexIfDue(ctx)
	if err != nil || !strings.HasPrefix(rep.Skipped, "not due until ") || s.docs.hits.Load() != hits {
		t.Fatalf("second IndexIfDue: %+v, %v (%d fetches)", rep, err, s.docs.hits.Load()-hits)
	}
	// Six hours later it is due, and nothing changed: nothing written.
	later := docsearch.New(docsearch.Options{Config: s.cfg, Store: s.st, Logger: quiet, Now: func() time.Time { return time.Now().Add(6*time.Hour + time.Minute) }})
	rep, err = later.IndexIfDue(ctx)
	if err != nil || rep.Skipped != "" || rep.Written != 0 || rep.Unchanged != 23 {
		t.Fatalf("IndexIfDue after the interval: %+v, %v", rep, err)
	}
	// Another process holding the lease makes indexing a no-op.
	if _, err := s.st.ClaimDocsIndex(ctx, "other", time.Now(), time.Hour); err != nil {
		t.Fatal(err)
	}
	rep, err = s.svc.Index(ctx)
	if err != nil || rep.Skipped != "another process is indexing" {
		t.Fatalf("Index while leased: %+v, %v", rep, err)
	}
}

func TestIndexDropsRemovedPackages(t *testing.T) {
	s := newSetup(t, false, "")
	ctx := testCtx(t)
	if _, err := s.svc.Index(ctx); err != nil {
		t.Fatal(err)
	}
	s.cfg.Sessions.Dependencies = s.cfg.Sessions.Dependencies[1:] // @linear/sdk removed
	fewer := docsearch.New(docsearch.Options{Config: s.cfg, Store: s.st, Logger: quiet})
	rep, err := fewer.IndexIfDue(ctx) // due: the configured docs changed
	if err != nil || rep.Skipped != "" {
		t.Fatalf("IndexIfDue after a config change: %+v, %v", rep, err)
	}
	if chunks, _ := s.st.DocChunks(ctx, "@linear/sdk"); len(chunks) != 0 {
		t.Fatalf("a removed package keeps %d chunks", len(chunks))
	}
}

func TestEmbeddingFailureIsReportedAndRetried(t *testing.T) {
	s := newSetup(t, true, "")
	ctx := testCtx(t)
	s.emb.fail.Store(true)
	rep, err := s.svc.Index(ctx)
	if err != nil || rep.Written != 23 || rep.Embedded != 0 || len(rep.Failures) != 4 {
		t.Fatalf("indexing without embeddings: %+v, %v", rep, err)
	}
	for _, f := range rep.Failures {
		if strings.Contains(f.Error, "emb-secret-123") {
			t.Fatal("the API key is in a failure")
		}
	}
	// Searching still works, by BM25, and says so.
	ans, err := s.svc.Search(ctx, docsearch.Query{Text: "rate limits"})
	if err != nil || ans.Mode != docsearch.ModeBM25 || !strings.Contains(ans.Warning, "HTTP 503") || len(ans.Results) == 0 {
		t.Fatalf("search with embeddings down: %+v, %v", ans, err)
	}
	s.emb.fail.Store(false)
	rep, err = s.svc.Index(ctx)
	if err != nil || rep.Written != 23 || rep.Embedded != 23 {
		t.Fatalf("the next indexing embeds what was stored without vectors: %+v, %v", rep, err)
	}
	rep, _ = s.svc.Index(context.WithoutCancel(ctx))
	if rep.Written != 0 || rep.Embedded != 0 {
		t.Fatalf("and then nothing: %+v", rep)
	}
}

// An indexing stopped half way lets go of its lease: the next one need not
// wait for it to expire.
func TestStoppedIndexingReleasesTheLease(t *testing.T) {
	s := newSetup(t, false, "")
	ctx, cancel := context.WithCancel(testCtx(t))
	s.docs.Config.Handler = cancelling{cancel: cancel, next: s.docs.Config.Handler}
	if _, err := s.svc.Index(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("stopped indexing: %v", err)
	}
	m, err := s.st.GetDocsMeta(testCtx(t))
	if err != nil || m.LeaseOwner != "" || !m.IndexedAt.IsZero() {
		t.Fatalf("meta after a stopped indexing: %+v, %v", m, err)
	}
	if _, err := s.st.ClaimDocsIndex(testCtx(t), "next", time.Now(), time.Minute); err != nil {
		t.Fatalf("the lease is still held: %v", err)
	}
}

// cancelling stops the indexing's context as the first page is asked for.
type cancelling struct {
	cancel context.CancelFunc
	next   http.Handler
}

func (c cancelling) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.cancel()
	c.next.ServeHTTP(w, r)
}
