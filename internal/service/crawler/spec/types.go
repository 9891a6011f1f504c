// Package spec is the crawler's wire format: input.json, output.json and
// the progress lines. The supervising phase imports only this package, so a
// Lambda does not link the crawler's HTML and browser code.
package spec

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// Source is a page the crawl starts from, as discovery found it.
type Source struct {
	N       int    `json:"n"`
	URL     string `json:"url"`
	Title   string `json:"title,omitempty"`
	Snippet string `json:"snippet,omitempty"`
}

// Limits bound one crawl. A zero field takes the default of DefaultLimits.
//
// The page limits count URLs fetched, skipped ones included: a fetch costs
// its time whatever it brings. Followed links to obvious non-pages (images,
// archives; PDFs too when the sandbox has no PDF extractor) are not fetched
// and so do not count.
type Limits struct {
	MaxPages          int `json:"max_pages,omitempty"`
	MaxDepth          int `json:"max_depth,omitempty"`          // 1 = the sources only, 2 = one level of links
	MaxLinksPerPage   int `json:"max_links_per_page,omitempty"` // new same-host links followed from one page
	MaxPagesPerHost   int `json:"max_pages_per_host,omitempty"`
	MaxCharsPerSource int `json:"max_chars_per_source,omitempty"`
	MaxDurationMS     int `json:"max_duration_ms,omitempty"`
	Concurrency       int `json:"concurrency,omitempty"`
	PageTimeoutMS     int `json:"page_timeout_ms,omitempty"` // per fetch; a render gets its own
	MaxPageBytes      int `json:"max_page_bytes,omitempty"`
	// MaxPDFBytes bounds a PDF download: a PDF cut short cannot be read
	// (its index is at the end), and papers are larger than pages.
	MaxPDFBytes int `json:"max_pdf_bytes,omitempty"`
}

// DefaultLimits are chutes-search's light mode (22 pages, seed pages only, 12
// minutes) plus the fetching defaults of the crawler.
var DefaultLimits = Limits{
	MaxPages:          22,
	MaxDepth:          1,
	MaxLinksPerPage:   8,
	MaxPagesPerHost:   4,
	MaxCharsPerSource: 8000,
	MaxDurationMS:     int(12 * time.Minute / time.Millisecond),
	Concurrency:       6,
	PageTimeoutMS:     15000,
	MaxPageBytes:      5 << 20,
	MaxPDFBytes:       20 << 20,
}

// Render modes. In RenderAuto a page is fetched over HTTP first and rendered
// in the browser only when that looks necessary (see Crawl); RenderAlways
// renders every HTML page; RenderNever never starts a browser.
const (
	RenderAuto   = "auto"
	RenderAlways = "always"
	RenderNever  = "never"
)

// Input is the crawler's input.json.
type Input struct {
	Sources     []Source `json:"sources"`
	Limits      Limits   `json:"limits"`
	Render      string   `json:"render,omitempty"`
	BrowserPath string   `json:"browser_path,omitempty"`
	UserAgent   string   `json:"user_agent,omitempty"`
	// AllowPrivate lists the never-public addresses the crawl may fetch
	// all the same ([sandbox] allow_private: "IP", "IP:port", "CIDR" or
	// "CIDR:port"). Everything else on loopback, link-local (the metadata
	// service), private ranges and this machine's own addresses is
	// skipped with reason "policy", seeds and redirects alike. Where the
	// sandbox leaves through a policy proxy (SANDSTEP_EGRESS_PROXY), the
	// proxy decides with the same rules and this is not used.
	AllowPrivate []string `json:"allow_private,omitempty"`
}

// DefaultUserAgent names the crawler after a browser prefix, because many
// sites answer unknown agents with a challenge or an error page.
const DefaultUserAgent = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36 sandstep-crawler/1"

// ErrInput marks an input that cannot be crawled; no output is written for it.
var ErrInput = errors.New("invalid crawler input")

