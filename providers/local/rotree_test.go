package local

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/providers"
)

// ro_paths below a folder the sandbox does not see whole reach it through
// a prepared tree: each path as on the host, read-only, and nothing else of
// the folder. A path the host replaces (renamed over, as resolv.conf is
// rewritten) shows in the next sandbox, while one started before keeps
// what it bound, and the replaced tree goes.
func TestROPathsTree(t *testing.T) {
	dir, err := os.MkdirTemp("/var/tmp", "sandstep-ro-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, f := range []struct{ path, content string }{{"a", "one"}, {"b/c", "see"}, {"secret", "no"}} {
		p := filepath.Join(dir, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(ls *Settings) {
		ls.ROPaths = append(slices.Clone(ls.ROPaths), dir+"/a", dir+"/b")
	})
	if e.p.stage == nil {
		t.Skip("trees are made as root only")
	}
	first := e.create(providers.CreateSpec{})
	if out := e.sh(first.ID, "cat "+dir+"/a "+dir+"/b/c; echo; ls "+dir); out != "onesee\na\nb\n" {
		t.Errorf("the sandbox sees %q", out)
	}
	if r := e.exec(first.ID, providers.ExecRequest{Shell: "echo x > " + dir + "/a || echo x > " + dir + "/new"}); r.ExitCode == 0 {
		t.Errorf("the ro_paths tree is writable: %+v", r)
	}
	host, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	if out := e.sh(first.ID, "cat /etc/passwd"); out != string(host) {
		t.Errorf("/etc/passwd in the sandbox differs from the host's")
	}

	if err := os.WriteFile(dir+"/a.new", []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir+"/a.new", dir+"/a"); err != nil {
		t.Fatal(err)
	}
	second := e.create(providers.CreateSpec{})
	if out := e.sh(second.ID, "cat "+dir+"/a"); out != "two" {
		t.Errorf("after the host replaced the file, a new sandbox reads %q", out)
	}
	if out := e.sh(first.ID, "cat "+dir+"/a"); out != "one" {
		t.Errorf("the sandbox started before reads %q", out)
	}
	// In the staging namespace: one tree of /var, the current one.
	var mi []byte
	if err := e.p.stage.do(func() error {
		var err error
		mi, err = os.ReadFile("/proc/thread-self/mountinfo")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var trees []string
	for line := range bytes.Lines(mi) {
		if f := strings.Fields(string(line)); len(f) > 4 && strings.HasPrefix(f[4], stageDir+"/ro-var-") && !strings.Contains(f[4][len(stageDir)+1:], "/") {
			trees = append(trees, f[4])
		}
	}
	if len(trees) != 1 {
		t.Errorf("trees of /var in the staging namespace: %q, want the current one", trees)
	}
}
