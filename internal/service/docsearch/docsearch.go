// Package docsearch is the search_docs tool of the sessions: the
// documentation of the configured dependencies, fetched and cut into
// chunks at "## " headers (index.go), and the code modules a session saved
// in its volume (modules.go), searched together in memory with BM25 and,
// when [tools.embeddings] is set, embeddings fused by reciprocal rank
// fusion (search.go).
//
// Chunks, vectors and module entries live in the store's docs table; a
// process keeps the index in memory, so a warm Lambda searches without
// reading DynamoDB again until the index's generation moves.
//
// Indexing never runs on a request: `sandstep serve` indexes at start, and
// the scheduled cleanup (the reaper, in AWS the ReaperFunction) runs
// IndexIfDue on every pass, which indexes every reindex_interval or when
// the configured docs changed.
package docsearch

import (
	"log/slog"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/store"
)

// Options configure a Service.
type Options struct {
	// Config supplies [tools] and [[sessions.dependencies]].
	Config *config.Config
	Store  *store.Store
	// Embedder is nil for BM25 alone (see NewEmbedder).
	Embedder *Embedder
	// HTTPClient fetches the documentation pages (default: a new client).
	HTTPClient *http.Client
	Logger     *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Service indexes and searches. It is safe for concurrent use.
type Service struct {
	cfg      config.ToolsConfig
	deps     []dependency
	st       *store.Store
	emb      *Embedder
	http     *http.Client
	log      *slog.Logger
	now      func() time.Time
	fingerpr string

	mu      sync.Mutex
	corpus  *corpus
	checked time.Time
}

// dependency is a configured package and its documentation pages.
type dependency struct {
	name string // the package name, without registry prefix or version
	spec string // as configured
	docs []string
}

// New returns a Service.
func New(opts Options) *Service {
	s := &Service{cfg: opts.Config.Tools, st: opts.Store, emb: opts.Embedder, http: opts.HTTPClient, log: opts.Logger, now: opts.Now}
	if s.http == nil {
		s.http = &http.Client{}
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	for _, d := range opts.Config.Sessions.Dependencies {
		s.deps = append(s.deps, dependency{name: PackageName(d.Package), spec: d.Package, docs: d.Docs})
	}
	s.fingerpr = s.fingerprint()
	return s
}

// Packages returns the names of the configured dependencies, in order.
func (s *Service) Packages() []string {
	out := make([]string, len(s.deps))
	for i, d := range s.deps {
		out[i] = d.name
	}
	return out
}

// Mode says how searches rank: "bm25" or "hybrid" (BM25 fused with
// embeddings).
func (s *Service) Mode() string {
	if s.emb != nil {
		return ModeHybrid
	}
	return ModeBM25
}

// Search modes.
const (
	ModeBM25   = "bm25"
	ModeHybrid = "hybrid"
)

// PackageName returns the name of a dependency spec: "lodash@4.17.21" and
// "npm:lodash" give "lodash", "@linear/sdk@1.2" gives "@linear/sdk",
// "pip:requests==2.32.3" gives "requests".
func PackageName(spec string) string {
	if rest, ok := strings.CutPrefix(spec, "pip:"); ok {
		if i := strings.IndexAny(rest, "=<>!~[; "); i >= 0 {
			rest = rest[:i]
		}
		return rest
	}
	if rest, ok := strings.CutPrefix(spec, "file:"); ok {
		// A local tarball, "file:/path/name-1.0.0.tgz": its file name
		// without the version.
		base := path.Base(strings.TrimSuffix(strings.TrimSuffix(rest, ".tgz"), ".tar.gz"))
		if i := strings.LastIndex(base, "-"); i > 0 && i+1 < len(base) && base[i+1] >= '0' && base[i+1] <= '9' {
			base = base[:i]
		}
		return base
	}
	spec = strings.TrimPrefix(spec, "npm:")
	if i := strings.LastIndex(spec, "@"); i > 0 {
		spec = spec[:i]
	}
	return spec
}

// resolvePackage maps a package named by a caller (name or spec) to the
// configured name; ok is false when no dependency has it.
func (s *Service) resolvePackage(p string) (string, bool) {
	for _, d := range s.deps {
		if p == d.name || p == d.spec || PackageName(p) == d.name {
			return d.name, true
		}
	}
	return "", false
}

func (s *Service) indexedPackages() []string {
	var out []string
	for _, d := range s.deps {
		if len(d.docs) > 0 && !slices.Contains(out, d.name) {
			out = append(out, d.name)
		}
	}
	return out
}
