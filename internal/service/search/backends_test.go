package search_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/search"
)

// fast retries: tests never wait on real backoff.
var fast = search.HTTP{Timeout: 10 * time.Second, Backoff: time.Millisecond}

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// wikipediaAnswer has the shape of a real list=search answer, snippet HTML
// and all.
const wikipediaAnswer = `{"batchcomplete":"","continue":{"sroffset":3,"continue":"-||"},"query":{"searchinfo":{"totalhits":48213},"search":[
{"ns":0,"title":"Go (programming language)","pageid":25039021,"size":81234,"wordcount":7021,"snippet":"<span class=\"searchmatch\">Go</span> is a high-level general-purpose programming language that is &quot;statically typed&quot; and compiled","timestamp":"2024-05-01T12:00:00Z"},
{"ns":0,"title":"AC/DC","pageid":1442,"size":150000,"wordcount":12000,"snippet":"Australian rock band<br>formed in <span class=\"searchmatch\">Sydney</span> &amp; Melbourne","timestamp":"2024-04-01T12:00:00Z"},
{"ns":0,"title":"Café au lait","pageid":99,"size":3000,"wordcount":300,"snippet":"<span class=\"searchmatch\">Coffee</span>&#32;with hot milk","timestamp":"2024-03-01T12:00:00Z"}
]}}`

func fakeWikipedia(t *testing.T, answer string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		q := r.URL.Query()
		if r.URL.Path != "/w/api.php" || r.Method != http.MethodGet || q.Get("action") != "query" || q.Get("list") != "search" ||
			q.Get("format") != "json" || q.Get("utf8") != "1" || q.Get("srlimit") == "" || q.Get("srsearch") == "" {
			http.Error(w, "bad request: "+r.URL.String(), http.StatusBadRequest)
			return
		}
		if ua := r.Header.Get("User-Agent"); !strings.HasPrefix(ua, "sandstep/") || !strings.Contains(ua, "(+https://github.com/sandstep/sandstep)") {
			http.Error(w, "Please set a user-agent and respect our robot policy", http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		io.WriteString(w, answer)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func TestWikipedia(t *testing.T) {
	srv, _ := fakeWikipedia(t, wikipediaAnswer)
	w, err := search.NewWikipedia("en", srv.URL+"/", fast)
	if err != nil {
		t.Fatal(err)
	}
	got, err := w.Search(ctx(t), "go language", 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []search.Result{
		{URL: srv.URL + "/wiki/Go_(programming_language)", Title: "Go (programming language)", Snippet: `Go is a high-level general-purpose programming language that is "statically typed" and compiled`, Engine: "wikipedia", Rank: 1},
		{URL: srv.URL + "/wiki/AC/DC", Title: "AC/DC", Snippet: "Australian rock band formed in Sydney & Melbourne", Engine: "wikipedia", Rank: 2},
		{URL: srv.URL + "/wiki/Caf%C3%A9_au_lait", Title: "Café au lait", Snippet: "Coffee with hot milk", Engine: "wikipedia", Rank: 3},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d results: %+v", len(got), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("result %d:\n got  %+v\n want %+v", i, got[i], want[i])
		}
	}
	if got, _ := w.Search(ctx(t), "go", 2); len(got) != 2 {
		t.Errorf("limit 2 gave %d results", len(got))
	}
}

func TestWikipediaDefaultURLAndPageURL(t *testing.T) {
	w, err := search.NewWikipedia("de", "", search.HTTP{})
	if err != nil {
		t.Fatal(err)
	}
	if got := w.PageURL("Zürich Hauptbahnhof"); got != "https://de.wikipedia.org/wiki/Z%C3%BCrich_Hauptbahnhof" {
		t.Errorf("PageURL = %s", got)
	}
	if got := w.PageURL("What? #1"); got != "https://de.wikipedia.org/wiki/What%3F_%231" {
		t.Errorf("PageURL = %s", got)
	}
	if _, err := search.NewWikipedia("en.evil.com/x", "", search.HTTP{}); err == nil {
		t.Error("a language code that is not one was accepted")
	}
}

// The API reports a bad request with status 200 and an error object.
func TestWikipediaAPIError(t *testing.T) {
	srv, _ := fakeWikipedia(t, `{"error":{"code":"srsearch-text-disabled","info":"text search is disabled.","*":"See https://en.wikipedia.org/w/api.php for API usage."},"servedby":"mw1234"}`)
	w, _ := search.NewWikipedia("en", srv.URL, fast)
	_, err := w.Search(ctx(t), "x", 5)
	if err == nil || err.Error() != "search: wikipedia: API error srsearch-text-disabled: text search is disabled." {
		t.Fatalf("err = %v", err)
	}
}

func TestSearxNG(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/searx/search" || r.URL.Query().Get("q") != "rust vs go" {
			http.NotFound(w, r)
			return
		}
		if r.URL.Query().Get("format") != "json" {
			// What an instance without json in search.formats answers.
			http.Error(w, "403 Forbidden", http.StatusForbidden)
			return
		}
		io.WriteString(w, `{"query":"rust vs go","number_of_results":0,"results":[
{"url":"https://example.com/rust-go","title":"Rust vs  Go","content":"A comparison\n of two languages.","engine":"bing","parsed_url":["https","example.com","/rust-go","","",""],"template":"default.html","engines":["bing","duckduckgo"],"positions":[1,2],"score":3.5,"category":"general"},
{"url":"","title":"no url","content":"skipped","engine":"bing","engines":["bing"],"positions":[2],"score":1,"category":"general"},
{"url":"https://go.dev/doc/","title":"Documentation","content":"","engine":"duckduckgo","engines":["duckduckgo"],"positions":[3],"score":1,"category":"general","publishedDate":null}
],"answers":[],"corrections":[],"infoboxes":[],"suggestions":["rust vs go performance"],"unresponsive_engines":[["brave","timeout"]]}`)
	}))
	defer srv.Close()
	s, err := search.NewSearxNG(srv.URL+"/searx", fast)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Search(ctx(t), "rust vs go", 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []search.Result{
		{URL: "https://example.com/rust-go", Title: "Rust vs Go", Snippet: "A comparison of two languages.", Engine: "searxng", Rank: 1},
		{URL: "https://go.dev/doc/", Title: "Documentation", Engine: "searxng", Rank: 2},
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

func TestSearxNGWithoutJSONFormat(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "403 Forbidden", http.StatusForbidden)
	}))
	defer srv.Close()
	s, _ := search.NewSearxNG(srv.URL, fast)
	_, err := s.Search(ctx(t), "x", 5)
	want := "search: searxng: HTTP 403 Forbidden: the instance refuses format=json (add json to search.formats in its settings.yml)"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
}

