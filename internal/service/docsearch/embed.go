package docsearch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/sandstep/sandstep/config"
)

// Embedder turns texts into vectors through an OpenAI-compatible
// POST <base>/embeddings.
type Embedder struct {
	base    string
	key     string
	model   string
	batch   int
	timeout time.Duration
	client  *http.Client
}

// NewEmbedder returns the embedder of [tools.embeddings], or nil when no
// base URL is set (BM25 alone). The API key is read through getenv.
func NewEmbedder(c config.ToolsEmbeddingsConfig, getenv func(string) string, client *http.Client) (*Embedder, error) {
	if c.BaseURL == "" {
		return nil, nil
	}
	key := ""
	if c.APIKeyEnv != "" {
		key = getenv(c.APIKeyEnv)
		if key == "" {
			return nil, fmt.Errorf("config: tools.embeddings.api_key_env: environment variable %s is not set or is empty (set api_key_env = \"\" for a server without a key)", c.APIKeyEnv)
		}
	}
	if client == nil {
		client = &http.Client{}
	}
	return &Embedder{base: c.BaseURL, key: key, model: c.Model, batch: max(1, c.BatchSize), timeout: c.Timeout.D(), client: client}, nil
}

// Model names the embedding model; a stored vector of another model is
// embedded again.
func (e *Embedder) Model() string { return e.model }

// EmbedError is a failed /embeddings request; it never holds the key.
type EmbedError struct {
	Status int
	Detail string
}

func (e *EmbedError) Error() string {
	if e.Status == 0 {
		return "embeddings: " + e.Detail
	}
	return fmt.Sprintf("embeddings: HTTP %d: %s", e.Status, e.Detail)
}

// Embed returns one unit-length vector per text, in order, sending
// batch_size texts per request.
func (e *Embedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, 0, len(texts))
	for start := 0; start < len(texts); start += e.batch {
		vs, err := e.request(ctx, texts[start:min(start+e.batch, len(texts))])
		if err != nil {
			return nil, err
		}
		out = append(out, vs...)
	}
	return out, nil
}

func (e *Embedder) request(ctx context.Context, texts []string) ([][]float32, error) {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	body, err := json.Marshal(map[string]any{"model": e.model, "input": texts})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.base+"/embeddings", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if e.key != "" {
		req.Header.Set("Authorization", "Bearer "+e.key)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, &EmbedError{Detail: e.hide(err.Error())}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, &EmbedError{Status: resp.StatusCode, Detail: e.hide(err.Error())}
	}
	if resp.StatusCode != http.StatusOK {
		detail := strings.TrimSpace(string(raw))
		if len(detail) > 300 {
			detail = detail[:300] + "..."
		}
		return nil, &EmbedError{Status: resp.StatusCode, Detail: e.hide(detail)}
	}
	var parsed struct {
		Data []struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &parsed); err != nil {
		return nil, &EmbedError{Status: resp.StatusCode, Detail: "the answer is not an embeddings list: " + e.hide(err.Error())}
	}
	if len(parsed.Data) != len(texts) || len(texts) == 0 {
		return nil, &EmbedError{Status: resp.StatusCode, Detail: fmt.Sprintf("asked for %d embeddings, got %d", len(texts), len(parsed.Data))}
	}
	out := make([][]float32, len(texts))
	dim := len(parsed.Data[0].Embedding)
	for _, d := range parsed.Data {
		if d.Index < 0 || d.Index >= len(texts) || out[d.Index] != nil {
			return nil, &EmbedError{Status: resp.StatusCode, Detail: fmt.Sprintf("embedding index %d out of place", d.Index)}
		}
		if len(d.Embedding) == 0 || len(d.Embedding) != dim {
			return nil, &EmbedError{Status: resp.StatusCode, Detail: fmt.Sprintf("embeddings of %d and %d dimensions in one answer", dim, len(d.Embedding))}
		}
		out[d.Index] = unit(d.Embedding)
	}
	return out, nil
}

func (e *Embedder) hide(s string) string {
	if e.key == "" {
		return s
	}
	return strings.ReplaceAll(s, e.key, "[redacted]")
}

// unit scales v to length 1, so a dot product is the cosine.
func unit(v []float32) []float32 {
	var n float64
	for _, f := range v {
		n += float64(f) * float64(f)
	}
	if n == 0 {
		return v
	}
	inv := float32(1 / math.Sqrt(n))
	for i := range v {
		v[i] *= inv
	}
	return v
}

func dot(a, b []float32) float32 {
	if len(a) != len(b) {
		return -2 // vectors of another model: ranked last
	}
	var s float32
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}
