package docsearch

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sandstep/sandstep/internal/service/store"
)

// indexLease bounds how long one indexing may hold the docs index before
// another scheduler may take it over (the process died).
const indexLease = 15 * time.Minute

// Report is what one indexing did.
type Report struct {
	// Skipped says why nothing was done ("" when the docs were indexed).
	Skipped   string `json:"skipped,omitempty"`
	Packages  int    `json:"packages"`
	Pages     int    `json:"pages"`
	Chunks    int    `json:"chunks"`
	Written   int    `json:"written"`
	Unchanged int    `json:"unchanged"`
	Deleted   int    `json:"deleted"`
	Embedded  int    `json:"embedded"`
	// Failures are pages that could not be fetched (their chunks stay as
	// they were) and embeddings that could not be made (the chunks are
	// stored without vectors and embedded on the next indexing).
	Failures []Failure `json:"failures,omitempty"`
}

// Failure is one page or step that failed; the last indexing's are kept
// in the store (see Status).
type Failure = store.DocsFailure

// Status is what GET /v1/tools says of the docs index.
type Status struct {
	// IndexedAt is when the docs were last indexed; nil before the first
	// indexing ended.
	IndexedAt *time.Time `json:"indexed_at"`
	// Failures are the pages the last indexing could not fetch (they
	// keep their previous chunks) and embeddings it could not make.
	Failures []Failure `json:"failures"`
}

// Status reads the state of the docs index from the store.
func (s *Service) Status(ctx context.Context) (Status, error) {
	m, err := s.st.GetDocsMeta(ctx)
	if err != nil {
		return Status{}, err
	}
	st := Status{Failures: m.Failures}
	if st.Failures == nil {
		st.Failures = []Failure{}
	}
	if !m.IndexedAt.IsZero() {
		st.IndexedAt = &m.IndexedAt
	}
	return st, nil
}

// IndexIfDue indexes when the docs were never indexed, reindex_interval
// has passed since the last indexing, or the configured docs changed; the
// scheduled cleanup calls it on every pass.
func (s *Service) IndexIfDue(ctx context.Context) (Report, error) {
	meta, err := s.st.GetDocsMeta(ctx)
	if err != nil {
		return Report{}, err
	}
	if !meta.IndexedAt.IsZero() && meta.Fingerprint == s.fingerpr && s.now().Sub(meta.IndexedAt) < s.cfg.ReindexInterval.D() {
		return Report{Skipped: "not due until " + meta.IndexedAt.Add(s.cfg.ReindexInterval.D()).UTC().Format(time.RFC3339)}, nil
	}
	return s.Index(ctx)
}

// Index fetches every documentation page now and brings the stored chunks
// in line: new and changed chunks are written (and embedded), chunks no
// longer on their page deleted, unchanged ones left alone. A page that
// cannot be fetched is reported in the Report, not returned as an error;
// an error means the store failed. Another process indexing at the same
// time makes this one a no-op.
func (s *Service) Index(ctx context.Context) (Report, error) {
	owner := "idx-" + rand.Text()
	if _, err := s.st.ClaimDocsIndex(ctx, owner, s.now(), indexLease); errors.Is(err, store.ErrConflict) {
		return Report{Skipped: "another process is indexing"}, nil
	} else if err != nil {
		return Report{}, err
	}
	rep, err := s.indexLeased(ctx, owner)
	if err != nil {
		// Stopped or failed: the next scheduler may start at once.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if rerr := s.st.ReleaseDocsIndex(rctx, owner); rerr != nil {
			s.log.Warn("releasing the docs index lease", "err", rerr)
		}
		return rep, err
	}
	s.invalidate()
	s.log.Info("docs indexed", "packages", rep.Packages, "pages", rep.Pages, "chunks", rep.Chunks, "written", rep.Written,
		"unchanged", rep.Unchanged, "deleted", rep.Deleted, "embedded", rep.Embedded, "failures", len(rep.Failures))
	for _, f := range rep.Failures {
		s.log.Warn("docs indexing failure", "package", f.Package, "url", f.URL, "err", f.Error)
	}
	return rep, nil
}

