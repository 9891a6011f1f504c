package samtemplate_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/internal/emulation/samtemplate"
)

// repoRoot is the folder holding go.mod, found from the test's working
// directory.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test's working directory")
		}
		dir = parent
	}
}

func inCI() bool { return os.Getenv("CI") == "true" }

// need fails the test under CI and skips it elsewhere: a missing tool or
// file never passes silently where it matters.
func need(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if inCI() {
		t.Fatalf("%s is required under CI=true: %v", what, err)
	}
	t.Skipf("%s is missing (%v); CI=true makes this a failure", what, err)
}

func loadRepoTemplate(t testing.TB) *samtemplate.Template {
	t.Helper()
	tpl, err := samtemplate.Load(filepath.Join(repoRoot(t), "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return tpl
}

func loadSchema(t testing.TB) *samtemplate.Schema {
	t.Helper()
	path := samtemplate.SchemaPath(repoRoot(t))
	_, err := os.Stat(path)
	need(t, "the SAM schema (shared/ beside the repository, or $"+samtemplate.SchemaEnv+")", err)
	s, err := samtemplate.LoadSchema(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func needMake(t testing.TB) {
	t.Helper()
	_, err := exec.LookPath("make")
	need(t, "make", err)
}

// mapAt walks a template document by keys, failing the test on a missing
// step.
func mapAt(t testing.TB, doc map[string]any, keys ...string) map[string]any {
	t.Helper()
	cur := doc
	for i, k := range keys {
		next, ok := cur[k].(map[string]any)
		if !ok {
			t.Fatalf("template has no mapping at %s", strings.Join(keys[:i+1], "."))
		}
		cur = next
	}
	return cur
}

func problemStrings(ps []samtemplate.Problem) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}
