package crawler

import (
	"bytes"
	"fmt"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	readability "codeberg.org/readeck/go-readability"
	"codeberg.org/readeck/go-readability/render"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// extraction is what the crawler keeps of an HTML document.
type extraction struct {
	Title       string
	Description string
	Text        string
	Links       []string // absolute URLs in document order, as written (not normalized)
	HasScript   bool     // the page runs JavaScript of its own
}

// maxDescription bounds the description: it is a summary line, and some
// sites put whole articles in their meta tags.
const maxDescription = 500

// extract parses an HTML document fetched from pageURL. The main text comes
// from readability (Mozilla's algorithm), which scores blocks by text density
// and drops navigation, sidebars and footers; the links, the metadata and the
// script check come from the whole DOM before readability prunes it.
func extract(doc []byte, pageURL *url.URL) (extraction, error) {
	root, err := html.Parse(bytes.NewReader(doc))
	if err != nil {
		return extraction{}, fmt.Errorf("parse html: %w", err)
	}
	var ex extraction
	var docTitle, metaDesc, ogDesc string
	base := pageURL
	var body *html.Node
	var hrefs []string
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			switch n.DataAtom {
			case atom.Base:
				if h := attr(n, "href"); h != "" && base == pageURL {
					if b, err := pageURL.Parse(h); err == nil {
						base = b
					}
				}
			case atom.Title:
				if docTitle == "" {
					docTitle = nodeText(n)
				}
			case atom.Meta:
				name := strings.ToLower(attr(n, "name"))
				prop := strings.ToLower(attr(n, "property"))
				switch {
				case name == "description" && metaDesc == "":
					metaDesc = attr(n, "content")
				case (prop == "og:description" || name == "twitter:description") && ogDesc == "":
					ogDesc = attr(n, "content")
				}
			case atom.A, atom.Area:
				if h := attr(n, "href"); h != "" {
					hrefs = append(hrefs, h)
				}
			case atom.Script:
				typ := strings.ToLower(attr(n, "type"))
				if typ == "" || strings.Contains(typ, "javascript") || typ == "module" {
					ex.HasScript = true
				}
			case atom.Body:
				if body == nil {
					body = n
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(root)

	// The <base> element, where present, changes how every relative link
	// resolves, so links are resolved after the walk.
	for _, h := range hrefs {
		u, err := base.Parse(strings.TrimSpace(h))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
			continue
		}
		ex.Links = append(ex.Links, u.String())
	}

	parser := readability.NewParser()
	article, err := parser.ParseAndMutate(root, pageURL)
	if err == nil {
		ex.Title = article.Title
		ex.Text = article.TextContent
		if metaDesc == "" && ogDesc == "" {
			metaDesc = article.Excerpt
		}
	}
	if ex.Text == "" && body != nil {
		// Readability found no article block (a list page, a tiny page):
		// the visible text of the body is better than nothing. It was
		// pruned of scripts and styles by readability already.
		ex.Text = render.InnerText(body)
	}
	if ex.Title == "" {
		ex.Title = docTitle
	}
	ex.Title = collapseSpaces(ex.Title)
	if metaDesc == "" {
		metaDesc = ogDesc
	}
	ex.Description, _ = truncateText(collapseSpaces(metaDesc), maxDescription)
	ex.Text = tidyText(ex.Text)
	return ex, nil
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Namespace == "" && strings.EqualFold(a.Key, key) {
			return a.Val
		}
	}
	return ""
}

func nodeText(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

func collapseSpaces(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// tidyText trims every line, collapses runs of spaces inside lines and keeps
// at most one blank line between paragraphs.
func tidyText(s string) string {
	var b strings.Builder
	blank := 0
	for line := range strings.SplitSeq(s, "\n") {
		line = collapseSpaces(line)
		if line == "" {
			blank++
			continue
		}
		if b.Len() > 0 {
			if blank > 0 {
				b.WriteString("\n\n")
			} else {
				b.WriteByte('\n')
			}
		}
		blank = 0
		b.WriteString(line)
	}
	return b.String()
}

// truncateText cuts s to at most max runes, at a word boundary when one is
// close to the limit, and reports whether it cut.
func truncateText(s string, max int) (string, bool) {
	if max <= 0 || utf8.RuneCountInString(s) <= max {
		return s, false
	}
	cut := 0
	for i := range s {
		if max == 0 {
			cut = i
			break
		}
		max--
	}
	head := s[:cut]
	// Back up to the last space if it is within the last tenth, so that
	// the text does not end in half a word.
	if sp := strings.LastIndexFunc(head, unicode.IsSpace); sp > 0 && sp >= len(head)-len(head)/10 {
		head = head[:sp]
	}
	return strings.TrimRightFunc(head, unicode.IsSpace), true
}