// ReadInput decodes input.json strictly: an unknown field is more likely a
// typo in the caller than something to ignore.
func ReadInput(r io.Reader) (Input, error) {
	var in Input
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return Input{}, fmt.Errorf("%w: %w", ErrInput, err)
	}
	return in, nil
}

// WithDefaults fills zero fields and rejects what cannot be meant.
func (in Input) WithDefaults() (Input, error) {
	l := &in.Limits
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{
		{"max_pages", &l.MaxPages, DefaultLimits.MaxPages},
		{"max_depth", &l.MaxDepth, DefaultLimits.MaxDepth},
		{"max_links_per_page", &l.MaxLinksPerPage, DefaultLimits.MaxLinksPerPage},
		{"max_pages_per_host", &l.MaxPagesPerHost, DefaultLimits.MaxPagesPerHost},
		{"max_chars_per_source", &l.MaxCharsPerSource, DefaultLimits.MaxCharsPerSource},
		{"max_duration_ms", &l.MaxDurationMS, DefaultLimits.MaxDurationMS},
		{"concurrency", &l.Concurrency, DefaultLimits.Concurrency},
		{"page_timeout_ms", &l.PageTimeoutMS, DefaultLimits.PageTimeoutMS},
		{"max_page_bytes", &l.MaxPageBytes, DefaultLimits.MaxPageBytes},
		{"max_pdf_bytes", &l.MaxPDFBytes, DefaultLimits.MaxPDFBytes},
	} {
		if *f.v < 0 {
			return Input{}, fmt.Errorf("%w: %s is negative (%d)", ErrInput, f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	switch in.Render {
	case "":
		in.Render = RenderAuto
	case RenderAuto, RenderAlways, RenderNever:
	default:
		return Input{}, fmt.Errorf("%w: render is %q, want auto, always or never", ErrInput, in.Render)
	}

	if in.UserAgent == "" {
		in.UserAgent = DefaultUserAgent
	}
	return in, nil
}

// Page is one crawled page.
type Page struct {
	N           int    `json:"n"`                // source number of the seed it came from
	Parent      string `json:"parent,omitempty"` // URL of the page that linked to it; empty for a seed
	URL         string `json:"url"`
	FinalURL    string `json:"final_url"`
	Title       string `json:"title"`
	Description string `json:"description,omitempty"`
	Content     string `json:"content"`
	Depth       int    `json:"depth"`
	Status      int    `json:"status"`
	Mode        string `json:"mode"` // ModeHTTP, ModeBrowser or ModePDF
	// Pages is the page count of a PDF; 0 for a web page.
	Pages     int  `json:"pages,omitempty"`
	Truncated bool `json:"truncated"`
}

// How a page's text was read.
const (
	ModeHTTP    = "http"    // the HTML as the server sent it
	ModeBrowser = "browser" // the HTML after headless Chromium ran the page's scripts
	ModePDF     = "pdf"     // a PDF's text, extracted with pdftotext
)

// Skipped is a URL that was planned but gave no page: Reason is one of
// Reasons, Message the specifics.
type Skipped struct {
	URL     string `json:"url"`
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
	// Address is the address the network policy refused (Reason
	// ReasonPolicy), such as "127.0.0.1:8080".
	Address string `json:"address,omitempty"`
}

// Why a crawl stopped.
const (
	StoppedDone     = "done"     // nothing left to crawl within the limits
	StoppedDuration = "duration" // max_duration_ms ran out: partial results
	StoppedPages    = "pages"    // max_pages was reached with URLs left over
	StoppedSignal   = "signal"   // the caller cancelled (SIGTERM): partial results
)

// Stats sums up a crawl.
type Stats struct {
	Pages      int    `json:"pages"`
	DurationMS int64  `json:"duration_ms"`
	Mode       string `json:"mode"` // "browser" when at least one page was rendered, else "http"
	Stopped    string `json:"stopped"`
}

// Output is the crawler's output.json.
type Output struct {
	Pages   []Page    `json:"pages"`
	Skipped []Skipped `json:"skipped"`
	Stats   Stats     `json:"stats"`
}
