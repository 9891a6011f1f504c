// Package crawler is the deep-research crawler that runs inside a sandbox:
// a breadth-first crawl from the search results, bounded in pages, depth,
// links, hosts, characters and time, that extracts the main text of each
// page and reports its progress as __PROGRESS__ lines.
//
// Pages are fetched over HTTP. With render "auto" (the default) a page is
// rendered in headless Chromium only when HTTP gave almost no text and the
// page runs scripts, or when HTTP got an anti-bot challenge that a real
// browser may pass; most pages never pay for a browser, and the browser is
// started only when the first such page comes. With "always" every HTML page
// is rendered (after the HTTP fetch that classifies it: type, redirects,
// status); with "never", or when no browser is found, the crawl is HTTP only.
package crawler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandstep/sandstep/internal/service/crawler/spec"
	"github.com/sandstep/sandstep/providers/egress"
)

// maxBrowserTabs bounds concurrent renders whatever the concurrency: a tab is
// a renderer process of a few hundred MB.
const maxBrowserTabs = 3

// skipExtensions are link targets that are not pages. Followed links to them
// are not fetched, so they do not use up the page budget; a source with such
// a URL is still fetched and skipped by its content type. PDFs are followed
// when the sandbox can read them (see skipLink).
var skipExtensions = map[string]bool{
	".pdf": true, ".zip": true, ".gz": true, ".tgz": true, ".tar": true, ".7z": true, ".rar": true,
	".jpg": true, ".jpeg": true, ".png": true, ".gif": true, ".webp": true, ".svg": true, ".ico": true,
	".mp3": true, ".mp4": true, ".webm": true, ".avi": true, ".mov": true, ".wav": true, ".ogg": true,
	".css": true, ".js": true, ".json": true, ".xml": true, ".rss": true, ".woff": true, ".woff2": true,
	".ttf": true, ".exe": true, ".dmg": true, ".iso": true, ".apk": true, ".bin": true,
	".doc": true, ".docx": true, ".xls": true, ".xlsx": true, ".ppt": true, ".pptx": true,
}

// task is one planned URL, at its place in BFS order.
type task struct {
	url    string // normalized
	key    string
	n      int
	title  string // the source's title, for a page that has none
	parent string
	depth  int

	started, done bool
	page          *Page
	skip          why
	blocked       *egress.Denied // what the network policy refused, with skip ReasonPolicy
	links         []string
	finalKey      string
	finalHost     string
}

// crawl is the state of one run. Only the scheduling goroutine touches it.
type crawl struct {
	in       Input
	tasks    []*task
	seen     map[string]bool // keys of URLs planned or refused for good
	finals   map[string]int  // final-URL key -> index of the page that has it
	perHost  map[string]int
	overflow int  // distinct URLs refused because max_pages was reached
	readPDF  bool // the sandbox has a PDF extractor: PDF links are worth a fetch
	skipped  []Skipped
}

// outcome is a finished visit.
type outcome struct {
	i       int
	page    *Page
	skip    why
	blocked *egress.Denied
	links   []string
	final   string // normalized final URL
}

// why is the reason a URL gave no page: a code of spec.Reasons and the
// specifics. The zero value means it did give one.
type why struct{ code, msg string }

func (w why) skipped() bool { return w.code != "" }

func skip(code, format string, args ...any) why {
	return why{code: code, msg: fmt.Sprintf(format, args...)}
}

