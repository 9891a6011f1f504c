package report_test

import (
	"slices"
	"testing"

	"github.com/sandstep/sandstep/internal/service/report"
	"github.com/sandstep/sandstep/internal/service/store"
)

func TestUnused(t *testing.T) {
	all := []store.Source{
		{N: 1, URL: "https://a.example/", Content: "Read and given.", Origin: store.OriginCrawl, FinalURL: "https://a.example/home"},
		{N: 2, URL: "https://b.example/", Content: "Read, but past the source limit.", Origin: store.OriginCrawl},
		{N: 3, URL: "https://c.example/", Origin: "blocked"},
		{N: 4, URL: "https://d.example/", Snippet: "found, never crawled", Origin: store.OriginSearch},
		{N: 5, URL: "https://e.example/loop", Origin: store.OriginSearch},
	}
	skips := []store.Skip{
		{URL: "https://c.example/", N: 3, Reason: "challenge", Message: "an anti-bot challenge page (status 503), not the page itself"},
		{URL: "https://e.example/loop", N: 5, Reason: "redirect_loop", Message: "redirect loop: a -> b -> a"},
		{URL: "https://a.example/home#top", Reason: "duplicate", Message: "the same page as https://a.example/"},
		{URL: "https://a.example/blob.bin", Reason: "content_type", Message: "application/octet-stream is not a document the crawler reads"},
	}
	given := report.Select(all, report.PromptOptions{MaxSources: 1})
	got := report.Unused(all, skips, given)
	var lines []string
	for _, n := range got {
		lines = append(lines, n.URL+" "+n.Reason)
	}
	want := []string{
		"https://b.example/ budget",
		"https://c.example/ challenge",
		"https://d.example/ budget",
		"https://e.example/loop redirect_loop",
		"https://a.example/blob.bin content_type",
	}
	if !slices.Equal(lines, want) {
		t.Errorf("not used\n got %q\nwant %q", lines, want)
	}
	if got[0].Message != "read, but not among the 1 sources the report was written from" || got[0].N != 2 {
		t.Errorf("not used = %+v", got[0])
	}
}
