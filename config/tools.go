package config

import "time"

// ToolsConfig is [tools]: the LLM tools of the sessions (search_docs over
// the dependencies' documentation and the session's saved code modules,
// run_code), served as tool definitions and over MCP.
type ToolsConfig struct {
	// ChunkMaxChars bounds one documentation chunk; a longer "## " section
	// is cut at paragraph boundaries into parts.
	ChunkMaxChars int `toml:"chunk_max_chars"`
	// DocMaxBytes bounds one fetched documentation page.
	DocMaxBytes int `toml:"doc_max_bytes"`
	// FetchTimeout bounds the fetch of one documentation page.
	FetchTimeout Duration `toml:"fetch_timeout"`
	// ReindexInterval is how often the scheduled cleanup fetches the docs
	// again (unchanged chunks are skipped by content hash).
	ReindexInterval Duration `toml:"reindex_interval"`
	// CacheRefresh is how often a process holding the index in memory asks
	// the store whether it changed.
	CacheRefresh Duration `toml:"cache_refresh"`
	// DefaultK and MaxK: results of one search_docs call when the call
	// names no k, and the most it may ask for.
	DefaultK   int                   `toml:"default_k"`
	MaxK       int                   `toml:"max_k"`
	Embeddings ToolsEmbeddingsConfig `toml:"embeddings"`
}

// ToolsEmbeddingsConfig is [tools.embeddings]: an OpenAI-compatible
// /embeddings endpoint whose vectors are fused with BM25. No base URL means
// BM25 alone.
type ToolsEmbeddingsConfig struct {
	BaseURL   string   `toml:"base_url"`
	APIKeyEnv string   `toml:"api_key_env"`
	Model     string   `toml:"model"`
	BatchSize int      `toml:"batch_size"`
	Timeout   Duration `toml:"timeout"`
}

// Limits of [tools] values.
const (
	MaxToolsChunkChars = 16000 // a chunk item stays far under DynamoDB's 400 KB
	MaxToolsK          = 100
)

func (t *ToolsConfig) setDefaults() {
	t.ChunkMaxChars = 2000
	t.DocMaxBytes = 4 << 20
	t.FetchTimeout = Duration(30 * time.Second)
	t.ReindexInterval = Duration(6 * time.Hour)
	t.CacheRefresh = Duration(30 * time.Second)
	t.DefaultK = 5
	t.MaxK = 20
	t.Embeddings = ToolsEmbeddingsConfig{
		BaseURL:   "",
		APIKeyEnv: "SANDSTEP_EMBEDDINGS_API_KEY",
		Model:     "",
		BatchSize: 64,
		Timeout:   Duration(30 * time.Second),
	}
}

func (t *ToolsConfig) check(_ *Config, r *report) {
	const k = "tools"
	if t.ChunkMaxChars < 200 || t.ChunkMaxChars > MaxToolsChunkChars {
		r.add(k+".chunk_max_chars", "%s.chunk_max_chars: must be from 200 to %d, not %d", k, MaxToolsChunkChars, t.ChunkMaxChars)
	}
	atLeast(r, k+".doc_max_bytes", t.DocMaxBytes, 1024)
	positive(r, k+".fetch_timeout", t.FetchTimeout)
	if t.ReindexInterval.D() < time.Minute {
		r.add(k+".reindex_interval", "%s.reindex_interval: must be at least 1m, not %s", k, t.ReindexInterval)
	}
	positive(r, k+".cache_refresh", t.CacheRefresh)
	switch {
	case t.MaxK < 1 || t.MaxK > MaxToolsK:
		r.add(k+".max_k", "%s.max_k: must be from 1 to %d, not %d", k, MaxToolsK, t.MaxK)
	case t.DefaultK < 1 || t.DefaultK > t.MaxK:
		r.add(k+".default_k", "%s.default_k: must be from 1 to %s.max_k (%d), not %d", k, k, t.MaxK, t.DefaultK)
	}
	e := &t.Embeddings
	const ek = k + ".embeddings"
	e.BaseURL = baseURL(r, ek+".base_url", e.BaseURL)
	if e.BaseURL != "" && e.Model == "" {
		r.add(ek+".model", "%s.model: must name the embedding model when base_url is set (such as \"text-embedding-3-small\")", ek)
	}
	if e.BatchSize < 1 || e.BatchSize > 2048 {
		r.add(ek+".batch_size", "%s.batch_size: must be from 1 to 2048, not %d", ek, e.BatchSize)
	}
	positive(r, ek+".timeout", e.Timeout)
}