// Crawl crawls from in.Sources within in.Limits and returns what it found.
// report, when not nil, gets every progress line; it may be called from
// several goroutines at once.
//
// The crawl is breadth first and its result does not depend on timing: URLs
// are planned in BFS order, up to concurrency of them are fetched at once, and
// the links of a page are planned only once every page before it in that
// order is finished. Limits apply in that order too, so the same site gives
// the same pages in the same order. Output lists pages and skipped URLs in
// BFS order.
//
// At max_duration_ms, or when ctx is cancelled (SIGTERM), Crawl stops
// fetching and returns what it has with Stats.Stopped saying why; ctx's
// cancellation is not an error. The error is for an input that cannot be
// crawled (ErrInput).
func Crawl(ctx context.Context, in Input, report func(Progress)) (Output, error) {
	start := time.Now()
	if report == nil {
		report = func(Progress) {}
	}
	in, err := in.WithDefaults()
	if err != nil {
		return Output{}, err
	}
	l := in.Limits
	nw, err := newNetwork(in.AllowPrivate, hostEnv)
	if err != nil {
		return Output{}, err
	}
	defer nw.close()

	var br *browser
	switch path := FindBrowser(in.BrowserPath); {
	case in.Render == RenderNever:
		report(Progress{Stage: StageBrowser, Status: StatusComplete, Message: "render=never: HTTP mode"})
	case path == "":
		report(Progress{Stage: StageBrowser, Status: StatusComplete, Message: "no browser: HTTP mode"})
	case in.Render == RenderAlways:
		report(Progress{Stage: StageBrowser, Status: StatusRunning, Message: "Launching browser " + path})
		br = newBrowser(path, in.UserAgent, min(l.Concurrency, maxBrowserTabs), report, nw)
		if err := br.start(); err != nil {
			br = nil
		} else {
			report(Progress{Stage: StageBrowser, Status: StatusComplete, Message: "browser ready: " + path})
		}
	default:
		// auto: most pages need no browser, so it starts with the first page
		// that does; if it fails then, an error line says so.
		br = newBrowser(path, in.UserAgent, min(l.Concurrency, maxBrowserTabs), report, nw)
		report(Progress{Stage: StageBrowser, Status: StatusComplete, Message: "browser found: " + path + " (started for pages that need scripts)"})
	}
	if br != nil {
		defer br.close()
	}

	runCtx, cancel := context.WithTimeout(ctx, time.Duration(l.MaxDurationMS)*time.Millisecond)
	defer cancel()
	v := &visitor{
		in:          in,
		client:      newClient(l.Concurrency, time.Duration(l.PageTimeoutMS)*time.Millisecond, nw),
		browser:     br,
		pageTimeout: time.Duration(l.PageTimeoutMS) * time.Millisecond,
	}
	defer v.client.CloseIdleConnections()

	v.pdf = findPDFReader()

	c := &crawl{in: in, seen: map[string]bool{}, finals: map[string]int{}, perHost: map[string]int{}, readPDF: v.pdf.ok()}
	for _, s := range in.Sources {
		if w := c.plan(s.URL, s.N, "", 1); w.skipped() {
			c.skipped = append(c.skipped, Skipped{URL: s.URL, Reason: w.code, Message: w.msg})
		} else {
			c.tasks[len(c.tasks)-1].title = s.Title
		}
	}
	report(Progress{Stage: StageCrawl, Status: StatusRunning, Total: c.total(), Message: fmt.Sprintf("Crawling %d sources (%s)", len(in.Sources), v.pdf)})

	results := make(chan outcome)
	next, ordered, inflight, finished := 0, 0, 0, 0
	for {
		for inflight < l.Concurrency && next < len(c.tasks) && runCtx.Err() == nil {
			t := c.tasks[next]
			t.started = true
			inflight++
			go func(i int, t task) {
				results <- v.visit(runCtx, i, t)
			}(next, *t)
			next++
		}
		if inflight == 0 {
			break
		}
		o := <-results
		inflight--
		finished++
		t := c.tasks[o.i]
		t.done, t.page, t.skip, t.blocked, t.links = true, o.page, o.skip, o.blocked, o.links
		if o.final != "" {
			t.finalKey, t.finalHost = Key(o.final), hostOf(o.final)
		}
		// Pages finished while stopping are kept, but their links would be
		// planned for nothing.
		for ordered < len(c.tasks) && c.tasks[ordered].done && runCtx.Err() == nil {
			c.settle(ordered, true)
			ordered++
		}
		p := Progress{Stage: StageCrawl, Status: StatusRunning, Current: finished, Total: c.total(), URL: t.url}
		if t.skip.skipped() {
			p.Message = "skipped (" + t.skip.code + "): " + t.skip.msg
		}
		report(p)
	}
	for ; ordered < len(c.tasks); ordered++ {
		if c.tasks[ordered].done {
			c.settle(ordered, false)
		}
	}

	stopped := StoppedDone
	switch {
	case ctx.Err() != nil:
		stopped = StoppedSignal
	case runCtx.Err() != nil:
		stopped = StoppedDuration
	case c.overflow > 0:
		stopped = StoppedPages
	}
	out := Output{Pages: []Page{}, Skipped: c.skipped, Stats: Stats{Mode: "http", Stopped: stopped}}
	for _, t := range c.tasks {
		switch {
		case t.page != nil:
			out.Pages = append(out.Pages, *t.page)
			if t.page.Mode == spec.ModeBrowser {
				out.Stats.Mode = spec.ModeBrowser
			}
		case t.blocked != nil:
			sk := Skipped{URL: t.url, Reason: spec.ReasonPolicy, Message: t.blocked.Error()}
			if t.blocked.Addr.IsValid() {
				sk.Address = t.blocked.Addr.String()
			}
			out.Skipped = append(out.Skipped, sk)
		case t.skip.skipped():
			out.Skipped = append(out.Skipped, Skipped{URL: t.url, Reason: t.skip.code, Message: t.skip.msg})
		default:
			out.Skipped = append(out.Skipped, Skipped{URL: t.url, Reason: spec.ReasonBudget, Message: "the crawl stopped (" + stopped + ") before it was fetched"})
		}
	}
	if out.Skipped == nil {
		out.Skipped = []Skipped{}
	}
	out.Stats.Pages = len(out.Pages)
	out.Stats.DurationMS = time.Since(start).Milliseconds()
	report(Progress{Stage: StageCrawl, Status: StatusComplete, Current: finished, Total: c.total(),
		Message: fmt.Sprintf("Crawl complete: %d pages, %d skipped in %d ms (stopped: %s)", len(out.Pages), len(out.Skipped), out.Stats.DurationMS, stopped)})
	return out, nil
}

