// Package fixturesite serves a small web for crawler tests: several sites on
// 127.0.0.1, each its own host (distinct ports), with the same layout of
// linked articles several levels deep, a link to the next site, and pages
// that exercise the crawler's edge cases (slow, huge, redirect loop, PDF,
// anti-bot challenge, JavaScript-only, gzip, latin-1, a binary download), and
// two documents with facts of their own (a survey page and a PDF paper) for
// citation checks. It counts the requests of every path so that tests can
// assert what was fetched.
package fixturesite

import (
	"compress/gzip"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// Special pages, on every host. None is linked from the article tree.
const (
	PathSlow      = "/slow"         // answers after Options.SlowLatency
	PathHuge      = "/huge"         // an article of Options.HugeBytes bytes
	PathLoop      = "/loop/a"       // redirects to /loop/b, which redirects back
	PathRedirect  = "/moved"        // redirects permanently to /a
	PathPDF       = "/report.pdf"   // application/pdf, a valid PDF with no pages and so no text
	PathGo        = "/go"           // redirects to the URL in its "to" query parameter (see Host.RedirectTo)
	PathChallenge = "/challenge"    // a Cloudflare "Just a moment..." interstitial, status 503
	PathJS        = "/app"          // text that only a script puts in the page
	PathGzip      = "/gzip"         // an article sent gzip-compressed
	PathLatin1    = "/latin1"       // an article in ISO-8859-1
	PathImage     = "/pixel.png"    // an image that PathJS shows; a browser that blocks images never asks for it
	PathNotFound  = "/no-such-page" // any unknown path is a 404
	PathStudy     = "/study"        // an article of StudySentences
	PathPaper     = "/paper.pdf"    // a PDF of PaperPages, titled PaperTitle
	PathBinary    = "/download.bin" // application/octet-stream bytes
)

// The survey article: facts with numbers that no other page has.
const StudyTitle = "Kestrel nest survey on the northern ridge"

var StudySentences = []string{
	"The ridge survey recorded 214 kestrel nests between 2019 and 2021.",
	"Of those nests, 61 percent fledged at least one chick.",
	"Nest boxes facing east were occupied about a week earlier than boxes facing west.",
	"Rainfall in May was the strongest predictor of late clutches.",
	"Volunteers checked every box twice a month from March to July.",
	"The survey team recommends replacing wooden boxes after eight seasons.",
}

// The PDF paper: three pages on another subject than the survey.
const PaperTitle = "Falcon migration telemetry report"

var PaperPages = [][]string{
	{
		"Falcon migration telemetry report.",
		"Satellite tags were fitted to 38 peregrine falcons in the spring of 2020.",
		"The tagged falcons travelled a median distance of 4,200 kilometres to their wintering grounds.",
	},
	{
		"Most tagged birds crossed the Mediterranean Sea within two days.",
		"Juvenile falcons left the breeding cliffs eleven days later than the adults.",
	},
	{
		"Battery failures ended the tracking of five birds before the spring return.",
		"The authors call for lighter tags with solar charging.",
	},
}

// Layout is the article tree of every host: each page's same-host links in
// document order (navigation first, then the article's links, then the
// footer). The index also links to the next host's index, between the
// article links and the footer, as the only cross-host link.
var Layout = map[string][]string{
	"/":        {"/", "/about", "/a", "/b", "/c", "/d", "/e", "/f", "/g", "/h", "/i", "/j", "/contact"},
	"/a":       {"/", "/about", "/a1", "/a2", "/contact"},
	"/a1":      {"/", "/about", "/a1x", "/contact"},
	"/a1x":     {"/", "/about", "/a1xy", "/contact"},
	"/a1xy":    {"/", "/about", "/contact"},
	"/a2":      {"/", "/about", "/contact"},
	"/b":       {"/", "/about", "/b1", "/contact"},
	"/b1":      {"/", "/about", "/contact"},
	"/c":       {"/", "/about", "/contact"},
	"/d":       {"/", "/about", "/contact"},
	"/e":       {"/", "/about", "/contact"},
	"/f":       {"/", "/about", "/contact"},
	"/g":       {"/", "/about", "/contact"},
	"/h":       {"/", "/about", "/contact"},
	"/i":       {"/", "/about", "/contact"},
	"/j":       {"/", "/about", "/contact"},
	"/about":   {"/", "/about", "/contact"},
	"/contact": {"/", "/about", "/contact"},
}

// Text that the page frame puts around every article, so tests can check
// that extraction leaves it out.
const (
	navLabel   = "Fixture navigation:"
	NavText    = navLabel + " Home About"
	FooterText = "Fixture footer: copyright the fixture company, all rights reserved"
)

// JSText is the sentence that the script of PathJS writes into the page;
// the HTML as served does not show it.
const JSText = "The rendered kestrel report appears only after the script runs."

// LatinText is a sentence of PathLatin1 with letters outside ASCII.
const LatinText = "Crème brûlée and façade survive the latin-1 round trip."

// Options shape a site. Zero values take the defaults.
type Options struct {
	Hosts       int           // number of sites; default 3
	Latency     time.Duration // added before every answer; default 0
	SlowLatency time.Duration // delay of PathSlow; default 30 s
	HugeBytes   int           // size of PathHuge; default 20 MiB
}

// Host is one site.
type Host struct {
	Name string // "alpha", "beta", ...
	URL  string // "http://127.0.0.1:port", no trailing slash
	srv  *httptest.Server
}

// Page returns the absolute URL of path on this host.
func (h *Host) Page(path string) string { return h.URL + path }

// RedirectTo returns a URL on h that redirects to target: an allowed page
// that sends the crawler elsewhere.
func (h *Host) RedirectTo(target string) string {
	return h.URL + PathGo + "?to=" + url.QueryEscape(target)
}

// Marker is a sentence that only the article at path on h contains.
func (h *Host) Marker(path string) string {
	return fmt.Sprintf("This is the article %s of the %s site.", path, h.Name)
}

// Site is a running fixture web.
type Site struct {
	Hosts []*Host
	opts  Options

	mu   sync.Mutex
	hits map[string]int // "127.0.0.1:port/path" -> requests
}

var hostNames = []string{"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"}

// Start starts the site's servers on 127.0.0.1; they stop when the test ends.
func Start(tb testing.TB, opts Options) *Site {
	tb.Helper()
	if opts.Hosts <= 0 {
		opts.Hosts = 3
	}
	if opts.Hosts > len(hostNames) {
		tb.Fatalf("fixturesite: at most %d hosts", len(hostNames))
	}
	if opts.SlowLatency <= 0 {
		opts.SlowLatency = 30 * time.Second
	}
	if opts.HugeBytes <= 0 {
		opts.HugeBytes = 20 << 20
	}
	s := &Site{opts: opts, hits: map[string]int{}}
	for i := range opts.Hosts {
		h := &Host{Name: hostNames[i]}
		h.srv = httptest.NewServer(s.handler(h))
		h.URL = h.srv.URL
		s.Hosts = append(s.Hosts, h)
	}
	tb.Cleanup(func() {
		for _, h := range s.Hosts {
			// Closing the connections first ends handlers that are still
			// waiting (the slow page); Close alone would wait for them.
			h.srv.CloseClientConnections()
			h.srv.Close()
		}
	})
	return s
}

// AllowPrivate lists the site's hosts as [sandbox] allow_private entries
// ("127.0.0.1:port"): sandboxes and crawls reach loopback only where they
// are told they may.
func (s *Site) AllowPrivate() []string {
	out := make([]string, len(s.Hosts))
	for i, h := range s.Hosts {
		out[i] = strings.TrimPrefix(h.URL, "http://")
	}
	return out
}

// next returns the host after h, wrapping around: the target of the index's
// cross-host link.
func (s *Site) next(h *Host) *Host {
	for i, o := range s.Hosts {
		if o == h {
			return s.Hosts[(i+1)%len(s.Hosts)]
		}
	}
	return h
}

// Hits returns how many requests the URL's host and path received (the query
// is ignored).
func (s *Site) Hits(rawURL string) int {
	u, err := url.Parse(rawURL)
	if err != nil {
		return 0
	}
	p := u.Path
	if p == "" {
		p = "/"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits[u.Host+p]
}

// TotalHits returns the number of requests to all hosts.
func (s *Site) TotalHits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.hits {
		n += v
	}
	return n
}

func (s *Site) handler(h *Host) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.hits[r.Host+r.URL.Path]++
		s.mu.Unlock()
		if !wait(r, s.opts.Latency) {
			return
		}
		switch p := r.URL.Path; {
		case Layout[p] != nil:
			s.article(w, h, p)
		case p == PathSlow:
			if wait(r, s.opts.SlowLatency) {
				s.article(w, h, p)
			}
		case p == PathHuge:
			s.huge(w, h)
		case p == PathLoop:
			http.Redirect(w, r, "/loop/b", http.StatusFound)
		case p == "/loop/b":
			http.Redirect(w, r, PathLoop, http.StatusFound)
		case p == PathRedirect:
			http.Redirect(w, r, "/a", http.StatusMovedPermanently)
		case p == PathGo:
			http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
		case p == PathPDF:
			w.Header().Set("Content-Type", "application/pdf")
			_, _ = io.WriteString(w, minimalPDF)
		case p == PathPaper:
			w.Header().Set("Content-Type", "application/pdf")
			_, _ = w.Write(paperPDF)
		case p == PathStudy:
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, page(StudyTitle, "How the kestrels of the northern ridge nested.", "<p>"+html.EscapeString(strings.Join(StudySentences[:3], " "))+"</p><p>"+html.EscapeString(strings.Join(StudySentences[3:], " "))+"</p>"))
		case p == PathBinary:
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = w.Write(binaryBlob)
		case p == PathChallenge:
			w.Header().Set("Content-Type", "text/html; charset=UTF-8")
			w.Header().Set("Server", "cloudflare")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, challengePage)
		case p == PathJS:
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprintf(w, jsPage, JSText, strings.Repeat(" It describes the falcon family in some detail, with notes on habitat and diet.", 6))
		case p == PathImage:
			w.Header().Set("Content-Type", "image/png")
			_, _ = io.WriteString(w, pixelPNG)
		case p == PathGzip:
			s.gzipped(w, r, h)
		case p == PathLatin1:
			w.Header().Set("Content-Type", "text/html; charset=iso-8859-1")
			_, _ = w.Write(toLatin1(page(h.Name+" latin-1", "", "<p>"+html.EscapeString(LatinText)+"</p>"+paragraphs(h.Name, p, 4))))
		default:
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, page("Not found", "", "<p>No page here.</p>"))
		}
	})
}

