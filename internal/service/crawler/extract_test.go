package crawler

import (
	"net/url"
	"slices"
	"strings"
	"testing"
)

const newsPage = `<!DOCTYPE html><html><head>
<title>Kestrel survey 2024 | Birds Weekly</title>
<meta name="description" content="  What three summers of nest counts say   about kestrels. ">
<base href="/news/">
<script src="/analytics.js"></script>
<style>.x{color:red}</style>
</head><body>
<header><nav><a href="/">Home</a> <a href="/news/">News</a> <a href="/sport/">Sport</a> NAVTOKEN menu</nav></header>
<aside class="sidebar"><h3>Trending</h3><ul><li><a href="/t1">SIDEBARTOKEN celebrity gossip</a></li></ul></aside>
<main><article>
<h1>Kestrel survey 2024</h1>
<p>Researchers counted kestrel nests along the northern ridge for three consecutive summers, and the numbers tell a clear story about the colony.</p>
<p>The survey compared rainfall records with the timing of the first flights; wet springs delayed fledging by nearly two weeks, the authors write.</p>
<p>Local observers kept journals that later proved invaluable. <a href="kestrel-methods">The methods</a> are published separately, with <a href="https://data.example.org/kestrels.csv">the raw data</a>.</p>
<p>Several hypotheses were tested, and most were rejected by the evidence, leaving food supply as the main driver of breeding success.</p>
</article></main>
<footer><p>FOOTERTOKEN Copyright Birds Weekly. All rights reserved.</p><a href="mailto:desk@example.com">Mail</a> <a href="javascript:void(0)">Top</a> <a href="#top">Up</a></footer>
</body></html>`

func TestExtractPicksTheArticle(t *testing.T) {
	base, _ := url.Parse("https://birds.example.com/news/kestrels?id=1")
	ex, err := extract([]byte(newsPage), base)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ex.Text, "Researchers counted kestrel nests") || !strings.Contains(ex.Text, "food supply as the main driver") {
		t.Errorf("article text missing: %q", ex.Text)
	}
	for _, noise := range []string{"NAVTOKEN", "SIDEBARTOKEN", "FOOTERTOKEN", "color:red"} {
		if strings.Contains(ex.Text, noise) {
			t.Errorf("text contains %s: %q", noise, ex.Text)
		}
	}
	if !strings.HasPrefix(ex.Title, "Kestrel survey 2024") {
		t.Errorf("title = %q", ex.Title)
	}
	if ex.Description != "What three summers of nest counts say about kestrels." {
		t.Errorf("description = %q", ex.Description)
	}
	if !ex.HasScript {
		t.Error("HasScript = false for a page with a script")
	}
	// Relative links resolve against <base href="/news/">; mailto,
	// javascript: are dropped; a fragment link stays (Normalize drops it).
	want := []string{
		"https://birds.example.com/", "https://birds.example.com/news/", "https://birds.example.com/sport/",
		"https://birds.example.com/t1", "https://birds.example.com/news/kestrel-methods",
		"https://data.example.org/kestrels.csv", "https://birds.example.com/news/#top",
	}
	if !slices.Equal(ex.Links, want) {
		t.Errorf("links:\n got %q\nwant %q", ex.Links, want)
	}
}

func TestExtractWithoutArticle(t *testing.T) {
	base, _ := url.Parse("http://example.com/")
	ex, err := extract([]byte(`<html><head><title> Tiny </title></head><body><div id="root">Loading...</div><script>render()</script></body></html>`), base)
	if err != nil {
		t.Fatal(err)
	}
	if ex.Title != "Tiny" || ex.Text != "Loading..." || !ex.HasScript {
		t.Errorf("got %+v", ex)
	}
	ex, err = extract([]byte(`<html><body><p>Plain.</p><script type="application/ld+json">{}</script></body></html>`), base)
	if err != nil {
		t.Fatal(err)
	}
	if ex.HasScript {
		t.Error("JSON-LD counted as a script")
	}
}

func TestTidyAndTruncate(t *testing.T) {
	if got := tidyText("  a   b \n\n\n\n  c\n d  "); got != "a b\n\nc\nd" {
		t.Errorf("tidyText = %q", got)
	}
	for _, tc := range []struct {
		in   string
		max  int
		want string
		cut  bool
	}{
		{"short", 10, "short", false},
		{"exactly10!", 10, "exactly10!", false},
		{"one two three four five six", 20, "one two three four", true},
		{"abcdefghijklmnopqrstuvwxyz", 10, "abcdefghij", true},
		{"ééééé ééééé", 8, "ééééé éé", true},
	} {
		got, cut := truncateText(tc.in, tc.max)
		if got != tc.want || cut != tc.cut {
			t.Errorf("truncateText(%q, %d) = %q, %v; want %q, %v", tc.in, tc.max, got, cut, tc.want, tc.cut)
		}
	}
}