// total is the page budget as far as it is known: the URLs planned and those
// refused for the page limit, at most max_pages.
func (c *crawl) total() int {
	return min(c.in.Limits.MaxPages, len(c.tasks)+c.overflow)
}

// plan appends rawURL to the BFS order unless a limit or a duplicate refuses
// it; it returns the reason of a refusal.
func (c *crawl) plan(rawURL string, n int, parent string, depth int) why {
	u, err := Normalize(rawURL)
	if err != nil {
		return skip(spec.ReasonInvalidURL, "%v", err)
	}
	key := Key(u)
	if c.seen[key] {
		return skip(spec.ReasonDuplicate, "already planned in this crawl")
	}
	host := hostOf(u)
	if c.perHost[host] >= c.in.Limits.MaxPagesPerHost {
		return skip(spec.ReasonBudget, "host limit: %d pages per host", c.in.Limits.MaxPagesPerHost)
	}
	if len(c.tasks) >= c.in.Limits.MaxPages {
		c.seen[key] = true
		c.overflow++
		return skip(spec.ReasonBudget, "page limit: %d pages", c.in.Limits.MaxPages)
	}
	c.seen[key] = true
	c.perHost[host]++
	c.tasks = append(c.tasks, &task{url: u, key: key, n: n, parent: parent, depth: depth})
	return why{}
}

// settle runs, in BFS order, what depends on the pages before task i: a page
// whose redirect landed on a page already crawled is a duplicate, and the
// links of a page are planned (when follow is set and depth allows).
func (c *crawl) settle(i int, follow bool) {
	t := c.tasks[i]
	if t.page == nil {
		return
	}
	if first, dup := c.finals[t.finalKey]; dup {
		t.skip = skip(spec.ReasonDuplicate, "the same page as %s", c.tasks[first].url)
		t.page = nil
		return
	}
	c.finals[t.finalKey] = i
	c.seen[t.finalKey] = true
	if !follow || t.depth >= c.in.Limits.MaxDepth {
		return
	}
	planned := 0
	for _, link := range t.links {
		if planned >= c.in.Limits.MaxLinksPerPage {
			break
		}
		u, err := Normalize(link)
		if err != nil || hostOf(u) != t.finalHost || c.skipLink(u) {
			continue
		}
		if !c.plan(u, t.n, t.page.FinalURL, t.depth+1).skipped() {
			planned++
		}
	}
}

// skipLink tells whether a followed link names something that is not a
// page the crawler can read.
func (c *crawl) skipLink(u string) bool {
	ext := strings.ToLower(path.Ext(urlPath(u)))
	if ext == ".pdf" {
		return !c.readPDF
	}
	return skipExtensions[ext]
}

func urlPath(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return p.Path
}

// visitor fetches and extracts pages; it is shared by the workers and holds
// no state of the crawl.
type visitor struct {
	in          Input
	client      *http.Client
	browser     *browser
	pdf         pdfReader
	pageTimeout time.Duration
}

