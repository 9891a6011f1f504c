package docsearch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/docsearch"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
)

func TestMain(m *testing.M) { os.Exit(testddb.RunTests(m)) }

// quiet drops the indexer's log lines; the tests read its reports.
var quiet = slog.New(slog.DiscardHandler)

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// docsServer is a fixture documentation site on 127.0.0.1 whose pages a
// test may change.
type docsServer struct {
	*httptest.Server
	mu    sync.Mutex
	pages map[string]string
	hits  atomic.Int64
}

func newDocsServer(t testing.TB, pages map[string]string) *docsServer {
	d := &docsServer{pages: pages}
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.hits.Add(1)
		d.mu.Lock()
		body, ok := d.pages[r.URL.Path]
		d.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/markdown; charset=utf-8")
		fmt.Fprint(w, body)
	}))
	t.Cleanup(d.Close)
	return d
}

func (d *docsServer) set(path, body string) {
	d.mu.Lock()
	d.pages[path] = body
	d.mu.Unlock()
}

func readFile(t testing.TB, name string) string {
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fakeEmbeddings is an OpenAI-compatible /embeddings server on 127.0.0.1.
// Its vectors are bags of concepts: words of one meaning (a small synonym
// table) share a dimension, other words hash to their own, so it finds
// what a real model finds by meaning and BM25 misses by wording. It counts
// the texts it embedded, and fails while told to.
type fakeEmbeddings struct {
	*httptest.Server
	texts  atomic.Int64
	fail   atomic.Bool
	inputs sync.Map // text -> times embedded
	key    string
}

const fakeDims = 256

var concepts = map[string]string{}

func init() {
	for concept, words := range map[string]string{
		"auth":     "auth authenticate authentication login credential credentials key apikey token accesstoken oauth sign",
		"page":     "page pagination paginate next cursor cursors more fetchnext",
		"limit":    "limit limits rate ratelimited throttle throttling quota exceeded many",
		"validate": "validate validation check verify parse safeparse rule",
		"time":     "timeout timeouts forever hang hangs wait slow deadline",
		"retry":    "retry retries backoff again failed",
		"create":   "create creating creation new make",
		"issue":    "issue issues ticket tickets bug",
		"hook":     "webhook webhooks signature hmac signed",
		"session":  "session sessions cookie cookies reuse connection",
		"type":     "type types infer inference static typescript",
		"error":    "error errors exception throw throws raise problems",
		"optional": "optional nullable missing undefined null default",
		"user":     "user viewer me current whoami",
		"json":     "json decode body",
	} {
		for _, w := range strings.Fields(words) {
			concepts[w] = concept
		}
	}
}

func fakeVector(text string) []float32 {
	v := make([]float32, fakeDims)
	for _, tok := range docsearch.Tokenize(text) {
		if c, ok := concepts[tok]; ok {
			v[hashDim("concept:"+c)] += 1
			continue
		}
		v[hashDim(tok)] += 0.3
	}
	return v
}

func hashDim(s string) int {
	h := fnv.New32a()
	h.Write([]byte(s))
	return int(h.Sum32() % fakeDims)
}

func newFakeEmbeddings(t testing.TB, key string) *fakeEmbeddings {
	f := &fakeEmbeddings{key: key}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/embeddings" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		if f.key != "" && r.Header.Get("Authorization") != "Bearer "+f.key {
			http.Error(w, `{"error":{"message":"bad key"}}`, http.StatusUnauthorized)
			return
		}
		if f.fail.Load() {
			http.Error(w, `{"error":{"message":"overloaded"}}`, http.StatusServiceUnavailable)
			return
		}
		var req struct {
			Model string   `json:"model"`
			Input []string `json:"input"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Model == "" {
			http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
			return
		}
		type datum struct {
			Object    string    `json:"object"`
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		out := struct {
			Object string  `json:"object"`
			Data   []datum `json:"data"`
			Model  string  `json:"model"`
		}{Object: "list", Model: req.Model}
		// Answered in reverse order: clients must place by index.
		for i := len(req.Input) - 1; i >= 0; i-- {
			f.texts.Add(1)
			n, _ := f.inputs.LoadOrStore(req.Input[i], new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			out.Data = append(out.Data, datum{Object: "embedding", Index: i, Embedding: fakeVector(req.Input[i])})
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(f.Close)
	return f
}

// setup is a docs index on DynamoDB Local over a fixture docs site.
type setup struct {
	docs *docsServer
	emb  *fakeEmbeddings
	st   *store.Store
	cfg  *config.Config
	svc  *docsearch.Service
	db   *testddb.TestEnv
}

// newSetup indexes testdata's pages as three dependencies; withEmb adds
// the fake embedding server. extraTOML is appended to the config.
func newSetup(t testing.TB, withEmb bool, extraTOML string) *setup {
	t.Helper()
	s := &setup{docs: newDocsServer(t, map[string]string{
		"/linear.md": readFile(t, "linear.md"), "/zod.md": readFile(t, "zod.md"), "/requests.md": readFile(t, "requests.md"),
	})}
	toml := fmt.Sprintf(`
[[sessions.dependencies]]
package = "@linear/sdk@40.0.0"
docs = ["%[1]s/linear.md"]

[[sessions.dependencies]]
package = "zod"
docs = ["%[1]s/zod.md"]

[[sessions.dependencies]]
package = "pip:requests==2.32.3"
docs = ["%[1]s/requests.md", "%[1]s/missing.md"]
`, s.docs.URL)
	toml += extraTOML
	return finishSetup(t, s, toml, withEmb)
}

// finishSetup parses the config, adds the fake embedding server's table
// when withEmb and s has none yet, and builds the service on its own
// tables.
func finishSetup(t testing.TB, s *setup, toml string, withEmb bool) *setup {
	t.Helper()
	if withEmb && s.emb == nil {
		s.emb = newFakeEmbeddings(t, "emb-secret-123")
		toml += fmt.Sprintf("\n[tools.embeddings]\nbase_url = %q\nmodel = \"fake-concepts\"\napi_key_env = \"TEST_EMB_KEY\"\nbatch_size = 7\n", s.emb.URL+"/v1")
	}
	cfg, err := config.Parse([]byte(toml), "config.toml", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s.cfg = cfg
	s.db = testddb.ForTests(t)
	s.st = store.NewLocal(s.db.Endpoint, s.db.Prefix)
	var emb *docsearch.Embedder
	if withEmb {
		emb, err = docsearch.NewEmbedder(cfg.Tools.Embeddings, func(string) string { return "emb-secret-123" }, nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	s.svc = docsearch.New(docsearch.Options{Config: cfg, Store: s.st, Embedder: emb, Logger: quiet})
	return s
}
