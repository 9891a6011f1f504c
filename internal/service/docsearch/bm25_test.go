package docsearch

import (
	"reflect"
	"testing"
)

func TestTokenize(t *testing.T) {
	got := Tokenize("How do I call createIssue with the API_KEY? Issues, queries and HTTP2.")
	want := []string{"call", "createissue", "create", "issue", "apikey", "api", "key", "issue", "query", "http2"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Tokenize = %q\nwant       %q", got, want)
	}
}

func TestBM25Ranking(t *testing.T) {
	docs := [][]string{
		Tokenize("create an issue in a team"),
		Tokenize("pagination of issues with cursors; issues issues"),
		Tokenize("authentication with an API key"),
		Tokenize("unrelated text about cooking pasta"),
	}
	x := NewBM25(docs)
	hits := x.Search(Tokenize("create issue"), 10, nil)
	if len(hits) != 2 || hits[0].Doc != 0 || hits[1].Doc != 1 {
		t.Fatalf("hits = %+v", hits)
	}
	if hits := x.Search(Tokenize("api key"), 10, func(d int) bool { return d != 2 }); len(hits) != 0 {
		t.Fatalf("a filtered document was returned: %+v", hits)
	}
	if hits := x.Search(Tokenize("nothing matches zzz"), 10, nil); len(hits) != 0 {
		t.Fatalf("hits for no match: %+v", hits)
	}
	if hits := x.Search(Tokenize("issue"), 1, nil); len(hits) != 1 {
		t.Fatalf("k=1 gave %d hits", len(hits))
	}
	// A document scored from outside ranks like the same document inside.
	extra := x.ScoreExtra(Tokenize("authentication key"), [][]string{Tokenize("authentication with an API key"), Tokenize("pasta")})
	inside := x.Search(Tokenize("authentication key"), 1, nil)
	if extra[1] != 0 || extra[0] <= 0 || inside[0].Doc != 2 || extra[0] > inside[0].Score*1.5 || extra[0] < inside[0].Score/1.5 {
		t.Fatalf("extra scores %v against inside %+v", extra, inside)
	}
}
