package localstack

import (
	"context"
	"os"

	"github.com/sandstep/sandstep/internal/service/docsearch"
	"github.com/sandstep/sandstep/internal/service/store"
)

// startDocs wires the LLM tools' docs index when sessions are on, and
// indexes the docs now, in the background: serving does not wait for
// documentation sites. The reaper's passes index again when due.
func (s *Stack) startDocs(opts Options, st *store.Store) error {
	cfg := opts.Config
	if !cfg.Sessions.Enabled {
		return nil
	}
	emb, err := docsearch.NewEmbedder(cfg.Tools.Embeddings, os.Getenv, nil)
	if err != nil {
		return err
	}
	s.Docs = docsearch.New(docsearch.Options{Config: cfg, Store: st, Embedder: emb, Logger: s.log})
	if s.Reaper != nil {
		s.Reaper.Docs = s.Docs
	}
	ctx, stop := context.WithCancel(context.Background())
	s.stopDocs, s.docsDone = stop, make(chan struct{})
	go func() {
		defer close(s.docsDone)
		// Index logs what it did and every page it could not fetch.
		if _, err := s.Docs.Index(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("indexing the docs at start", "err", err)
		}
	}()
	return nil
}
