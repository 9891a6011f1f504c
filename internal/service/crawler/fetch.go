package crawler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/net/html/charset"
	"golang.org/x/text/transform"

	"github.com/sandstep/sandstep/internal/service/crawler/spec"
)

// maxRedirects bounds a redirect chain, as browsers do (Chrome stops at 20).
const maxRedirects = 10

// RedirectError is a redirect chain the crawler gave up on.
type RedirectError struct {
	Chain []string // the URLs in the order they were requested
	Loop  bool     // the chain came back to a URL it had requested
}

func (e *RedirectError) Error() string {
	if e.Loop {
		return "redirect loop: " + strings.Join(e.Chain, " -> ")
	}
	return fmt.Sprintf("more than %d redirects: %s", maxRedirects, strings.Join(e.Chain, " -> "))
}

// response is an HTTP answer, its body read up to the page size limit.
type response struct {
	FinalURL    *url.URL
	Status      int
	Header      http.Header
	ContentType string // media type without parameters
	Body        []byte // decoded to UTF-8 for HTML
	Truncated   bool   // the body was longer than max_page_bytes (max_pdf_bytes for a PDF)
	PDF         bool   // the body is a PDF document (by its first bytes)
}

func newClient(concurrency int, pageTimeout time.Duration, nw *egressNet) *http.Client {
	tr := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          4 * concurrency,
		MaxIdleConnsPerHost:   concurrency,
		IdleConnTimeout:       30 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: pageTimeout,
		// Accept-Encoding is left to the transport, which then asks for gzip
		// and decompresses transparently.
	}
	nw.setup(tr)
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			chain := make([]string, 0, len(via)+1)
			next := Key(req.URL.String())
			loop := false
			for _, v := range via {
				chain = append(chain, v.URL.String())
				if Key(v.URL.String()) == next {
					loop = true
				}
			}
			chain = append(chain, req.URL.String())
			if loop || len(via) >= maxRedirects {
				return &RedirectError{Chain: chain, Loop: loop}
			}
			return nil
		},
	}
}

// isHTML tells whether a media type is a document the extractor reads.
func isHTML(mediaType string) bool {
	return mediaType == "text/html" || mediaType == "application/xhtml+xml"
}

// errorBodyLimit bounds what is read of an error response: enough for the
// challenge markers, which sit near the top.
const errorBodyLimit = 64 << 10

// get fetches rawURL. The body of an HTML answer is read up to maxBytes and
// decoded to UTF-8; that of a PDF (see mayBePDF) up to maxPDF bytes; the body
// of any other type is not read at all.
func get(ctx context.Context, client *http.Client, rawURL, userAgent string, maxBytes, maxPDF int) (*response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, fmt.Errorf("new request: %w", err)
	}
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Accept", "text/html,application/xhtml+xml;q=0.9,application/pdf;q=0.8,*/*;q=0.5")
	req.Header.Set("Accept-Language", "en;q=0.9,*;q=0.5")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()

	r := &response{FinalURL: resp.Request.URL, Status: resp.StatusCode, Header: resp.Header}
	ct := resp.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err == nil {
		r.ContentType = strings.ToLower(mt)
	}
	limit := maxBytes
	if resp.StatusCode >= 400 {
		limit = min(limit, errorBodyLimit)
	}
	pdf := resp.StatusCode < 400 && mayBePDF(r.ContentType, resp.Request.URL.Path)
	if pdf {
		limit = maxPDF
	} else if r.ContentType != "" && !isHTML(r.ContentType) && resp.StatusCode < 400 {
		return r, nil
	}
	// Reading one byte past the limit tells a body that is exactly the
	// limit from a longer one without loading the rest.
	raw, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	if len(raw) > limit {
		raw, r.Truncated = raw[:limit], true
	}
	if pdf {
		// The type a server names is often wrong for downloads; the
		// first bytes are not.
		r.PDF = bytes.HasPrefix(bytes.TrimLeft(raw[:min(len(raw), 1024)], "\x00\t\n\r "), []byte("%PDF-"))
		r.Body = raw
		return r, nil
	}
	if r.ContentType == "" {
		r.ContentType, _, _ = strings.Cut(http.DetectContentType(raw), ";")
	}
	if isHTML(r.ContentType) {
		r.Body = toUTF8(raw, ct)
	} else {
		r.Body = raw
	}
	return r, nil
}

// toUTF8 decodes an HTML body with the charset of its Content-Type, its
// <meta> tags or a guess, as browsers do.
func toUTF8(raw []byte, contentType string) []byte {
	enc, name, _ := charset.DetermineEncoding(raw, contentType)
	if name == "utf-8" {
		return raw
	}
	out, _, err := transform.Bytes(enc.NewDecoder(), raw)
	if err != nil {
		return raw
	}
	return out
}

// mayBePDF tells whether a successful answer may be a PDF and its body is
// worth reading to find out: it says so, or it is an unnamed download whose
// address ends in .pdf.
func mayBePDF(mediaType, urlPath string) bool {
	switch mediaType {
	case "application/pdf", "application/x-pdf", "application/acrobat":
		return true
	case "", "application/octet-stream", "binary/octet-stream", "application/download", "application/force-download":
		return strings.HasSuffix(strings.ToLower(urlPath), ".pdf")
	}
	return false
}

// fetchError turns a failed fetch into the reason recorded in skipped.
func fetchError(err error) why {
	var re *RedirectError
	switch {
	case errors.As(err, &re):
		return why{code: spec.ReasonRedirectLoop, msg: re.Error()}
	case errors.Is(err, context.DeadlineExceeded):
		return skip(spec.ReasonTimeout, "no answer in time")
	case errors.Is(err, context.Canceled):
		return skip(spec.ReasonBudget, "the crawl stopped during the fetch")
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return skip(spec.ReasonTimeout, "no answer in time")
		}
		return why{code: spec.ReasonFetchError, msg: ue.Err.Error()}
	}
	return why{code: spec.ReasonFetchError, msg: err.Error()}
}