// indexLeased is Index while owner holds the lease.
func (s *Service) indexLeased(ctx context.Context, owner string) (Report, error) {
	meta, err := s.st.GetDocsMeta(ctx)
	if err != nil {
		return Report{}, err
	}
	var rep Report
	pkgs := s.indexedPackages()
	for _, name := range pkgs {
		if err := s.indexPackage(ctx, name, &rep); err != nil {
			return rep, err
		}
	}
	for _, old := range meta.Packages {
		if !slices.Contains(pkgs, old) {
			if err := s.st.DeleteDocPackage(ctx, old); err != nil {
				return rep, err
			}
			rep.Deleted++
		}
	}
	if _, err := s.st.FinishDocsIndex(ctx, owner, s.now(), s.fingerpr, pkgs, rep.Failures, rep.Written+rep.Deleted > 0); err != nil {
		return rep, err
	}
	return rep, nil
}

func (s *Service) indexPackage(ctx context.Context, name string, rep *Report) error {
	rep.Packages++
	var urls []string
	for _, d := range s.deps {
		if d.name == name {
			urls = append(urls, d.docs...)
		}
	}
	existing, err := s.st.DocChunks(ctx, name)
	if err != nil {
		return err
	}
	have := make(map[string]store.DocChunk, len(existing))
	for _, c := range existing {
		have[c.Key()] = c
	}
	keep := make(map[string]bool) // keys still wanted
	fetched := make(map[string]bool)
	var write []store.DocChunk
	now := s.now()
	for _, u := range urls {
		if fetched[u] {
			continue
		}
		page, err := s.fetch(ctx, u)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			rep.Failures = append(rep.Failures, Failure{Package: name, URL: u, Error: err.Error()})
			for k, c := range have {
				if c.URL == u {
					keep[k] = true // a page that cannot be fetched keeps what it had
				}
			}
			continue
		}
		fetched[u] = true
		rep.Pages++
		for i, sec := range Split(page, s.cfg.ChunkMaxChars) {
			c := store.DocChunk{Package: name, URL: u, Hash: sec.Hash(), Title: sec.Title, Text: sec.Text, Ord: i, IndexedAt: now}
			if keep[c.Key()] {
				continue // the same section twice on a page
			}
			keep[c.Key()] = true
			rep.Chunks++
			if old, ok := have[c.Key()]; ok && (s.emb == nil || (old.Model == s.emb.Model() && len(old.Vector) > 0)) {
				rep.Unchanged++
				continue
			}
			write = append(write, c)
		}
	}
	if s.emb != nil && len(write) > 0 {
		texts := make([]string, len(write))
		for i, c := range write {
			texts[i] = embedText(c.Title, c.Text)
		}
		vecs, err := s.emb.Embed(ctx, texts)
		if err != nil {
			rep.Failures = append(rep.Failures, Failure{Package: name, Error: err.Error()})
		} else {
			for i := range write {
				write[i].Vector, write[i].Model = vecs[i], s.emb.Model()
			}
			rep.Embedded += len(write)
		}
	}
	if err := s.st.PutDocChunks(ctx, write); err != nil {
		return err
	}
	rep.Written += len(write)
	var gone []string
	for k := range have {
		if !keep[k] {
			gone = append(gone, k)
		}
	}
	if err := s.st.DeleteDocChunks(ctx, name, gone); err != nil {
		return err
	}
	rep.Deleted += len(gone)
	return nil
}

// fetch reads one documentation page, bounded in time and size.
func (s *Service) fetch(ctx context.Context, u string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.FetchTimeout.D())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", "text/markdown, text/plain;q=0.9, */*;q=0.1")
	req.Header.Set("User-Agent", "sandstep-docs-indexer")
	resp, err := s.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	limit := int64(s.cfg.DocMaxBytes)
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return "", fmt.Errorf("reading the page: %w", err)
	}
	if int64(len(b)) > limit {
		return "", fmt.Errorf("the page is larger than tools.doc_max_bytes (%d bytes)", limit)
	}
	return string(b), nil
}

// fingerprint identifies what an index built now would hold.
func (s *Service) fingerprint() string {
	h := sha256.New()
	fmt.Fprintf(h, "chunk=%d\n", s.cfg.ChunkMaxChars)
	if s.emb != nil {
		fmt.Fprintf(h, "model=%s\n", s.emb.Model())
	}
	for _, d := range s.deps {
		fmt.Fprintf(h, "%s\t%s\n", d.name, strings.Join(d.docs, "\t"))
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// embedText is what is embedded for a chunk or a module: its title gives
// the text its context.
func embedText(title, text string) string {
	if title == "" {
		return text
	}
	return title + "\n\n" + text
}
