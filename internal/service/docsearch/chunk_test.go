package docsearch

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSplitHeaderPaths(t *testing.T) {
	page := "# SDK\n\nIntro text.\n\n## Auth\n\nUse a key.\n\n### Detail\n\nstill auth\n\n```sh\n## not a header\n```\n\n## Issues ##\n\nCreate them.\n\n## Empty\n\n"
	got := Split(page, 2000)
	want := []Section{
		{Title: "SDK", Text: "Intro text."},
		{Title: "SDK > Auth", Text: "Use a key.\n\n### Detail\n\nstill auth\n\n```sh\n## not a header\n```"},
		{Title: "SDK > Issues", Text: "Create them."},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d sections: %+v", len(got), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("section %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestSplitBoundsLongSections(t *testing.T) {
	var b strings.Builder
	b.WriteString("## Long\n\n")
	for i := range 40 {
		b.WriteString(strings.Repeat("word ", 20+i%7))
		b.WriteString("\n\n")
	}
	b.WriteString(strings.Repeat("é", 900) + "\n") // one line longer than the bound
	secs := Split(b.String(), 300)
	if len(secs) < 10 {
		t.Fatalf("%d sections", len(secs))
	}
	total := 0
	for _, s := range secs {
		if n := utf8.RuneCountInString(s.Text); n > 300 || n == 0 {
			t.Fatalf("a part of %d characters", n)
		}
		if s.Title != "Long" || !utf8.ValidString(s.Text) {
			t.Fatalf("part %+v", s)
		}
		total += strings.Count(s.Text, "word")
	}
	if want := strings.Count(b.String(), "word"); total != want {
		t.Fatalf("words kept %d of %d", total, want)
	}
}

func TestSectionHashStable(t *testing.T) {
	a := Split("## A\n\none\n\n## B\n\ntwo\n", 2000)
	b := Split("## A\n\none\n\n## B\n\ntwo, changed\n", 2000)
	if a[0].Hash() != b[0].Hash() || a[1].Hash() == b[1].Hash() {
		t.Fatal("an unchanged section must keep its hash and a changed one must not")
	}
	if (Section{Title: "x", Text: "y"}).Hash() == (Section{Title: "xy", Text: ""}).Hash() {
		t.Fatal("title and text are hashed apart")
	}
}

func TestPackageName(t *testing.T) {
	for spec, want := range map[string]string{
		"lodash@4.17.21": "lodash", "npm:zod": "zod", "@linear/sdk": "@linear/sdk", "@linear/sdk@1.2.0": "@linear/sdk",
		"pip:requests==2.32.3": "requests", "pip:httpx[http2]>=0.27": "httpx", "file:/var/tmp/x/sandstep-fixture-a-1.0.0.tgz": "sandstep-fixture-a",
	} {
		if got := PackageName(spec); got != want {
			t.Errorf("PackageName(%q) = %q, want %q", spec, got, want)
		}
	}
}
