package search_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/search"
	"github.com/sandstep/sandstep/internal/service/store"
)

// searx is a fake SearxNG instance answering each query from answers
// (query -> results as url|title|content lines); unknown queries get no
// results.
func searx(t *testing.T, answers map[string][]string) (*search.SearxNG, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		var b strings.Builder
		for i, line := range answers[r.URL.Query().Get("q")] {
			f := strings.Split(line, "|")
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"url":%q,"title":%q,"content":%q,"engine":"bing","engines":["bing"],"positions":[%d],"score":1,"category":"general"}`, f[0], f[1], f[2], i+1)
		}
		fmt.Fprintf(w, `{"query":%q,"number_of_results":0,"results":[%s],"answers":[],"corrections":[],"infoboxes":[],"suggestions":[],"unresponsive_engines":[]}`, r.URL.Query().Get("q"), b.String())
	}))
	t.Cleanup(srv.Close)
	s, err := search.NewSearxNG(srv.URL, fast)
	if err != nil {
		t.Fatal(err)
	}
	return s, &hits
}

func failing(t *testing.T, status int) (*search.SearxNG, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(status)
		io.WriteString(w, "upstream trouble")
	}))
	t.Cleanup(srv.Close)
	s, _ := search.NewSearxNG(srv.URL, fast)
	return s, &hits
}

func urls(ss []store.Source) []string {
	var out []string
	for i, s := range ss {
		if s.N != i+1 || s.Origin != store.OriginSearch {
			out = append(out, fmt.Sprintf("BAD N=%d origin=%s", s.N, s.Origin))
		}
		out = append(out, s.URL)
	}
	return out
}

func TestDiscoverRanksDedupesAndCaps(t *testing.T) {
	s, _ := searx(t, map[string][]string{
		"go": {
			"https://Go.dev:443/?utm_source=x#top|Go|Go is a language.",
			"https://example.com/a|A|first a",
			"https://example.com/b|B|b",
			"https://example.com/c|C|c",
		},
		"go overview": {
			"https://example.com/b?utm_medium=y|B2|b again",
			"https://go.dev/|Go dev|other snippet",
			"https://seed.example/x|Seed page|seed snippet",
			"https://example.com/d|D|d",
		},
	})
	d, err := search.Discover(ctx(t), []search.Backend{s}, "go", []string{"go overview"}, []string{"https://SEED.example/x#frag", "http://other.example:80"}, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Seeds first in their order; then best rank 1 (go.dev and b, each in
	// two answers, go.dev seen first), rank 2 (a), rank 4 (c before d, seen
	// first), cut at 4 besides the seeds.
	want := []string{
		"https://seed.example/x", "http://other.example/",
		"https://go.dev/", "https://example.com/b", "https://example.com/a", "https://example.com/c",
	}
	if got := urls(d.Sources); !reflect.DeepEqual(got, want) {
		t.Fatalf("sources:\n got  %v\n want %v", got, want)
	}
	// A seed found by a search gets its title and snippet; the best-ranked
	// answer's text wins.
	if s := d.Sources[0]; s.Title != "Seed page" || s.Snippet != "seed snippet" {
		t.Errorf("seed source = %+v", s)
	}
	if s := d.Sources[1]; s.Title != "" || s.Snippet != "" {
		t.Errorf("seed without result = %+v", s)
	}
	if s := d.Sources[2]; s.Title != "Go" || s.Snippet != "Go is a language." {
		t.Errorf("go.dev = %+v", s)
	}
	if s := d.Sources[3]; s.Title != "B2" || s.Snippet != "b again" {
		t.Errorf("example.com/b = %+v (rank 1 answer should win over rank 3)", s)
	}
	wantQ := []search.QueryOutcome{{Query: "go", Backend: "searxng", Results: 4}, {N: 1, Query: "go overview", Backend: "searxng", Results: 4}}
	if !reflect.DeepEqual(d.Queries, wantQ) {
		t.Errorf("queries = %+v", d.Queries)
	}
}

// More answers win between equal best ranks.
func TestDiscoverFrequencyBreaksRankTies(t *testing.T) {
	s, _ := searx(t, map[string][]string{
		"q":   {"https://a.example/|a|a", "https://b.example/|b|b"},
		"q 2": {"https://c.example/|c|c", "https://b.example/|b|b"},
		"q 3": {"https://d.example/|d|d", "https://b.example/|b|b"},
	})
	d, err := search.Discover(ctx(t), []search.Backend{s}, "q", []string{"q 2", "q 3"}, nil, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"https://a.example/", "https://c.example/", "https://d.example/", "https://b.example/"}
	if got := urls(d.Sources); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v want %v", got, want)
	}
	s2, _ := searx(t, map[string][]string{
		"q":   {"https://a.example/|a|a", "https://b.example/|b|b"},
		"q 2": {"https://b.example/|b|b", "https://c.example/|c|c"},
	})
	d, _ = search.Discover(ctx(t), []search.Backend{s2}, "q", []string{"q 2"}, nil, 10, nil)
	want = []string{"https://b.example/", "https://a.example/", "https://c.example/"}
	if got := urls(d.Sources); !reflect.DeepEqual(got, want) {
		t.Fatalf("b is rank 1 in two answers, a in one: got %v want %v", got, want)
	}
}

// The first backend fails, the second answers; a backend that refused
// outright is not asked again; an empty answer passes to the next one.
func TestDiscoverFallsBackInOrder(t *testing.T) {
	down, downHits := failing(t, http.StatusBadGateway)
	refused, refusedHits := failing(t, http.StatusUnauthorized)
	empty, emptyHits := searx(t, nil)
	wikiSrv, wikiHits := fakeWikipedia(t, wikipediaAnswer)
	wiki, _ := search.NewWikipedia("en", wikiSrv.URL, fast)

	d, err := search.Discover(ctx(t), []search.Backend{down, refused, empty, wiki}, "go", search.RelatedQueries("go", 2), nil, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Sources) != 3 || !strings.HasPrefix(d.Sources[0].URL, wikiSrv.URL+"/wiki/Go_(programming_language)") {
		t.Fatalf("sources = %+v", d.Sources)
	}
	if len(d.Queries) != 3 {
		t.Fatalf("queries = %+v", d.Queries)
	}
	for i, q := range d.Queries {
		if q.Backend != "wikipedia" || q.Results != 3 {
			t.Errorf("query %d = %+v", i, q)
		}
	}
	for i, q := range d.Queries {
		if q.N != i || !strings.Contains(q.Errors[0].Error(), "HTTP 502") {
			t.Errorf("query %d = %+v", i, q)
		}
	}
	// 3 queries x 3 attempts on the 502 backend; the refusing one is asked
	// at most once per query (the queries run at once: those that reach it
	// after its refusal skip it).
	if downHits.Load() != 9 || refusedHits.Load() < 1 || refusedHits.Load() > 3 || emptyHits.Load() != 3 || wikiHits.Load() != 3 {
		t.Errorf("requests: down %d refused %d empty %d wiki %d", downHits.Load(), refusedHits.Load(), emptyHits.Load(), wikiHits.Load())
	}
}

// A backend that refused outright is not asked by a query that comes to it
// after the refusal.
func TestDiscoverSkipsARefusingBackend(t *testing.T) {
	refused, refusedHits := failing(t, http.StatusUnauthorized)
	// The first backend holds the related queries until the query itself
	// is done, so that they reach the refusing backend after its refusal.
	first, _ := searx(t, nil)
	queryDone := make(chan struct{})
	held := heldBackend{Backend: first, hold: func(q string) {
		if q != "go" {
			<-queryDone
		}
	}}
	wikiSrv, _ := fakeWikipedia(t, wikipediaAnswer)
	wiki, _ := search.NewWikipedia("en", wikiSrv.URL, fast)
	d, err := search.Discover(ctx(t), []search.Backend{held, refused, wiki}, "go", search.RelatedQueries("go", 3), nil, 10, func(o search.QueryOutcome) {
		if o.N == 0 {
			close(queryDone)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if refusedHits.Load() != 1 {
		t.Errorf("the refusing backend was asked %d times", refusedHits.Load())
	}
	refusals := 0
	for _, q := range d.Queries {
		refusals += len(q.Errors)
		if q.Backend != "wikipedia" {
			t.Errorf("query %+v", q)
		}
	}
	if refusals != 1 || len(d.Queries[0].Errors) != 1 {
		t.Errorf("%d refusals recorded: %+v", refusals, d.Queries)
	}
}

type heldBackend struct {
	search.Backend
	hold func(query string)
}

func (h heldBackend) Search(ctx context.Context, q string, limit int) ([]search.Result, error) {
	h.hold(q)
	return h.Backend.Search(ctx, q, limit)
}

// hanging is a SearxNG that never answers: each request is held until the
// client gives up. It counts requests per query and the most in flight at
// once.
func hanging(t *testing.T, h search.HTTP) (*search.SearxNG, func() (perQuery map[string]int, maxInFlight int)) {
	t.Helper()
	var (
		mu       sync.Mutex
		perQuery = map[string]int{}
		inFlight int
		most     int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		perQuery[r.URL.Query().Get("q")]++
		inFlight++
		most = max(most, inFlight)
		mu.Unlock()
		<-r.Context().Done()
		mu.Lock()
		inFlight--
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	s, err := search.NewSearxNG(srv.URL, h)
	if err != nil {
		t.Fatal(err)
	}
	return s, func() (map[string]int, int) {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(perQuery), most
	}
}

// A backend that never answers costs its timeout once per query, with the
// queries asked at once; the next backend answers each of them, and each
// outcome is reported as soon as it is known.
func TestDiscoverHangingBackendCostsOneTimeoutPerQuery(t *testing.T) {
	stuck, stats := hanging(t, search.HTTP{Timeout: time.Second, Attempts: 3, Backoff: time.Millisecond})
	wikiSrv, wikiHits := fakeWikipedia(t, wikipediaAnswer)
	wiki, _ := search.NewWikipedia("en", wikiSrv.URL, fast)
	related := search.RelatedQueries("go", 3)
	var reported []int
	d, err := search.Discover(ctx(t), []search.Backend{stuck, wiki}, "go", related, nil, 10, func(o search.QueryOutcome) {
		reported = append(reported, o.N)
		if o.Backend != "wikipedia" || len(o.Errors) != 1 {
			t.Errorf("outcome %+v", o)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	perQuery, most := stats()
	for _, q := range append([]string{"go"}, related...) {
		if perQuery[q] != 1 {
			t.Errorf("query %q reached the hanging backend %d times, want once", q, perQuery[q])
		}
	}
	if most != 4 {
		t.Errorf("at most %d queries were in flight at once, want all 4", most)
	}
	if wikiHits.Load() != 4 || len(d.Sources) != 3 {
		t.Errorf("wikipedia asked %d times, %d sources", wikiHits.Load(), len(d.Sources))
	}
	slices.Sort(reported)
	if !slices.Equal(reported, []int{0, 1, 2, 3}) {
		t.Errorf("reported %v", reported)
	}
	for _, q := range d.Queries {
		if e := q.Errors[0]; !strings.Contains(e.Error(), "search: searxng: no answer within 1s") || !errors.Is(e, context.DeadlineExceeded) {
			t.Errorf("error %v", e)
		}
	}
}

// When every search fails and there are no seeds, the error names each
// backend once, with its reason and how many queries it failed.
func TestDiscoverNoSourceNamesEachBackend(t *testing.T) {
	stuck, _ := hanging(t, search.HTTP{Timeout: 100 * time.Millisecond})
	downSrv, _ := flaky(t, []int{503, 503, 503, 503, 503, 503}, nil, wikipediaAnswer)
	down, _ := search.NewWikipedia("en", downSrv.URL, fast)
	_, err := search.Discover(ctx(t), []search.Backend{stuck, down}, "go", search.RelatedQueries("go", 1), nil, 10, nil)
	var ns *search.NoSourceError
	if !errors.As(err, &ns) || ns.Queries != 2 || len(ns.Errors) != 4 {
		t.Fatalf("err = %#v", err)
	}
	want := "search: no source found: every search failed: searxng: no answer within 100ms (2 of 2 queries); wikipedia: HTTP 503 Service Unavailable: busy (after 3 attempts) (2 of 2 queries)"
	if err.Error() != want {
		t.Errorf("err = %q\nwant  %q", err, want)
	}
}

func TestDiscoverEveryBackendFails(t *testing.T) {
	down, _ := failing(t, http.StatusServiceUnavailable)
	_, err := search.Discover(ctx(t), []search.Backend{down}, "go", nil, nil, 10, nil)
	var e *search.Error
	if err == nil || !errors.As(err, &e) || e.Backend != "searxng" || err.Error() != "search: no source found: every search failed: searxng: HTTP 503 Service Unavailable: upstream trouble (after 3 attempts)" {
		t.Fatalf("err = %v", err)
	}
	// With seeds the job still has sources; the failure is in Queries.
	d, err := search.Discover(ctx(t), []search.Backend{down}, "go", nil, []string{"https://a.example/"}, 10, nil)
	if err != nil || len(d.Sources) != 1 || len(d.Queries) != 1 || d.Queries[0].Backend != "" || len(d.Queries[0].Errors) != 1 {
		t.Fatalf("d = %+v, err = %v", d, err)
	}
}

// Seeds are always kept, even past the cap; no answer at all is no error.
func TestDiscoverSeedsBeyondCap(t *testing.T) {
	s, _ := searx(t, map[string][]string{"q": {"https://r.example/|r|r"}})
	seeds := []string{"https://a.example/1", "https://a.example/2", "https://A.example/1#dup", "https://a.example/3"}
	d, err := search.Discover(ctx(t), []search.Backend{s}, "q", nil, seeds, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"https://a.example/1", "https://a.example/2", "https://a.example/3", "https://r.example/"}
	if got := urls(d.Sources); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v want %v", got, want)
	}
	none, _ := searx(t, nil)
	d, err = search.Discover(ctx(t), []search.Backend{none}, "nothing", nil, nil, 5, nil)
	if err != nil || len(d.Sources) != 0 || d.Queries[0].Backend != "searxng" {
		t.Fatalf("d = %+v, err = %v", d, err)
	}
}

func TestDiscoverBadInput(t *testing.T) {
	s, _ := searx(t, nil)
	if _, err := search.Discover(ctx(t), []search.Backend{s}, "q", nil, []string{"ftp://x.example/"}, 5, nil); err == nil || !strings.Contains(err.Error(), "is not http or https") {
		t.Errorf("ftp seed: %v", err)
	}
	if _, err := search.Discover(ctx(t), []search.Backend{s}, "q", nil, nil, 0, nil); err == nil {
		t.Error("limit 0 accepted")
	}
	c, cancel := context.WithCancel(ctx(t))
	cancel()
	if _, err := search.Discover(c, []search.Backend{s}, "q", nil, nil, 5, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

func TestRelatedQueries(t *testing.T) {
	if got := search.RelatedQueries("  solid   state batteries ", 3); !reflect.DeepEqual(got, []string{
		"solid state batteries overview", "solid state batteries comparison", "solid state batteries latest research",
	}) {
		t.Errorf("got %q", got)
	}
	if got := search.RelatedQueries("x", 1); !reflect.DeepEqual(got, []string{"x overview"}) {
		t.Errorf("got %q", got)
	}
	if got := search.RelatedQueries("x", 100); len(got) != 6 {
		t.Errorf("got %d queries", len(got))
	}
	if search.RelatedQueries("x", 0) != nil || search.RelatedQueries(" ", 3) != nil {
		t.Error("no queries expected")
	}
}

func TestNormalizeURL(t *testing.T) {
	for in, want := range map[string]string{
		"HTTPS://Example.COM:443/Path?b=2&a=1#frag":                   "https://example.com/Path?a=1&b=2",
		"https://example.com/a/./b/../c/?fbclid=x&gclid=y":            "https://example.com/a/c/",
		"https://example.com/?q=100%":                                 "https://example.com/?q=100%",
		"https://example.com/?z=1&y=2&z=0":                            "https://example.com/?y=2&z=1&z=0",
		"http://example.com:80":                                       "http://example.com/",
		"http://example.com:8080/x":                                   "http://example.com:8080/x",
		"https://example.com:80/x":                                    "https://example.com:80/x",
		"https://user:pw@example.com/":                                "https://example.com/",
		"https://example.com/?utm_source=a&id=7&UTM_Campaign=b":       "https://example.com/?id=7",
		"https://example.com/?utm_source=a&utm_medium=b":              "https://example.com/",
		"https://example.com/?utm%5Fsource=a&q=go+lang":               "https://example.com/?q=go+lang",
		"https://example.com./a":                                      "https://example.com/a",
		"https://[2001:DB8::1]:443/":                                  "https://[2001:db8::1]/",
		"  https://en.wikipedia.org/wiki/Go_(programming_language)  ": "https://en.wikipedia.org/wiki/Go_(programming_language)",
		"https://example.com/a?":                                      "https://example.com/a",
	} {
		got, err := search.NormalizeURL(in)
		if err != nil || got != want {
			t.Errorf("NormalizeURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "example.com", "ftp://example.com/", "mailto:a@b.c", "https://", "http://%zz/"} {
		if got, err := search.NormalizeURL(in); err == nil {
			t.Errorf("NormalizeURL(%q) = %q, want an error", in, got)
		}
	}
}

// Discover keeps URLs in the crawler's form, so that a page found twice is
// crawled once.

func TestFromConfig(t *testing.T) {
	srv, _ := fakeSerper(t)
	wikiSrv, _ := fakeWikipedia(t, wikipediaAnswer)
	c := config.ResearchSearchConfig{
		Backends:        []string{"serper", "searxng", "wikipedia"},
		SearxNGURL:      "http://127.0.0.1:1",
		SerperURL:       srv.URL,
		SerperAPIKeyEnv: "TEST_SERPER_KEY",
		WikipediaLang:   "en",
		WikipediaURL:    wikiSrv.URL,
		Timeout:         config.Duration(fast.Timeout),
	}
	env := map[string]string{"TEST_SERPER_KEY": serperKey}
	bs, err := search.FromConfig(c, func(k string) string { return env[k] }, fast)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, b := range bs {
		names = append(names, b.Name())
	}
	if !reflect.DeepEqual(names, []string{"serper", "searxng", "wikipedia"}) {
		t.Fatalf("backends = %v", names)
	}
	if rs, err := bs[0].Search(ctx(t), "go", 3); err != nil || len(rs) != 3 {
		t.Fatalf("serper from config: %v, %v", rs, err)
	}
	delete(env, "TEST_SERPER_KEY")
	_, err = search.FromConfig(c, func(k string) string { return env[k] }, fast)
	if err == nil || !strings.Contains(err.Error(), "TEST_SERPER_KEY is not set") {
		t.Fatalf("missing key: %v", err)
	}
}

// BenchmarkDiscoverHangingBackend is a job's search when its first backend
// never answers: 4 queries (max mode), a 100 ms timeout and 3 attempts.
// One op costs about one timeout (queries at once, no retry after a
// timeout), where asking in turn with a timeout per attempt cost
// 4 x 3 x 100 ms plus the backoffs.
func BenchmarkDiscoverHangingBackend(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer srv.Close()
	stuck, _ := search.NewSearxNG(srv.URL, search.HTTP{Timeout: 100 * time.Millisecond, Attempts: 3, Backoff: 10 * time.Millisecond})
	wikiSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, wikipediaAnswer)
	}))
	defer wikiSrv.Close()
	wiki, _ := search.NewWikipedia("en", wikiSrv.URL, fast)
	related := search.RelatedQueries("go", 3)
	for b.Loop() {
		if _, err := search.Discover(context.Background(), []search.Backend{stuck, wiki}, "go", related, nil, 10, nil); err != nil {
			b.Fatal(err)
		}
	}
}
