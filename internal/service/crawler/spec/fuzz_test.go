package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// FuzzParseProgress reads arbitrary crawler stdout lines as the supervising
// phase does: no panic; a line without the prefix is not progress; a line
// that parses survives being written and read again unchanged.
func FuzzParseProgress(f *testing.F) {
	f.Fuzz(func(t *testing.T, line string) {
		p, ok, err := ParseProgress(line)
		if !ok {
			if strings.HasPrefix(strings.TrimRight(line, "\r\n"), ProgressPrefix) {
				t.Fatalf("a line with the prefix was not taken as progress: %q", line)
			}
			if err != nil || p != (Progress{}) {
				t.Fatalf("a line that is not progress gave %+v, %v", p, err)
			}
			return
		}
		if err != nil {
			if p != (Progress{}) {
				t.Fatalf("a refused line gave %+v", p)
			}
			return
		}
		// Written as the crawler writes it (MarshalJSON drops the counters
		// of stages other than crawl, and invalid UTF-8 becomes U+FFFD),
		// then read back: after one such trip, nothing changes.
		once := roundTrip(t, p)
		if twice := roundTrip(t, once); twice != once {
			t.Fatalf("progress changes on a second trip: %+v -> %+v", once, twice)
		}
		if once.Stage == StageCrawl && (once.Current != p.Current || once.Total != p.Total) {
			t.Fatalf("crawl counters lost: %+v -> %+v", p, once)
		}
	})
}

func roundTrip(t *testing.T, p Progress) Progress {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatalf("marshal %+v: %v", p, err)
	}
	q, ok, err := ParseProgress(ProgressPrefix + string(b) + "\n")
	if !ok || err != nil {
		t.Fatalf("the line written for %+v does not parse: %s: %v", p, b, err)
	}
	return q
}

// FuzzReadInput decodes arbitrary input.json as the crawler does: no panic;
// every refusal is ErrInput; what is accepted gets usable limits.
func FuzzReadInput(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := ReadInput(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrInput) {
				t.Fatalf("refused without ErrInput: %v", err)
			}
			return
		}
		in, err = in.WithDefaults()
		if err != nil {
			if !errors.Is(err, ErrInput) {
				t.Fatalf("refused without ErrInput: %v", err)
			}
			return
		}
		l := in.Limits
		for name, v := range map[string]int{"max_pages": l.MaxPages, "max_depth": l.MaxDepth, "max_links_per_page": l.MaxLinksPerPage,
			"max_pages_per_host": l.MaxPagesPerHost, "max_chars_per_source": l.MaxCharsPerSource, "max_duration_ms": l.MaxDurationMS,
			"concurrency": l.Concurrency, "page_timeout_ms": l.PageTimeoutMS, "max_page_bytes": l.MaxPageBytes} {
			if v <= 0 {
				t.Fatalf("%s is %d after defaults", name, v)
			}
		}
		if in.Render != RenderAuto && in.Render != RenderAlways && in.Render != RenderNever || in.UserAgent == "" {
			t.Fatalf("render %q, user agent %q after defaults", in.Render, in.UserAgent)
		}
	})
}
