package report_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/internal/service/report"
	"github.com/sandstep/sandstep/internal/service/store"
)

// benchCorpus makes n sources of about chars characters each, in words of
// a made-up language with a Zipf-like spread, and a report of about words
// words whose sentences cite one or two sources: two in three are drawn
// from a cited source (words dropped and numbers kept), the rest are
// invented.
func benchCorpus(n, chars, words int) ([]store.Source, string) {
	rng := rand.New(rand.NewPCG(1, 2))
	vocab := make([]string, 4000)
	for i := range vocab {
		var w strings.Builder
		for range 3 + rng.IntN(7) {
			w.WriteByte(byte('a' + rng.IntN(26)))
		}
		vocab[i] = w.String()
	}
	word := func() string {
		if rng.IntN(12) == 0 {
			return fmt.Sprint(rng.IntN(5000))
		}
		return vocab[int(float64(len(vocab))*rng.Float64()*rng.Float64())]
	}
	sentence := func(k int) []string {
		ws := make([]string, k)
		for i := range ws {
			ws[i] = word()
		}
		return ws
	}
	var sources []store.Source
	var sents [][][]string // per source, its sentences
	for s := 1; s <= n; s++ {
		var b strings.Builder
		var ss [][]string
		for b.Len() < chars {
			ws := sentence(8 + rng.IntN(20))
			ss = append(ss, ws)
			b.WriteString(strings.ToUpper(ws[0][:1]) + ws[0][1:] + " " + strings.Join(ws[1:], " ") + ". ")
		}
		sents = append(sents, ss)
		sources = append(sources, store.Source{N: s, URL: fmt.Sprintf("https://s%d.example/", s), Title: "Source", Content: b.String(), Origin: store.OriginCrawl})
	}
	var md strings.Builder
	md.WriteString("## Evidence and context\n\n")
	written := 0
	for written < words {
		src := rng.IntN(n)
		var ws []string
		if rng.IntN(3) < 2 {
			orig := sents[src][rng.IntN(len(sents[src]))]
			for _, w := range orig {
				if rng.IntN(4) > 0 {
					ws = append(ws, w)
				}
			}
		}
		if len(ws) < 4 {
			ws = sentence(10 + rng.IntN(15))
		}
		cite := fmt.Sprintf("[%d]", src+1)
		if rng.IntN(3) == 0 {
			cite += fmt.Sprintf("[%d]", rng.IntN(n)+1)
		}
		fmt.Fprintf(&md, "%s%s %s %s. ", strings.ToUpper(ws[0][:1]), ws[0][1:], strings.Join(ws[1:], " "), cite)
		written += len(ws)
		if rng.IntN(5) == 0 {
			md.WriteString("\n\n")
		}
	}
	return sources, md.String()
}

// BenchmarkCitationCheck checks a 3,000-word report over 40 sources:
// everything Finish does (claims, scoring, passages, rendering). With the
// prompt's default budget each source gives about 1,200 characters; the
// "8000 chars" case gives every source a full light-mode page.
func BenchmarkCitationCheck(b *testing.B) {
	for _, bc := range []struct {
		name string
		opt  report.PromptOptions
	}{
		{"prompt budget", report.PromptOptions{}},
		{"8000 chars each", report.PromptOptions{CharsPerSource: 8000, TotalChars: 40 * 8000}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			sources, body := benchCorpus(40, 8000, 3000)
			given := report.Select(sources, bc.opt)
			res := report.Finish(b.Context(), "q", body, given, nil, report.FinishOptions{})
			c := res.Details.Citations
			if c.Total < 100 {
				b.Fatalf("only %d claims", c.Total)
			}
			for b.Loop() {
				report.Finish(b.Context(), "q", body, given, nil, report.FinishOptions{})
			}
			b.ReportMetric(float64(c.Total), "claims")
			b.ReportMetric(float64(c.Unsupported), "flagged")
		})
	}
}
