package crawler

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sandstep/sandstep/internal/service/crawler/spec"
	"github.com/sandstep/sandstep/internal/testkit/fixturesite"
)

// run crawls with render=never (the browser has its own tests) and returns
// the output and every progress line.
func run(t *testing.T, ctx context.Context, in Input) (Output, []Progress) {
	t.Helper()
	if in.Render == "" {
		in.Render = RenderNever
	}
	var mu sync.Mutex
	var lines []Progress
	out, err := Crawl(ctx, in, func(p Progress) {
		mu.Lock()
		lines = append(lines, p)
		mu.Unlock()
	})
	if err != nil {
		t.Fatalf("Crawl: %v", err)
	}
	return out, lines
}

func urls(pages []Page) []string {
	var u []string
	for _, p := range pages {
		u = append(u, p.URL)
	}
	return u
}

func pageURLs(h *fixturesite.Host, paths ...string) []string {
	var u []string
	for _, p := range paths {
		u = append(u, h.Page(p))
	}
	return u
}

func skipReason(out Output, url string) string {
	s, _ := skipOf(out, url)
	return s.Reason
}

func skipOf(out Output, url string) (Skipped, bool) {
	for _, s := range out.Skipped {
		if s.URL == url {
			return s, true
		}
	}
	return Skipped{}, false
}

func TestBFSOrderAndParents(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{})
	alpha, beta := site.Hosts[0], site.Hosts[1]
	out, _ := run(t, t.Context(), Input{
		AllowPrivate: site.AllowPrivate(),
		Sources:      []Source{{N: 1, URL: alpha.Page("/")}, {N: 2, URL: beta.Page("/")}},
		Limits:       Limits{MaxPages: 50, MaxDepth: 2, MaxLinksPerPage: 4, MaxPagesPerHost: 20, Concurrency: 4},
	})
	// Seeds first, then the first four new same-host links of each seed in
	// document order: the navigation's "/" is already planned, "/about"
	// comes before the article's links, and the cross-host link to beta
	// is not followed from alpha.
	want := slices.Concat(
		[]string{alpha.Page("/"), beta.Page("/")},
		pageURLs(alpha, "/about", "/a", "/b", "/c"),
		pageURLs(beta, "/about", "/a", "/b", "/c"),
	)
	if got := urls(out.Pages); !slices.Equal(got, want) {
		t.Fatalf("pages in BFS order:\n got %q\nwant %q", got, want)
	}
	for i, p := range out.Pages {
		wantN, wantParent, wantDepth := 1, alpha.Page("/"), 2
		if strings.HasPrefix(p.URL, beta.URL) {
			wantN, wantParent = 2, beta.Page("/")
		}
		if i < 2 {
			wantParent, wantDepth = "", 1
		}
		if p.N != wantN || p.Parent != wantParent || p.Depth != wantDepth {
			t.Errorf("%s: n=%d parent=%q depth=%d, want n=%d parent=%q depth=%d", p.URL, p.N, p.Parent, p.Depth, wantN, wantParent, wantDepth)
		}
		if p.Status != 200 || p.Mode != "http" || p.FinalURL != p.URL {
			t.Errorf("%s: status=%d mode=%s final=%s", p.URL, p.Status, p.Mode, p.FinalURL)
		}
		// Readability keeps the article and drops the page frame.
		host := alpha
		if wantN == 2 {
			host = beta
		}
		path := strings.TrimPrefix(p.URL, host.URL)
		if !strings.HasPrefix(p.Content, host.Marker(path)) || strings.Contains(p.Content, fixturesite.NavText) || strings.Contains(p.Content, fixturesite.FooterText) {
			t.Errorf("%s: content is not the article alone: %.300q", p.URL, p.Content)
		}
		if p.Title != host.Name+" "+path || p.Description == "" {
			t.Errorf("%s: title %q description %q", p.URL, p.Title, p.Description)
		}
	}
	if out.Stats.Stopped != StoppedDone || out.Stats.Pages != len(want) || out.Stats.Mode != "http" {
		t.Errorf("stats = %+v", out.Stats)
	}
	for _, p := range []string{"/d", "/a1", "/contact"} {
		if n := site.Hits(alpha.Page(p)); n != 0 {
			t.Errorf("%s fetched %d times, beyond the links-per-page limit", p, n)
		}
	}
	for _, u := range want {
		if n := site.Hits(u); n != 1 {
			t.Errorf("%s fetched %d times, want once", u, n)
		}
	}
}