// wait sleeps d or until the client goes away; it reports whether to answer.
func wait(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

func (s *Site) article(w http.ResponseWriter, h *Host, path string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprint(w, s.articleHTML(h, path))
}

func (s *Site) articleHTML(h *Host, path string) string {
	var links strings.Builder
	layout := Layout[path]
	if layout == nil {
		layout = []string{"/", "/about", "/contact"}
	}
	// Navigation and footer links are the first two and the last entries.
	for _, l := range layout[2 : len(layout)-1] {
		fmt.Fprintf(&links, `<li><a href="%s">Read the article %s</a></li>`, l, l)
	}
	if path == "/" {
		fmt.Fprintf(&links, `<li><a href="%s/">The %s site</a></li>`, s.next(h).URL, s.next(h).Name)
	}
	body := "<p>" + html.EscapeString(h.Marker(path)) + "</p>" + paragraphs(h.Name, path, 5)
	if links.Len() > 0 {
		body += "<h2>Further reading</h2><ul>" + links.String() + "</ul>"
	}
	return page(fmt.Sprintf("%s %s", h.Name, path), "The "+h.Name+" article "+path+".", body)
}

// page wraps an article in the frame every page shares: head, navigation,
// sidebar, footer.
func page(title, description, article string) string {
	desc := ""
	if description != "" {
		desc = `<meta name="description" content="` + html.EscapeString(description) + `">`
	}
	return `<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>` + html.EscapeString(title) + `</title>` + desc + `</head><body>
<header><nav class="menu">` + navLabel + ` <a href="/">Home</a> <a href="/about">About</a></nav></header>
<main><article><h1>` + html.EscapeString(title) + `</h1>` + article + `</article></main>
<footer class="site-footer"><p>` + FooterText + `</p><a href="/contact">Contact</a></footer>
</body></html>`
}

var sentences = []string{
	"Field notes describe how the colony moves between valleys as the seasons turn.",
	"Researchers counted nests along the ridge for three consecutive summers.",
	"The survey compared rainfall records with the timing of the first flights.",
	"Local observers kept journals that later proved invaluable to the analysis.",
	"Several hypotheses were tested, and most were rejected by the evidence.",
	"The final chapter weighs the costs of each conservation strategy.",
	"Maps in the appendix show the routes that the birds followed each year.",
}

// paragraphs returns n paragraphs of text that differ by host and path.
func paragraphs(host, path string, n int) string {
	var b strings.Builder
	seed := len(host)*7 + len(path)*3
	for i := range n {
		b.WriteString("<p>")
		for j := range 4 {
			b.WriteString(sentences[(seed+i*4+j)%len(sentences)])
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "Paragraph %d of %s on %s.</p>", i+1, html.EscapeString(path), host)
	}
	return b.String()
}

func (s *Site) huge(w http.ResponseWriter, h *Host) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	head := `<!DOCTYPE html><html><head><title>` + h.Name + ` huge</title></head><body><article><h1>Huge</h1><p>` + h.Marker(PathHuge) + `</p>`
	chunk := []byte(paragraphs(h.Name, PathHuge, 50))
	written, err := fmt.Fprint(w, head)
	for err == nil && written < s.opts.HugeBytes {
		var n int
		n, err = w.Write(chunk[:min(len(chunk), s.opts.HugeBytes-written)])
		written += n
	}
	// A client that stopped reading leaves err set; there is nothing to
	// close for it.
}

