package artifacts_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/internal/service/artifacts"
	"github.com/sandstep/sandstep/internal/service/store"
)

func TestParseSortsByPathAndSkipsWhatIsMalformed(t *testing.T) {
	listing := []byte("12 b/chart.png\x005 a.txt\x00garbage\x00x y\x00 \x007 with space.md\x00")
	want := []artifacts.File{{Path: "a.txt", Size: 5}, {Path: "b/chart.png", Size: 12}, {Path: "with space.md", Size: 7}}
	if got, cut := artifacts.Parse(listing); !slices.Equal(got, want) || cut {
		t.Fatalf("Parse = %+v, %v; want %+v, false", got, cut, want)
	}
	if got, cut := artifacts.Parse(nil); len(got) != 0 || cut {
		t.Fatalf("Parse(nil) = %+v, %v", got, cut)
	}
	// head -c can stop inside a record: "30 zebra.png" read as "30 z"
	// would name a file that is not there.
	if got, _ := artifacts.Parse(append(listing, "30 z"...)); !slices.Equal(got, want) {
		t.Fatalf("Parse of a listing cut mid-record = %+v, want %+v", got, want)
	}
}

// TestListCommandInASandboxShell runs ListCommand in a shell over a real
// folder: odd names, a quote in the folder's name, a symlink left out,
// and a listing past ListLimit reported cut.
func TestListCommandInASandboxShell(t *testing.T) {
	if _, err := exec.LookPath("find"); err != nil {
		t.Fatal("find is missing (Debian package findutils)")
	}
	dir := filepath.Join(t.TempDir(), "it's here")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "sub dir"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "a.txt"), []byte("hello"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "sub dir", "b <c>.md"), []byte("#"), 0o644))
	must(os.Symlink("/etc/hostname", filepath.Join(dir, "link")))
	list := func(d string) ([]artifacts.File, bool) {
		t.Helper()
		out, err := exec.Command("sh", "-c", artifacts.ListCommand(d)).Output()
		if err != nil {
			t.Fatalf("%s: %v", artifacts.ListCommand(d), err)
		}
		return artifacts.Parse(out)
	}
	want := []artifacts.File{{Path: "a.txt", Size: 5}, {Path: "sub dir/b <c>.md", Size: 1}}
	if got, cut := list(dir); !slices.Equal(got, want) || cut {
		t.Fatalf("listing = %+v, %v; want %+v, false", got, cut, want)
	}
	if got, cut := list(filepath.Join(dir, "missing")); len(got) != 0 || cut {
		t.Fatalf("listing a missing folder = %+v, %v", got, cut)
	}
	// Names of 200 bytes: 6,000 of them pass 1 MiB of listing.
	many := filepath.Join(t.TempDir(), "many")
	must(os.Mkdir(many, 0o755))
	for i := range 6000 {
		must(os.WriteFile(filepath.Join(many, fmt.Sprintf("%04d-%s", i, strings.Repeat("x", 195))), nil, 0o644))
	}
	got, cut := list(many)
	if !cut || len(got) == 0 || len(got) >= 6000 {
		t.Fatalf("a listing past the limit: %d files, cut %v", len(got), cut)
	}
	for _, f := range got {
		if len(f.Path) != 200 {
			t.Fatalf("a record cut short was kept: %q", f.Path)
		}
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
