package docsearch_test

import (
	"testing"

	"github.com/sandstep/sandstep/internal/service/docsearch"
)

// labelled are questions a model asks before writing code, each with the
// section that answers it. Some say it in the docs' own words, some in
// other words ("ticket" for issue, "throttling" for rate limits), which
// BM25 alone cannot match.
var labelled = []struct{ query, title string }{
	{"how do I authenticate with an API key", "Linear SDK > Authentication"},
	{"create a new issue in a team", "Linear SDK > Creating issues"},
	{"load the next page of results", "Linear SDK > Pagination"},
	{"verify the webhook signature", "Linear SDK > Webhooks"},
	{"how many requests per hour are allowed", "Linear SDK > Rate limits"},
	{"filter issues by state", "Linear SDK > Querying issues"},
	{"validate data without throwing", "Zod > Parsing data"},
	{"get the TypeScript type of a schema", "Zod > Type inference"},
	{"a field that may be missing", "Zod > Optional and nullable"},
	{"add a custom validation rule", "Zod > Transforms and refinements"},
	{"request hangs forever", "Requests > Timeouts"},
	{"retry failed requests with backoff", "Requests > Retries"},
	{"keep cookies between calls", "Requests > Sessions"},
	{"decode a JSON response body", "Requests > Responses"},
	{"open a ticket", "Linear SDK > Creating issues"},
	{"login credentials for the client", "Linear SDK > Authentication"},
	{"throttling quota exceeded", "Linear SDK > Rate limits"},
	{"who am I: the current user", "Linear SDK > Fetching the viewer"},
	{"group problems by field for a form", "Zod > Error handling"},
	{"send a bearer token", "Requests > Authentication"},
}

// recallAt5 is the share of labelled questions whose section is in the
// top 5.
func recallAt5(t *testing.T, svc *docsearch.Service, wantMode string) float64 {
	t.Helper()
	found := 0
	for _, l := range labelled {
		ans, err := svc.Search(testCtx(t), docsearch.Query{Text: l.query, K: 5})
		if err != nil {
			t.Fatal(err)
		}
		if ans.Mode != wantMode {
			t.Fatalf("mode %q, want %q (%s)", ans.Mode, wantMode, ans.Warning)
		}
		hit := false
		for _, r := range ans.Results {
			hit = hit || r.Title == l.title
		}
		if hit {
			found++
		} else {
			t.Logf("%s: missed %q", wantMode, l.query)
		}
	}
	return float64(found) / float64(len(labelled))
}

func TestRecallAt5(t *testing.T) {
	bm := newSetup(t, false, "")
	if _, err := bm.svc.Index(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	hy := newSetup(t, true, "")
	if _, err := hy.svc.Index(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	rBM25 := recallAt5(t, bm.svc, docsearch.ModeBM25)
	rHybrid := recallAt5(t, hy.svc, docsearch.ModeHybrid)
	t.Logf("recall@5 over %d labelled queries: BM25 %.2f, BM25+embeddings (RRF) %.2f", len(labelled), rBM25, rHybrid)
	if rBM25 < 0.7 {
		t.Errorf("BM25 recall@5 %.2f is below 0.7", rBM25)
	}
	if rHybrid < rBM25 || rHybrid < 0.9 {
		t.Errorf("fused recall@5 %.2f: want at least BM25's %.2f and 0.9", rHybrid, rBM25)
	}
}
