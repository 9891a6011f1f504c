package search

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/net/html"
)

// SearxNG searches through a SearxNG instance's JSON API. The instance must
// list json in search.formats of its settings.yml; otherwise it answers 403.
type SearxNG struct {
	base string
	http HTTP
}

// NewSearxNG returns the backend for the instance at baseURL, such as
// "http://127.0.0.1:8888".
func NewSearxNG(baseURL string, h HTTP) (*SearxNG, error) {
	base, err := checkBase("searxng", baseURL)
	if err != nil {
		return nil, err
	}
	return &SearxNG{base: base, http: h}, nil
}

func (*SearxNG) Name() string { return "searxng" }

func (s *SearxNG) Search(ctx context.Context, query string, limit int) ([]Result, error) {
	if limit < 1 {
		return nil, &Error{Backend: s.Name(), Detail: errNoLimit.Error()}
	}
	u := s.base + "/search?" + url.Values{"q": {query}, "format": {"json"}}.Encode()
	body, err := s.http.do(ctx, s.Name(), "", func(ctx context.Context) (*http.Request, error) {
		return http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	})
	if err != nil {
		if e, ok := err.(*Error); ok && e.Status == http.StatusForbidden {
			e.Detail = "the instance refuses format=json (add json to search.formats in its settings.yml)"
		}
		return nil, err
	}
	var answer struct {
		Results []struct {
			URL     string `json:"url"`
			Title   string `json:"title"`
			Content string `json:"content"`
		} `json:"results"`
	}
	if err := decode(s.Name(), body, &answer); err != nil {
		return nil, err
	}
	out := make([]Result, 0, min(limit, len(answer.Results)))
	for _, r := range answer.Results {
		if len(out) == limit {
			break
		}
		if r.URL == "" {
			continue
		}
		out = append(out, Result{URL: r.URL, Title: clean(r.Title), Snippet: clean(r.Content), Engine: s.Name(), Rank: len(out) + 1})
	}
	return out, nil
}

// Serper searches Google through serper.dev.
type Serper struct {
	base string
	key  string
	http HTTP
}

// SerperURL is Serper's API.
const SerperURL = "https://google.serper.dev"

// NewSerper returns the backend with an API key; baseURL "" means
// SerperURL.
func NewSerper(apiKey, baseURL string, h HTTP) (*Serper, error) {
	if apiKey == "" {
		return nil, &Error{Backend: "serper", Detail: "no API key"}
	}
	if baseURL == "" {
		baseURL = SerperURL
	}
	base, err := checkBase("serper", baseURL)
	if err != nil {
		return nil, err
	}
	return &Serper{base: base, key: apiKey, http: h}, nil
}

func (*Serper) Name() string { return "serper" }

// String keeps the key out of %v.
func (s *Serper) String() string { return "serper(" + s.base + ")" }

func (s *Serper) Search(ctx context.Context, query string, limit int) ([]Result, error) {
	if limit < 1 {
		return nil, &Error{Backend: s.Name(), Detail: errNoLimit.Error()}
	}
	payload, err := json.Marshal(struct {
		Q   string `json:"q"`
		Num int    `json:"num"`
	}{query, min(limit, 100)})
	if err != nil {
		return nil, err
	}
	body, err := s.http.do(ctx, s.Name(), s.key, func(ctx context.Context) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/search", bytes.NewReader(payload))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-KEY", s.key)
		return req, nil
	})
	if err != nil {
		return nil, err
	}
	var answer struct {
		Organic []struct {
			Title    string `json:"title"`
			Link     string `json:"link"`
			Snippet  string `json:"snippet"`
			Position int    `json:"position"`
		} `json:"organic"`
	}
	if err := decode(s.Name(), body, &answer); err != nil {
		return nil, err
	}
	out := make([]Result, 0, min(limit, len(answer.Organic)))
	for _, r := range answer.Organic {
		if len(out) == limit {
			break
		}
		if r.Link == "" {
			continue
		}
		rank := r.Position
		if rank <= 0 {
			rank = len(out) + 1
		}
		out = append(out, Result{URL: r.Link, Title: clean(r.Title), Snippet: clean(r.Snippet), Engine: s.Name(), Rank: rank})
	}
	return out, nil
}

// Wikipedia searches one language's Wikipedia through the MediaWiki API; it
// needs no key, so it is the default that works on any machine online.
type Wikipedia struct {
	base string
	http HTTP
}