func TestDepthLimit(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{})
	alpha := site.Hosts[0]
	for _, tc := range []struct {
		depth int
		want  []string
	}{
		{1, []string{"/"}},
		{2, []string{"/", "/about", "/a"}},
		// /about's only new link is /contact; /a's are /a1 and /a2.
		{3, []string{"/", "/about", "/a", "/contact", "/a1", "/a2"}},
	} {
		out, _ := run(t, t.Context(), Input{
			AllowPrivate: site.AllowPrivate(),
			Sources:      []Source{{N: 1, URL: alpha.Page("/")}},
			Limits:       Limits{MaxPages: 50, MaxDepth: tc.depth, MaxLinksPerPage: 2, MaxPagesPerHost: 50},
		})
		if got, want := urls(out.Pages), pageURLs(alpha, tc.want...); !slices.Equal(got, want) {
			t.Errorf("depth %d:\n got %q\nwant %q", tc.depth, got, want)
		}
		for _, p := range out.Pages {
			if p.Depth > tc.depth {
				t.Errorf("depth %d: %s has depth %d", tc.depth, p.URL, p.Depth)
			}
		}
	}
	if n := site.Hits(alpha.Page("/a1x")); n != 0 {
		t.Errorf("/a1x (depth 4) fetched %d times", n)
	}
}

func TestMaxPages(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{})
	alpha := site.Hosts[0]
	out, lines := run(t, t.Context(), Input{
		AllowPrivate: site.AllowPrivate(),
		Sources:      []Source{{N: 1, URL: alpha.Page("/")}},
		Limits:       Limits{MaxPages: 5, MaxDepth: 2, MaxLinksPerPage: 8, MaxPagesPerHost: 50},
	})
	if got, want := urls(out.Pages), pageURLs(alpha, "/", "/about", "/a", "/b", "/c"); !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if out.Stats.Stopped != StoppedPages {
		t.Errorf("stopped = %q, want %q", out.Stats.Stopped, StoppedPages)
	}
	if n := site.Hits(alpha.Page("/d")); n != 0 {
		t.Errorf("/d fetched %d times beyond max_pages", n)
	}
	for _, p := range lines {
		if p.Stage == StageCrawl && p.Total > 5 {
			t.Errorf("progress total %d > max_pages 5: %+v", p.Total, p)
		}
	}
}

func TestPerHostLimit(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{})
	alpha, beta := site.Hosts[0], site.Hosts[1]
	out, _ := run(t, t.Context(), Input{
		AllowPrivate: site.AllowPrivate(),
		Sources: []Source{
			{N: 1, URL: alpha.Page("/")}, {N: 2, URL: alpha.Page("/b")}, {N: 3, URL: alpha.Page("/c")},
			{N: 4, URL: alpha.Page("/d")}, {N: 5, URL: beta.Page("/")},
		},
		Limits: Limits{MaxPages: 50, MaxDepth: 2, MaxLinksPerPage: 8, MaxPagesPerHost: 3},
	})
	want := slices.Concat(pageURLs(alpha, "/", "/b", "/c"), pageURLs(beta, "/", "/about", "/a"))
	if got := urls(out.Pages); !slices.Equal(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	if s, _ := skipOf(out, alpha.Page("/d")); s.Reason != spec.ReasonBudget || s.Message != "host limit: 3 pages per host" {
		t.Errorf("source over the host limit: %+v", s)
	}
}

func TestMaxCharsPerSource(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{})
	out, _ := run(t, t.Context(), Input{
		AllowPrivate: site.AllowPrivate(),
		Sources:      []Source{{N: 1, URL: site.Hosts[0].Page("/a")}},
		Limits:       Limits{MaxCharsPerSource: 120},
	})
	if len(out.Pages) != 1 {
		t.Fatalf("pages = %+v", out.Pages)
	}
	p := out.Pages[0]
	if n := utf8.RuneCountInString(p.Content); n > 120 || n < 100 {
		t.Errorf("content has %d chars, want 100..120 (cut at a word): %q", n, p.Content)
	}
	if !p.Truncated {
		t.Error("truncated = false for a cut page")
	}
	if !strings.HasPrefix(p.Content, site.Hosts[0].Marker("/a")) {
		t.Errorf("content does not start with the article: %q", p.Content)
	}
}

