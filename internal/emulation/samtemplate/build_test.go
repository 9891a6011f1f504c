package samtemplate_test

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/internal/emulation/samtemplate"
)

// bootstrapBudget is DESIGN's ceiling for one Lambda binary: 12 MB, read
// strictly (decimal, as the issue that set it measured).
const bootstrapBudget = 12_000_000

// makeLambda runs a lambda.mk target the way sam does: from the repository
// root, with ARTIFACTS_DIR in the environment.
func makeLambda(t testing.TB, target, artifacts string, extra ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "make", append([]string{"--no-print-directory", "-f", "lambda.mk", target}, extra...)...)
	cmd.Dir = repoRoot(t)
	cmd.Env = append(withoutEnv("ARTIFACTS_DIR"), "ARTIFACTS_DIR="+artifacts)
	return cmd.CombinedOutput()
}

func withoutEnv(name string) []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, name+"=") })
}

// checkLambdaELF asserts what provided.al2023 on arm64 needs: a 64-bit
// aarch64 executable with no dynamic loader, stripped as -s asks.
func checkLambdaELF(t testing.TB, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer f.Close()
	if f.Machine != elf.EM_AARCH64 || f.Class != elf.ELFCLASS64 || f.Type != elf.ET_EXEC {
		t.Errorf("%s: %v %v %v, want an aarch64 ELF64 executable", path, f.Machine, f.Class, f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s is dynamically linked (%v); Lambda's OS-only runtime needs a static binary", path, p.Type)
		}
	}
	if f.Section(".symtab") != nil {
		t.Errorf("%s has a symbol table; -ldflags -s should strip it", path)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode()&0o111 == 0 {
		t.Errorf("%s is not executable (%v)", path, fi.Mode())
	}
}

func TestLambdaBuildDiscoverFunction(t *testing.T) {
	needMake(t)
	out := t.TempDir()
	if b, err := makeLambda(t, "build-DiscoverFunction", out); err != nil {
		t.Fatalf("make build-DiscoverFunction: %v\n%s", err, b)
	}
	bootstrap := filepath.Join(out, "bootstrap")
	checkLambdaELF(t, bootstrap)
	if fi, err := os.Stat(bootstrap); err == nil {
		t.Logf("bootstrap of DiscoverFunction: %d bytes (%.2f MB; budget %.0f MB)", fi.Size(), float64(fi.Size())/1e6, float64(bootstrapBudget)/1e6)
	}
	want, err := os.ReadFile(filepath.Join(repoRoot(t), "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(out, "config.toml"))
	if err != nil {
		t.Fatalf("config.toml was not copied beside bootstrap: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Error("the copied config.toml differs from the repository's")
	}
}

func TestLambdaBuildProvidersLayer(t *testing.T) {
	needMake(t)
	out := t.TempDir()
	if b, err := makeLambda(t, "build-ProvidersLayer", out); err != nil {
		t.Fatalf("make build-ProvidersLayer: %v\n%s", err, b)
	}
	want, err := filepath.Glob(filepath.Join(repoRoot(t), "providers", "*", "cmd", "sandstep-provider-*"))
	if err != nil || len(want) == 0 {
		t.Fatalf("no provider plugins in the repository (%v)", err)
	}
	for _, src := range want {
		checkLambdaELF(t, filepath.Join(out, "plugins", filepath.Base(src)))
	}
	// The crawler is for the sandboxes, which are x86_64, not for the
	// Lambda: static, no interpreter.
	f, err := elf.Open(filepath.Join(out, "sandbox", "sandstep-crawler"))
	if err != nil {
		t.Fatalf("the layer has no crawler for the sandboxes: %v", err)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 || f.Progs != nil && slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP }) {
		t.Errorf("crawler: machine %v, want a static x86_64 binary", f.Machine)
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"plugins", "sandbox"}) {
		t.Errorf("the layer holds %v, want plugins/ and sandbox/ (mounted at /opt/plugins and /opt/sandbox)", names)
	}
}

func TestLambdaBuildNeedsArtifactsDir(t *testing.T) {
	needMake(t)
	b, err := makeLambda(t, "build-DiscoverFunction", "")
	if err == nil || !strings.Contains(string(b), "ARTIFACTS_DIR is not set") {
		t.Fatalf("make without ARTIFACTS_DIR: err = %v, output:\n%s", err, b)
	}
}

// Every makefile-built resource's target expands (make -n) and builds the
// folder the template names, so the template and lambda.mk cannot drift.
func TestLambdaTargetsMatchTemplate(t *testing.T) {
	needMake(t)
	tpl := loadRepoTemplate(t)
	out := t.TempDir()
	for _, id := range makefileResources(tpl) {
		b, err := makeLambda(t, "build-"+id, out, "-n")
		if err != nil {
			t.Errorf("make -n build-%s: %v\n%s", id, err, b)
			continue
		}
		if code, _ := tpl.Property(id, "CodeUri"); code != nil {
			dir := "./" + code.(string)
			if !strings.Contains(string(b), " "+dir+"\n") {
				t.Errorf("build-%s does not build %s:\n%s", id, dir, b)
			}
			for _, flag := range []string{"GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0", "-tags lambda.norpc,grpcnotrace,nethttpomithttp2", "-trimpath", "-s -w", "/bootstrap'", "cp config.toml"} {
				if !strings.Contains(string(b), flag) {
					t.Errorf("build-%s lacks %q:\n%s", id, flag, b)
				}
			}
		}
	}
}

func makefileResources(tpl *samtemplate.Template) []string {
	var ids []string
	for id, res := range tpl.Resources() {
		if meta, _ := res["Metadata"].(map[string]any); meta["BuildMethod"] == "makefile" {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// BenchmarkLambdaBuild builds each function as sam would (ns/op is the
// build with a warm Go cache) and reports its bootstrap size against
// DESIGN's 12 MB budget.
func BenchmarkLambdaBuild(b *testing.B) {
	needMake(b)
	tpl := loadRepoTemplate(b)
	for _, id := range makefileResources(tpl) {
		if tpl.Resources()[id]["Type"] != "AWS::Serverless::Function" {
			continue
		}
		b.Run(id, func(b *testing.B) {
			out := b.TempDir()
			for b.Loop() {
				if o, err := makeLambda(b, "build-"+id, out); err != nil {
					b.Fatalf("make build-%s: %v\n%s", id, err, o)
				}
			}
			fi, err := os.Stat(filepath.Join(out, "bootstrap"))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(fi.Size()), "bootstrap-bytes")
			if fi.Size() > bootstrapBudget {
				b.Errorf("%s bootstrap is %d bytes, over the %d-byte budget", id, fi.Size(), bootstrapBudget)
			}
		})
	}
}
