package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
)

func TestToolsDefaultsAndErrors(t *testing.T) {
	c, err := config.Parse([]byte(""), "config.toml", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tl := c.Tools
	if tl.ChunkMaxChars != 2000 || tl.DocMaxBytes != 4<<20 || tl.FetchTimeout.D() != 30*time.Second || tl.ReindexInterval.D() != 6*time.Hour ||
		tl.CacheRefresh.D() != 30*time.Second || tl.DefaultK != 5 || tl.MaxK != 20 || tl.Embeddings.BaseURL != "" ||
		tl.Embeddings.APIKeyEnv != "SANDSTEP_EMBEDDINGS_API_KEY" || tl.Embeddings.BatchSize != 64 || tl.Embeddings.Timeout.D() != 30*time.Second {
		t.Fatalf("defaults: %+v", tl)
	}
	c, err = config.Parse([]byte("[tools.embeddings]\nbase_url = \"http://127.0.0.1:11434/v1/\"\nmodel = \"nomic-embed-text\"\n"), "config.toml", t.TempDir())
	if err != nil || c.Tools.Embeddings.BaseURL != "http://127.0.0.1:11434/v1" {
		t.Fatalf("embeddings: %+v, %v", c, err)
	}
	for _, tc := range []struct{ toml, want string }{
		{"[tools]\nchunk_max_chars = 100\n", "config.toml:2: tools.chunk_max_chars: must be from 200 to 16000, not 100"},
		{"[tools]\nreindex_interval = \"10s\"\n", "config.toml:2: tools.reindex_interval: must be at least 1m, not 10s"},
		{"[tools]\ndefault_k = 30\n", "config.toml:2: tools.default_k: must be from 1 to tools.max_k (20), not 30"},
		{"[tools]\nmax_k = 0\n", "config.toml:2: tools.max_k: must be from 1 to 100, not 0"},
		{"[tools.embeddings]\nbase_url = \"http://x\"\n", "config.toml:1: tools.embeddings.model: must name the embedding model when base_url is set (such as \"text-embedding-3-small\")"},
		{"[tools.embeddings]\nbase_url = \"ftp://x\"\nmodel = \"m\"\n", "config.toml:2: tools.embeddings.base_url: must be an http or https URL with a host, such as \"https://example.com\""},
		{"[tools]\nchunk_size = 3\n", "config.toml:2: unknown key \"tools.chunk_size\""},
	} {
		_, err := config.Parse([]byte(tc.toml), "config.toml", t.TempDir())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v\nwant %s", tc.toml, err, tc.want)
		}
	}
}