const serperKey = "sk-serper-0123456789abcdef"

// fakeSerper answers like google.serper.dev; with a wrong key it echoes
// the key back, the worst a real service could do, so that tests see
// whether it leaks into errors.
func fakeSerper(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.Method != http.MethodPost || r.URL.Path != "/search" || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, `{"message":"Not found","statusCode":404}`, http.StatusNotFound)
			return
		}
		if key := r.Header.Get("X-API-KEY"); key != serperKey {
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, `{"message":"Unauthorized: key `+key+` is not valid.","statusCode":403}`)
			return
		}
		var body struct {
			Q   string `json:"q"`
			Num int    `json:"num"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Q == "" || body.Num < 1 {
			http.Error(w, `{"message":"Bad request","statusCode":400}`, http.StatusBadRequest)
			return
		}
		io.WriteString(w, `{"searchParameters":{"q":"`+body.Q+`","type":"search","engine":"google","num":`+jsonInt(body.Num)+`},
"knowledgeGraph":{"title":"Go","type":"Programming language","description":"Go is a language."},
"organic":[
{"title":"The Go Programming Language","link":"https://go.dev/","snippet":"Build simple, secure, scalable systems with Go.","sitelinks":[{"title":"Download","link":"https://go.dev/dl/"}],"position":1},
{"title":"Go (programming language) - Wikipedia","link":"https://en.wikipedia.org/wiki/Go_(programming_language)","snippet":"Go is a statically typed, compiled language.","date":"Mar 3, 2024","position":2},
{"title":"A Tour of Go","link":"https://go.dev/tour/","snippet":"Welcome to a tour of Go.","position":4}
],
"peopleAlsoAsk":[{"question":"Is Go hard?","snippet":"No.","title":"x","link":"https://example.com/faq"}],
"relatedSearches":[{"query":"golang tutorial"}],"credits":1}`)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func jsonInt(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestSerper(t *testing.T) {
	srv, _ := fakeSerper(t)
	s, err := search.NewSerper(serperKey, srv.URL, fast)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Search(ctx(t), "golang", 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []search.Result{
		{URL: "https://go.dev/", Title: "The Go Programming Language", Snippet: "Build simple, secure, scalable systems with Go.", Engine: "serper", Rank: 1},
		{URL: "https://en.wikipedia.org/wiki/Go_(programming_language)", Title: "Go (programming language) - Wikipedia", Snippet: "Go is a statically typed, compiled language.", Engine: "serper", Rank: 2},
		{URL: "https://go.dev/tour/", Title: "A Tour of Go", Snippet: "Welcome to a tour of Go.", Engine: "serper", Rank: 4},
	}
	if len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

// A refused key is a permanent error naming the backend, without the key,
// even when the service echoes it, and it is not retried.
func TestSerperKeyNeverInErrors(t *testing.T) {
	srv, hits := fakeSerper(t)
	const wrong = "sk-wrong-key-that-must-not-leak"
	s, _ := search.NewSerper(wrong, srv.URL, fast)
	_, err := s.Search(ctx(t), "golang", 10)
	var e *search.Error
	if !errors.As(err, &e) || e.Backend != "serper" || e.Status != 403 || !e.Permanent() {
		t.Fatalf("err = %#v", err)
	}
	if strings.Contains(err.Error(), wrong) || !strings.HasPrefix(err.Error(), "search: serper: HTTP 403 Forbidden: Unauthorized: key [redacted] is not valid.") {
		t.Fatalf("err = %v", err)
	}
	if hits.Load() != 1 {
		t.Errorf("a 403 was sent %d times", hits.Load())
	}
	if strings.Contains(s.String(), wrong) {
		t.Errorf("String() shows the key: %s", s)
	}
	if _, err := search.NewSerper("", srv.URL, fast); err == nil {
		t.Error("no key accepted")
	}
}

// flaky answers with the given statuses in turn, then with body.
func flaky(t *testing.T, statuses []int, header http.Header, body string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(hits.Add(1))
		if n <= len(statuses) {
			for k, v := range header {
				w.Header()[k] = v
			}
			w.WriteHeader(statuses[n-1])
			io.WriteString(w, `{"message":"busy"}`)
			return
		}
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func TestRetriesOn429And5xx(t *testing.T) {
	srv, hits := flaky(t, []int{503, 429}, http.Header{"Retry-After": {"0"}}, wikipediaAnswer)
	w, _ := search.NewWikipedia("en", srv.URL, fast)
	got, err := w.Search(ctx(t), "go", 5)
	if err != nil || len(got) != 3 || hits.Load() != 3 {
		t.Fatalf("results %d, err %v, requests %d", len(got), err, hits.Load())
	}
}

func TestRetriesAreBounded(t *testing.T) {
	srv, hits := flaky(t, []int{500, 500, 500, 500, 500}, nil, wikipediaAnswer)
	h := fast
	h.Attempts = 4
	w, _ := search.NewWikipedia("en", srv.URL, h)
	_, err := w.Search(ctx(t), "go", 5)
	var e *search.Error
	if !errors.As(err, &e) || e.Status != 500 || e.Attempts != 4 || e.Permanent() || hits.Load() != 4 {
		t.Fatalf("err = %v, requests %d", err, hits.Load())
	}
	if err.Error() != "search: wikipedia: HTTP 500 Internal Server Error: busy (after 4 attempts)" {
		t.Fatalf("err = %v", err)
	}
}

func TestNoRetryOnClientError(t *testing.T) {
	srv, hits := flaky(t, []int{400}, nil, wikipediaAnswer)
	w, _ := search.NewWikipedia("en", srv.URL, fast)
	if _, err := w.Search(ctx(t), "go", 5); err == nil || hits.Load() != 1 {
		t.Fatalf("err = %v, requests %d", err, hits.Load())
	}
}

// A backend that never answers is cut off by the timeout, which bounds the
// whole search: it is not asked again.
func TestTimeout(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		<-r.Context().Done()
	}))
	defer srv.Close()
	w, _ := search.NewWikipedia("en", srv.URL, search.HTTP{Timeout: 20 * time.Millisecond, Attempts: 2, Backoff: time.Millisecond})
	_, err := w.Search(ctx(t), "go", 5)
	var e *search.Error
	if !errors.As(err, &e) || e.Status != 0 || e.Attempts != 1 || hits.Load() != 1 || !errors.Is(err, context.DeadlineExceeded) ||
		err.Error() != "search: wikipedia: no answer within 20ms" {
		t.Fatalf("err = %v, requests %d", err, hits.Load())
	}
}

// Retries fit in the timeout: a backend that answers 503 and then hangs
// fails once the timeout is spent, saying both.
func TestTimeoutSpansRetries(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		<-r.Context().Done()
	}))
	defer srv.Close()
	w, _ := search.NewWikipedia("en", srv.URL, search.HTTP{Timeout: 200 * time.Millisecond, Attempts: 5, Backoff: time.Millisecond})
	_, err := w.Search(ctx(t), "go", 5)
	if err == nil || hits.Load() != 2 || err.Error() != "search: wikipedia: HTTP 503 Service Unavailable: busy; then no answer within 200ms (after 2 attempts)" {
		t.Fatalf("err = %v, requests %d", err, hits.Load())
	}
}

func TestCancelledContext(t *testing.T) {
	srv, _ := flaky(t, []int{503, 503, 503}, http.Header{"Retry-After": {"5"}}, wikipediaAnswer)
	w, _ := search.NewWikipedia("en", srv.URL, search.HTTP{Backoff: time.Hour})
	c, cancel := context.WithCancel(ctx(t))
	cancel()
	if _, err := w.Search(c, "go", 5); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

func TestStripHTML(t *testing.T) {
	for in, want := range map[string]string{
		`<span class="searchmatch">Go</span>lang`:   "Golang",
		"a &amp; b &lt;c&gt; &quot;d&quot; &#39;e'": `a & b <c> "d" 'e'`,
		"line<br/>break<p>para</p>":                 "line break para",
		"  many \n\t spaces ":                       "many spaces",
		"<b>unclosed":                               "unclosed",
	} {
		if got := search.StripHTML(in); got != want {
			t.Errorf("StripHTML(%q) = %q, want %q", in, got, want)
		}
	}
}
