package artifacts_test

import (
	"slices"
	"testing"

	"github.com/sandstep/sandstep/internal/service/artifacts"
	"github.com/sandstep/sandstep/internal/service/store"
)

func TestParseSortsByPathAndSkipsWhatIsMalformed(t *testing.T) {
	listing := []byte("12 b/chart.png\x005 a.txt\x00garbage\x00x y\x00 \x007 with space.md\x0030 z") // cut mid-record by head -c
	got := artifacts.Parse(listing)
	want := []artifacts.File{{Path: "a.txt", Size: 5}, {Path: "b/chart.png", Size: 12}, {Path: "with space.md", Size: 7}, {Path: "z", Size: 30}}
	if !slices.Equal(got, want) {
		t.Fatalf("Parse = %+v, want %+v", got, want)
	}
	if got := artifacts.Parse(nil); len(got) != 0 {
		t.Fatalf("Parse(nil) = %+v", got)
	}
}

func TestSkipReason(t *testing.T) {
	for _, c := range []struct {
		kept int
		size int64
		want string
	}{
		{0, 1, ""},
		{artifacts.MaxFiles - 1, store.MaxArtifactBytes, ""},
		{artifacts.MaxFiles, 1, "more than 64 artifacts"},
		{0, store.MaxArtifactBytes + 1, "larger than 262144 bytes"},
	} {
		if got := artifacts.SkipReason(c.kept, c.size); got != c.want {
			t.Errorf("SkipReason(%d, %d) = %q, want %q", c.kept, c.size, got, c.want)
		}
	}
}

func TestContentType(t *testing.T) {
	for name, want := range map[string]string{
		"report.md": "text/markdown; charset=utf-8", "chart.PNG": "image/png", "data.csv": "text/csv; charset=utf-8",
		"notes": "application/octet-stream", "page.html": "text/html; charset=utf-8",
	} {
		if got := artifacts.ContentType(name); got != want {
			t.Errorf("ContentType(%q) = %q, want %q", name, got, want)
		}
	}
}
