// Package testbin builds the project's binaries for tests that run them as
// real subprocesses: provider plugins, the crawler, the CLI. Every such test
// builds the same way, static (the local provider mounts its plugin and the
// crawler inside sandboxes, where only /usr of the host is visible).
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// Binaries the tests build, by the name of their output file.
const (
	LocalPlugin = "sandstep-provider-local"
	// LocalAgent is the local provider's agent inside sandboxes, which the
	// plugin takes from its own folder; Build puts it next to LocalPlugin.
	LocalAgent  = "sandstep-local-agent"
	SandyPlugin = "sandstep-provider-sandy"
	DenoPlugin  = "sandstep-provider-deno"
	ModalPlugin = "sandstep-provider-modal"
	Crawler     = "sandstep-crawler"
	CLI         = "sandstep"
)

// packages maps an output name to its main package.
var packages = map[string]string{
	LocalPlugin: "./providers/local/cmd/sandstep-provider-local",
	LocalAgent:  "./providers/local/cmd/sandstep-local-agent",
	SandyPlugin: "./providers/sandy/cmd/sandstep-provider-sandy",
	DenoPlugin:  "./providers/deno/cmd/sandstep-provider-deno",
	ModalPlugin: "./providers/modal/cmd/sandstep-provider-modal",
	Crawler:     "./cmd/sandstep-crawler",
	CLI:         "./cmd/sandstep",
}

// Root returns the module root: the first folder holding go.mod walking up
// from the working directory (a test runs in its package's folder).
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Build compiles the named binaries into dir (created, and made searchable
// for the sandboxes' own uids) with CGO off, and returns dir.
func Build(dir string, names ...string) (string, error) {
	return BuildTags(dir, "", names...)
}

// BuildTags is Build with build tags (comma-separated, as go build -tags
// takes them).
func BuildTags(dir, tags string, names ...string) (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	for _, name := range withCompanions(names) {
		pkg, ok := packages[name]
		if !ok {
			return "", fmt.Errorf("testbin: unknown binary %q", name)
		}
		args := []string{"build", "-o", filepath.Join(dir, name)}
		if tags != "" {
			args = append(args, "-tags", tags)
		}
		cmd := exec.Command("go", append(args, pkg)...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("build %s: %w\n%s", pkg, err, out)
		}
	}
	return dir, nil
}

// companions are binaries built along with another, as make build does.
var companions = map[string][]string{LocalPlugin: {LocalAgent}}

func withCompanions(names []string) []string {
	var out []string
	for _, n := range names {
		out = append(out, n)
		for _, c := range companions[n] {
			if !slices.Contains(names, c) && !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	return out
}

// HaveTool tells whether the program name is on PATH. Under CI=true a
// missing one fails the test instead, naming the Debian package that
// brings it (scripts/deps.sh installs it): CI never skips silently.
func HaveTool(t testing.TB, name, debianPackage string) bool {
	t.Helper()
	if _, err := exec.LookPath(name); err == nil {
		return true
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is missing (Debian package %s): make deps installs it", name, debianPackage)
	}
	return false
}

// RequireTool skips the test when HaveTool says no.
func RequireTool(t testing.TB, name, debianPackage string) {
	t.Helper()
	if !HaveTool(t, name, debianPackage) {
		t.Skipf("%s is missing (Debian package %s)", name, debianPackage)
	}
}

// DenoPath is where make deps installs Deno, relative to the module root:
// the binary of the npm package deno, pinned in package-lock.json.
const DenoPath = "node_modules/deno/deno"

// LinkDeno puts the project's Deno into dir (a tools_dir, created if
// needed) as make build does: hard-linked, or copied across file systems.
// It reports false when Deno is not installed; under CI=true that fails t
// instead, since make deps installs it.
func LinkDeno(t testing.TB, dir string) bool {
	t.Helper()
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(root, DenoPath)
	if _, err := os.Stat(src); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("deno is missing (%s): make deps installs it", DenoPath)
		}
		return false
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "deno")
	if _, err := os.Stat(dst); err == nil {
		return true
	}
	if os.Link(src, dst) != nil {
		out, err := exec.Command("cp", src, dst).CombinedOutput()
		if err != nil {
			t.Fatalf("copy deno: %v\n%s", err, out)
		}
	}
	return true
}
