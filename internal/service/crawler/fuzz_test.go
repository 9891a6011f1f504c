package crawler

import (
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzExtract parses arbitrary documents as crawled pages: a page is
// hostile input, so no document may panic the crawler, every link kept is
// an absolute http(s) URL, and the description stays within its bound.
func FuzzExtract(f *testing.F) {
	fallback, _ := url.Parse("https://birds.example.com/news/kestrels?id=1")
	f.Fuzz(func(t *testing.T, doc []byte, pageURL string) {
		u, err := url.Parse(pageURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			u = fallback
		}
		ex, err := extract(doc, u)
		if err != nil {
			return
		}
		for _, l := range ex.Links {
			lu, err := url.Parse(l)
			if err != nil || (lu.Scheme != "http" && lu.Scheme != "https") {
				t.Fatalf("link %q is not an absolute http(s) URL", l)
			}
		}
		if n := utf8.RuneCountInString(ex.Description); n > maxDescription {
			t.Fatalf("description of %d runes, the bound is %d", n, maxDescription)
		}
		if strings.Contains(ex.Title, "\n") || strings.Contains(ex.Text, "\n\n\n") {
			t.Fatalf("title %q or text not tidied", ex.Title)
		}
		// The challenge check reads the same page without trouble.
		_ = isChallenge(403, nil, doc, ex.Title, ex.Text)
	})
}