var wikiLang = regexp.MustCompile(`^[a-z]{2,12}(-[a-z0-9]{1,12}){0,3}$`)

// NewWikipedia returns the backend for lang ("en"); baseURL "" means
// https://<lang>.wikipedia.org. The API is at <base>/w/api.php and pages
// at <base>/wiki/<title>.
func NewWikipedia(lang, baseURL string, h HTTP) (*Wikipedia, error) {
	if baseURL == "" {
		if !wikiLang.MatchString(lang) {
			return nil, &Error{Backend: "wikipedia", Detail: fmt.Sprintf("%q is not a Wikipedia language code", lang)}
		}
		baseURL = "https://" + lang + ".wikipedia.org"
	}
	base, err := checkBase("wikipedia", baseURL)
	if err != nil {
		return nil, err
	}
	return &Wikipedia{base: base, http: h}, nil
}

func (*Wikipedia) Name() string { return "wikipedia" }

func (w *Wikipedia) Search(ctx context.Context, query string, limit int) ([]Result, error) {
	if limit < 1 {
		return nil, &Error{Backend: w.Name(), Detail: errNoLimit.Error()}
	}
	// srlimit goes to 500, but a deep-research job reads a few dozen pages.
	n := min(limit, 50)
	u := w.base + "/w/api.php?" + url.Values{
		"action": {"query"}, "list": {"search"}, "srsearch": {query},
		"format": {"json"}, "srlimit": {strconv.Itoa(n)}, "utf8": {"1"},
	}.Encode()
	body, err := w.http.do(ctx, w.Name(), "", func(ctx context.Context) (*http.Request, error) {
		return http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	})
	if err != nil {
		return nil, err
	}
	var answer struct {
		// The API reports bad parameters with 200 and an error object.
		Error *struct {
			Code string `json:"code"`
			Info string `json:"info"`
		} `json:"error"`
		Query struct {
			Search []struct {
				Title   string `json:"title"`
				Snippet string `json:"snippet"`
			} `json:"search"`
		} `json:"query"`
	}
	if err := decode(w.Name(), body, &answer); err != nil {
		return nil, err
	}
	if e := answer.Error; e != nil {
		return nil, &Error{Backend: w.Name(), Detail: shorten("API error "+e.Code+": "+e.Info, 200)}
	}
	out := make([]Result, 0, len(answer.Query.Search))
	for _, r := range answer.Query.Search {
		if len(out) == n {
			break
		}
		if r.Title == "" {
			continue
		}
		out = append(out, Result{URL: w.PageURL(r.Title), Title: r.Title, Snippet: StripHTML(r.Snippet), Engine: w.Name(), Rank: len(out) + 1})
	}
	return out, nil
}

// PageURL returns the address of the article titled title, escaped as
// MediaWiki writes its own links ("Go_(programming_language)"), so that it
// is the same URL other search engines return for the page.
func (w *Wikipedia) PageURL(title string) string {
	const keep = ";@$!*(),/~:_-."
	var b strings.Builder
	b.WriteString(w.base + "/wiki/")
	for _, c := range []byte(strings.ReplaceAll(title, " ", "_")) {
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(keep, c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// StripHTML returns the text of an HTML fragment (entities decoded, tags
// dropped, white space collapsed), as Wikipedia's snippets need: they mark
// matches with <span class="searchmatch">.
func StripHTML(fragment string) string {
	z := html.NewTokenizer(strings.NewReader(fragment))
	var b strings.Builder
	for {
		switch z.Next() {
		case html.ErrorToken:
			return strings.Join(strings.Fields(b.String()), " ")
		case html.TextToken:
			b.Write(z.Text())
		case html.StartTagToken, html.EndTagToken, html.SelfClosingTagToken:
			// <br> and block tags separate words; inline tags do not.
			name, _ := z.TagName()
			switch string(name) {
			case "br", "p", "div", "li", "tr", "td", "th", "h1", "h2", "h3", "h4", "h5", "h6":
				b.WriteByte(' ')
			}
		}
	}
}

// clean collapses white space in a title or snippet.
func clean(s string) string { return strings.Join(strings.Fields(s), " ") }

func checkBase(backend, raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		// The value is not quoted: it could hold credentials.
		return "", &Error{Backend: backend, Detail: "base URL must be http(s)://host[/path] without a query or fragment"}
	}
	return strings.TrimRight(raw, "/"), nil
}