func (s *Site) gzipped(w http.ResponseWriter, r *http.Request, h *Host) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Vary", "Accept-Encoding")
	body := s.articleHTML(h, PathGzip)
	if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		fmt.Fprint(w, body)
		return
	}
	w.Header().Set("Content-Encoding", "gzip")
	zw := gzip.NewWriter(w)
	fmt.Fprint(zw, body)
	_ = zw.Close()
}

// toLatin1 encodes s, which must only hold Latin-1 letters, in ISO-8859-1.
func toLatin1(s string) []byte {
	b := make([]byte, 0, len(s))
	for _, r := range s {
		if r > 0xff {
			r = '?'
		}
		b = append(b, byte(r))
	}
	return b
}

var paperPDF = PDF(PaperTitle, PaperPages)

// binaryBlob is a download that is no document: bytes of every value.
var binaryBlob = func() []byte {
	b := make([]byte, 4096)
	for i := range b {
		b[i] = byte(i * 7)
	}
	return b
}()

// pixelPNG is a 1x1 transparent PNG.
const pixelPNG = "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82"

const minimalPDF = "%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n2 0 obj << /Type /Pages /Kids [] /Count 0 >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"

// challengePage is shaped after Cloudflare's managed challenge.
const challengePage = `<!DOCTYPE html><html lang="en-US"><head><title>Just a moment...</title>
<meta http-equiv="Content-Type" content="text/html; charset=UTF-8"><meta name="robots" content="noindex,nofollow">
<script>(function(){window._cf_chl_opt={cvId: '3',cZone: "example.com",cType: 'managed'};var cpo=document.createElement('script');cpo.src='/cdn-cgi/challenge-platform/h/g/orchestrate/chl_page/v1';document.getElementsByTagName('head')[0].appendChild(cpo);}());</script>
</head><body><div class="main-wrapper" role="main"><div class="main-content"><h1 class="zone-name-title h1">example.com</h1>
<h2 class="h2" id="challenge-running">Checking if the site connection is secure</h2>
<noscript><div class="h2">Enable JavaScript and cookies to continue</div></noscript>
<div id="challenge-body-text" class="core-msg spacer">example.com needs to review the security of your connection before proceeding.</div>
</div></div><div class="footer" role="contentinfo"><div class="footer-inner">Performance &amp; security by Cloudflare</div></div></body></html>`

// jsPage shows "Loading..." until its script writes the article.
const jsPage = `<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Fixture app</title></head><body>
<div id="root">Loading...</div><img src="/pixel.png" alt="">
<script>
document.getElementById("root").innerHTML = "<article><h1>Kestrels</h1><p>" + %q + %q + "</p></article>";
</script>
</body></html>`
