package store_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/store"
)

func TestDocChunksRoundTrip(t *testing.T) {
	st, _ := newStore(t)
	ctx := testCtx(t)
	now := time.Now().UTC().Truncate(time.Millisecond)
	chunks := []store.DocChunk{
		{Package: "@linear/sdk", URL: "http://docs/a.md", Hash: "h1", Title: "SDK > Auth", Text: "use an API key", Ord: 0, Vector: []float32{0.5, -1, 2.25}, Model: "m", IndexedAt: now},
		{Package: "@linear/sdk", URL: "http://docs/a.md", Hash: "h2", Title: "SDK > Issues", Text: "createIssue", Ord: 1, IndexedAt: now},
		{Package: "zod", URL: "http://docs/z.md", Hash: "h3", Title: "Zod", Text: "schemas", IndexedAt: now},
	}
	if err := st.PutDocChunks(ctx, chunks); err != nil {
		t.Fatal(err)
	}
	got, err := st.DocChunks(ctx, "@linear/sdk")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !reflect.DeepEqual(got[0], chunks[0]) || !reflect.DeepEqual(got[1], chunks[1]) {
		t.Fatalf("chunks = %+v", got)
	}
	if err := st.DeleteDocChunks(ctx, "@linear/sdk", []string{chunks[0].Key()}); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.DocChunks(ctx, "@linear/sdk"); len(got) != 1 || got[0].Hash != "h2" {
		t.Fatalf("after delete: %+v", got)
	}
	if err := st.DeleteDocPackage(ctx, "zod"); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.DocChunks(ctx, "zod"); len(got) != 0 {
		t.Fatalf("zod after deleting the package: %+v", got)
	}
	big := store.DocChunk{Package: "p", URL: "u", Hash: "h", Text: strings.Repeat("x", store.MaxDocItemBytes)}
	if err := st.PutDocChunks(ctx, []store.DocChunk{big}); !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("a chunk over the item limit: %v", err)
	}
}

func TestDocsMetaLease(t *testing.T) {
	st, _ := newStore(t)
	ctx := testCtx(t)
	now := time.Now()
	if m, err := st.GetDocsMeta(ctx); err != nil || m.Generation != 0 || !m.IndexedAt.IsZero() {
		t.Fatalf("meta before any indexing = %+v, %v", m, err)
	}
	if _, err := st.ClaimDocsIndex(ctx, "a", now, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ClaimDocsIndex(ctx, "b", now.Add(time.Second), time.Minute); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second owner while leased: %v", err)
	}
	if _, err := st.FinishDocsIndex(ctx, "b", now, "fp", nil, nil, true); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("finish without the lease: %v", err)
	}
	fails := []store.DocsFailure{{Package: "zod", URL: "http://docs/z.md", Error: "HTTP 404"}, {Package: "zod", Error: "embeddings: HTTP 503"}}
	m, err := st.FinishDocsIndex(ctx, "a", now, "fp", []string{"zod"}, fails, true)
	if err != nil || m.Generation != 1 || m.Fingerprint != "fp" || !reflect.DeepEqual(m.Packages, []string{"zod"}) || m.LeaseOwner != "" ||
		!reflect.DeepEqual(m.Failures, fails) {
		t.Fatalf("finish = %+v, %v", m, err)
	}
	if _, err := st.ClaimDocsIndex(ctx, "b", now, time.Minute); err != nil {
		t.Fatalf("claim after finish: %v", err)
	}
	// b dies holding the lease: it expires.
	if _, err := st.ClaimDocsIndex(ctx, "c", now.Add(2*time.Minute), time.Minute); err != nil {
		t.Fatalf("claim after the lease expired: %v", err)
	}
	if m, err := st.FinishDocsIndex(ctx, "c", now, "fp", []string{"zod"}, nil, false); err != nil || m.Generation != 1 || len(m.Failures) != 0 {
		t.Fatalf("an unchanged indexing keeps the generation: %+v, %v", m, err)
	}
}

func TestCodeModulesRoundTrip(t *testing.T) {
	st, _ := newStore(t)
	ctx := testCtx(t)
	now := time.Now().UTC().Truncate(time.Millisecond)
	mods := []store.CodeModule{
		{Session: "dev/s1", SessionCreatedAt: now, Path: "lib/a.ts", Description: "a", Exports: []string{"f", "g"}, Usage: "import { f } from './lib/a.ts'", UpdatedAt: now},
		{Session: "dev/s1", SessionCreatedAt: now, Path: "lib/b.ts", Description: "b", Exports: []string{}, Usage: "b()", Vector: []float32{1, 0}, Model: "m", UpdatedAt: now},
	}
	if err := st.PutCodeModules(ctx, mods); err != nil {
		t.Fatal(err)
	}
	got, err := st.CodeModules(ctx, "dev/s1")
	if err != nil || !reflect.DeepEqual(got, mods) {
		t.Fatalf("modules = %+v, %v", got, err)
	}
	if got, _ := st.CodeModules(ctx, "dev/s2"); len(got) != 0 {
		t.Fatalf("another session's modules: %+v", got)
	}
	if err := st.DeleteSessionModules(ctx, "dev/s1"); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.CodeModules(ctx, "dev/s1"); len(got) != 0 {
		t.Fatalf("after delete: %+v", got)
	}
}