// visit fetches one page, renders it if it needs a browser, and extracts it.
func (v *visitor) visit(ctx context.Context, i int, t task) outcome {
	o := outcome{i: i}
	pctx, cancel := context.WithTimeout(ctx, v.pageTimeout)
	defer cancel()
	resp, err := get(pctx, v.client, t.url, v.in.UserAgent, v.in.Limits.MaxPageBytes, v.in.Limits.MaxPDFBytes)
	if d, ok := egress.AsDenied(err); ok {
		o.skip, o.blocked = skip(spec.ReasonPolicy, "%v", d), d
		return o
	}
	if err != nil {
		o.skip = v.reason(ctx, err)
		return o
	}
	if d, ok := deniedResponse(&http.Response{StatusCode: resp.Status, Header: resp.Header}); ok {
		// The policy proxy refused this URL or a redirect on its way.
		o.skip, o.blocked = skip(spec.ReasonPolicy, "%v", d), d
		return o
	}
	if w, ok := proxyFailure(resp.Status, resp.Header, resp.Body); ok {
		o.skip = w
		return o
	}
	final := resp.FinalURL.String()
	if n, err := Normalize(final); err == nil {
		final = n
	}
	o.final = final
	if resp.Status < 400 && (resp.PDF || mayBePDF(resp.ContentType, resp.FinalURL.Path)) {
		return v.visitPDF(ctx, t, resp, o)
	}
	if !isHTML(resp.ContentType) && resp.Status < 400 {
		o.skip = skip(spec.ReasonContentType, "%s is not a document the crawler reads", cmp.Or(resp.ContentType, "an unknown type"))
		return o
	}
	ex, err := extract(resp.Body, resp.FinalURL)
	if err != nil {
		o.skip = skip(spec.ReasonUnreadable, "%v", err)
		return o
	}
	challenge := isChallenge(resp.Status, resp.Header, resp.Body, ex.Title, ex.Text)
	if resp.Status >= 400 && !challenge {
		o.skip = statusSkip(resp.Status)
		return o
	}

	status, mode, truncated := resp.Status, spec.ModeHTTP, resp.Truncated
	thin := utf8.RuneCountInString(ex.Text) < thinText
	if v.browser != nil && (v.in.Render == RenderAlways || challenge || (thin && ex.HasScript)) {
		// Rendering gets its own page timeout: the HTTP fetch may have used
		// most of the first one.
		rctx, rcancel := context.WithTimeout(ctx, v.pageTimeout)
		r, rerr := v.browser.render(rctx, final)
		rcancel()
		if rerr == nil {
			if ru, err := url.Parse(r.FinalURL); err == nil && (ru.Scheme == "http" || ru.Scheme == "https") {
				if rex, err := extract([]byte(r.HTML), ru); err == nil {
					rstatus := r.Status
					if rstatus == 0 {
						rstatus = status
					}
					if !isChallenge(rstatus, nil, []byte(r.HTML), rex.Title, rex.Text) {
						ex, status, mode, challenge, truncated = rex, rstatus, spec.ModeBrowser, false, false
						if n, err := Normalize(r.FinalURL); err == nil {
							o.final = n
						}
					}
				}
			}
		} else if ctx.Err() != nil {
			o.skip = v.reason(ctx, rerr)
			return o
		}
	}
	if challenge {
		o.skip = skip(spec.ReasonChallenge, "an anti-bot challenge page (status %d), not the page itself", status)
		return o
	}
	if status >= 400 {
		o.skip = statusSkip(status)
		return o
	}
	if ex.Text == "" {
		o.skip = skip(spec.ReasonUnreadable, "the page has no text")
		return o
	}
	if ex.Title == "" {
		ex.Title = t.title
	}
	content, cut := truncateText(ex.Text, v.in.Limits.MaxCharsPerSource)
	o.page = &Page{
		N: t.n, Parent: t.parent, URL: t.url, FinalURL: o.final,
		Title: ex.Title, Description: ex.Description, Content: content,
		Depth: t.depth, Status: status, Mode: mode, Truncated: truncated || cut,
	}
	o.links = ex.Links
	return o
}

func statusSkip(status int) why {
	return skip(spec.ReasonHTTPStatus, "HTTP %d %s", status, http.StatusText(status))
}

// reason names a failed fetch; once the crawl itself is stopping, a failure
// is the stop and not the page's fault.
func (v *visitor) reason(crawlCtx context.Context, err error) why {
	if crawlCtx.Err() != nil {
		return skip(spec.ReasonBudget, "the crawl stopped during the fetch")
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return skip(spec.ReasonTimeout, "no answer within %s", v.pageTimeout)
	}
	return fetchError(err)
}