func TestDurationLimitGivesPartialResults(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{SlowLatency: time.Minute})
	alpha := site.Hosts[0]
	out, lines := run(t, t.Context(), Input{
		AllowPrivate: site.AllowPrivate(),
		Sources:      []Source{{N: 1, URL: alpha.Page("/")}, {N: 2, URL: alpha.Page(fixturesite.PathSlow)}},
		Limits: Limits{MaxDepth: 2, MaxPagesPerHost: 10, MaxLinksPerPage: 3, Concurrency: 2,
			MaxDurationMS: 3000, PageTimeoutMS: 120000},
	})
	if out.Stats.Stopped != StoppedDuration {
		t.Fatalf("stopped = %q, want duration; stats %+v", out.Stats.Stopped, out.Stats)
	}
	if len(out.Pages) == 0 || out.Pages[0].URL != alpha.Page("/") {
		t.Fatalf("the fast page is missing from the partial results: %q", urls(out.Pages))
	}
	if s, _ := skipOf(out, alpha.Page(fixturesite.PathSlow)); s.Reason != spec.ReasonBudget || !strings.Contains(s.Message, "stopped") {
		t.Errorf("slow page: %+v", s)
	}
	last := lines[len(lines)-1]
	if last.Stage != StageCrawl || last.Status != StatusComplete || !strings.Contains(last.Message, "stopped: duration") {
		t.Errorf("last progress line = %+v", last)
	}
}

