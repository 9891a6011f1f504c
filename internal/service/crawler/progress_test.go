package crawler

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/internal/testkit/fixturesite"
)

func TestProgressLines(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{})
	alpha, beta := site.Hosts[0], site.Hosts[1]
	var buf bytes.Buffer
	pw := NewProgressWriter(&buf)
	out, err := Crawl(t.Context(), Input{
		AllowPrivate: site.AllowPrivate(),
		Sources:      []Source{{N: 1, URL: alpha.Page("/")}, {N: 2, URL: beta.Page("/")}, {N: 3, URL: alpha.Page(fixturesite.PathPDF)}},
		Limits:       Limits{MaxPages: 9, MaxDepth: 2, MaxPagesPerHost: 5},
		Render:       RenderNever,
	}, pw.Report)
	if err != nil {
		t.Fatal(err)
	}

	var lines []Progress
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		line := sc.Text()
		p, ok, err := ParseProgress(line)
		if !ok || err != nil {
			t.Fatalf("line %q: progress=%v err=%v", line, ok, err)
		}
		// Every line is exactly one JSON object after the prefix, and crawl
		// lines always carry both counters.
		var raw map[string]any
		if err := json.Unmarshal([]byte(strings.TrimPrefix(line, ProgressPrefix)), &raw); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		_, hasCurrent := raw["current"]
		_, hasTotal := raw["total"]
		if (p.Stage == StageCrawl) != (hasCurrent && hasTotal) {
			t.Errorf("line %q: counters present=%v for stage %s", line, hasCurrent && hasTotal, p.Stage)
		}
		switch p.Status {
		case StatusRunning, StatusComplete, StatusError:
		default:
			t.Errorf("line %q: status %q", line, p.Status)
		}
		lines = append(lines, p)
	}
	if len(lines) < 3 {
		t.Fatalf("%d progress lines", len(lines))
	}
	if first := lines[0]; first.Stage != StageBrowser || first.Status != StatusComplete || !strings.Contains(first.Message, "HTTP mode") {
		t.Errorf("first line = %+v", first)
	}
	last := lines[len(lines)-1]
	if last.Stage != StageCrawl || last.Status != StatusComplete || last.Current != 9 || last.Total != 9 {
		t.Errorf("last line = %+v", last)
	}
	prev, pages := 0, 0
	for _, p := range lines[1 : len(lines)-1] {
		if p.Stage != StageCrawl || p.Status != StatusRunning {
			t.Errorf("middle line = %+v", p)
		}
		if p.Current < prev || p.Total > 9 || p.Current > p.Total {
			t.Errorf("line %+v after current=%d", p, prev)
		}
		prev = p.Current
		if p.URL != "" {
			pages++
		}
	}
	if pages != 9 || len(out.Pages)+len(out.Skipped) != 9 {
		t.Errorf("%d page lines, output has %d pages and %d skipped; want 9 in all", pages, len(out.Pages), len(out.Skipped))
	}
}

func TestParseProgressRejects(t *testing.T) {
	if _, ok, _ := ParseProgress("plain log line"); ok {
		t.Error("a plain line parsed as progress")
	}
	if _, ok, err := ParseProgress(ProgressPrefix + `{"stage":"crawl",`); !ok || err == nil {
		t.Errorf("truncated line: ok=%v err=%v", ok, err)
	}
	p, ok, err := ParseProgress(ProgressPrefix + `{"stage":"crawl","status":"running","current":3,"total":22,"url":"https://example.com/page"}` + "\r\n")
	if !ok || err != nil || p.Current != 3 || p.Total != 22 || p.URL != "https://example.com/page" {
		t.Errorf("ParseProgress = %+v, %v, %v", p, ok, err)
	}
}

func TestWriteOutputIsAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "output.json")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := Output{Pages: []Page{{N: 1, URL: "http://example.com/<a>&", Content: "x"}}, Skipped: []Skipped{}, Stats: Stats{Pages: 1, Stopped: StoppedDone}}
	if err := WriteOutput(path, out); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got Output
	if err := json.Unmarshal(b, &got); err != nil || got.Pages[0].URL != out.Pages[0].URL {
		t.Fatalf("output %s: %v", b, err)
	}
	if !bytes.Contains(b, []byte("<a>&")) {
		t.Errorf("HTML characters escaped in %s", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
	if err := WriteOutput(filepath.Join(dir, "missing", "output.json"), out); err == nil {
		t.Error("WriteOutput into a missing directory succeeded")
	}
}