func TestCancelGivesPartialResults(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{SlowLatency: time.Minute})
	alpha := site.Hosts[0]
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	in := Input{
		AllowPrivate: site.AllowPrivate(),
		Sources:      []Source{{N: 1, URL: alpha.Page("/")}, {N: 2, URL: alpha.Page(fixturesite.PathSlow)}},
		Limits:       Limits{Concurrency: 2, PageTimeoutMS: 120000},
		Render:       RenderNever,
	}
	// Cancel as soon as the fast page is done, as a SIGTERM would.
	out, err := Crawl(ctx, in, func(p Progress) {
		if p.Stage == StageCrawl && p.URL == alpha.Page("/") {
			cancel()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if out.Stats.Stopped != StoppedSignal || len(out.Pages) != 1 || out.Pages[0].URL != alpha.Page("/") {
		t.Fatalf("stats %+v pages %q", out.Stats, urls(out.Pages))
	}
}

func TestSpecialPages(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{SlowLatency: time.Minute})
	alpha := site.Hosts[0]
	paths := []string{
		fixturesite.PathLoop, fixturesite.PathPDF, fixturesite.PathChallenge, fixturesite.PathNotFound,
		fixturesite.PathSlow, fixturesite.PathHuge, fixturesite.PathGzip, fixturesite.PathLatin1,
		"/a", fixturesite.PathRedirect, fixturesite.PathBinary, fixturesite.PathImage,
	}
	var sources []Source
	for i, p := range paths {
		sources = append(sources, Source{N: i + 1, URL: alpha.Page(p)})
	}
	out, _ := run(t, t.Context(), Input{
		AllowPrivate: site.AllowPrivate(),
		Sources:      sources,
		Limits:       Limits{MaxPagesPerHost: 20, PageTimeoutMS: 4000, MaxPageBytes: 1 << 20, MaxCharsPerSource: 1 << 20},
	})
	wantSkipped := map[string]Skipped{
		fixturesite.PathChallenge: {Reason: spec.ReasonChallenge, Message: "an anti-bot challenge page (status 503), not the page itself"},
		fixturesite.PathNotFound:  {Reason: spec.ReasonHTTPStatus, Message: "HTTP 404 Not Found"},
		fixturesite.PathSlow:      {Reason: spec.ReasonTimeout, Message: "no answer within 4s"},
		fixturesite.PathRedirect:  {Reason: spec.ReasonDuplicate, Message: "the same page as " + alpha.Page("/a")},
		fixturesite.PathBinary:    {Reason: spec.ReasonContentType, Message: "application/octet-stream is not a document the crawler reads"},
		fixturesite.PathImage:     {Reason: spec.ReasonContentType, Message: "image/png is not a document the crawler reads"},
	}
	for p, want := range wantSkipped {
		want.URL = alpha.Page(p)
		if got, _ := skipOf(out, alpha.Page(p)); got != want {
			t.Errorf("%s: skipped %+v, want %+v", p, got, want)
		}
	}
	// The empty PDF has no text whether or not pdftotext is there.
	if s, _ := skipOf(out, alpha.Page(fixturesite.PathPDF)); s.Reason != spec.ReasonUnreadable {
		t.Errorf("empty PDF: %+v", s)
	}
	if s, _ := skipOf(out, alpha.Page(fixturesite.PathLoop)); s.Reason != spec.ReasonRedirectLoop || !strings.HasPrefix(s.Message, "redirect loop: ") || !strings.Contains(s.Message, "/loop/b") {
		t.Errorf("redirect loop: %+v", s)
	}
	for _, sk := range out.Skipped {
		if !spec.KnownReason(sk.Reason) {
			t.Errorf("%s: reason %q is not one of spec.Reasons", sk.URL, sk.Reason)
		}
	}
	pages := map[string]Page{}
	for _, p := range out.Pages {
		pages[strings.TrimPrefix(p.URL, alpha.URL)] = p
	}
	if len(pages) != 4 {
		t.Errorf("pages %q, want huge, gzip, latin1 and /a", urls(out.Pages))
	}
	huge := pages[fixturesite.PathHuge]
	if !huge.Truncated || !strings.Contains(huge.Content, alpha.Marker(fixturesite.PathHuge)) {
		t.Errorf("huge page: truncated=%v, marker found=%v", huge.Truncated, strings.Contains(huge.Content, alpha.Marker(fixturesite.PathHuge)))
	}
	if len(huge.Content) > 1<<20 {
		t.Errorf("huge page content is %d bytes, more than max_page_bytes", len(huge.Content))
	}
	if g := pages[fixturesite.PathGzip]; !strings.Contains(g.Content, alpha.Marker(fixturesite.PathGzip)) {
		t.Errorf("gzip page content: %.200q", g.Content)
	}
	if l := pages[fixturesite.PathLatin1]; !strings.Contains(l.Content, fixturesite.LatinText) {
		t.Errorf("latin-1 page content: %.200q", l.Content)
	}
	if n := site.Hits(alpha.Page("/loop/b")); n != 1 {
		t.Errorf("/loop/b requested %d times, want once before the loop is seen", n)
	}
}

func TestInvalidInput(t *testing.T) {
	for _, in := range []Input{
		{Render: "sometimes"},
		{Limits: Limits{MaxPages: -1}},
		{AllowPrivate: []string{"localhost:8080"}},
	} {
		if _, err := Crawl(t.Context(), in, nil); err == nil {
			t.Errorf("Crawl(%+v) = nil error", in)
		}
	}
	if _, err := ReadInput(strings.NewReader(`{"sources":[],"limts":{}}`)); err == nil {
		t.Error("ReadInput accepted an unknown field")
	}
}

func TestBadSources(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{})
	alpha := site.Hosts[0]
	out, _ := run(t, t.Context(), Input{AllowPrivate: site.AllowPrivate(), Sources: []Source{
		{N: 1, URL: "ftp://example.invalid/file"},
		{N: 2, URL: alpha.Page("/a")},
		{N: 3, URL: alpha.Page("/a/") + "#section"},
		{N: 4, URL: "not a url"},
	}})
	if got := urls(out.Pages); !slices.Equal(got, pageURLs(alpha, "/a")) {
		t.Errorf("pages %q", got)
	}
	var got []string
	for _, s := range out.Skipped {
		got = append(got, s.URL+" "+s.Reason)
	}
	want := []string{
		"ftp://example.invalid/file invalid_url",
		alpha.Page("/a/") + "#section duplicate",
		"not a url invalid_url",
	}
	if !slices.Equal(got, want) {
		t.Errorf("skipped = %+v\nwant %+v", out.Skipped, want)
	}
}
