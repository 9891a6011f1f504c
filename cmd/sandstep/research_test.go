package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/testkit/fixturesite"
	"github.com/sandstep/sandstep/internal/testkit/testbin"
)

// freeAddr is a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// research finds the server `sandstep serve` runs by the same config (its
// [server] addr, with SANDSTEP_URL unset), shows the steps appended (the
// output is not a terminal) and prints the report.
func TestResearchFindsTheServerOfTheConfigAndPrintsTheReport(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil && os.Getenv("CI") != "true" {
		t.Skip("bwrap missing")
	}
	plugins := buildLocalPlugin(t)
	os.Chmod(filepath.Dir(t.TempDir()), 0o755)
	tools, err := testbin.Build(t.TempDir(), testbin.Crawler)
	if err != nil {
		t.Fatal(err)
	}
	site := fixturesite.Start(t, fixturesite.Options{Hosts: 1})
	cfg := writeConfig(t, fmt.Sprintf(`
[server]
addr = %q
data_dir = %q
[provider]
plugin_dir = %q
[provider.local]
tools_dir = %q
[sandbox]
allow_private = [%q]
[research]
render = "never"
[research.search]
backends = ["searxng"]
searxng_url = "http://127.0.0.1:1"
`, freeAddr(t), t.TempDir(), plugins, tools, site.AllowPrivate()[0]))
	t.Setenv(envServer, "")
	t.Setenv(envToken, "")
	t.Setenv(envDevToken, devToken)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, err := startServer(ctx, cfg, "", "", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.shutdown()

	var out, errb bytes.Buffer
	code := run(ctx, []string{"research", "kestrel fixtures", "--url", site.Hosts[0].Page("/a"), "--config", cfg, "--interval", "100ms"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	progress := errb.String()
	if !strings.Contains(progress, "[x] Crawling sources") || strings.Count(progress, ": running\n") < 2 || strings.Contains(progress, "\x1b[") {
		t.Errorf("progress is not the steps appended view after view:\n%s", progress)
	}
	// The search backend refuses connections: each query's failure is
	// printed as it happens, and the job goes on with its seed URL.
	if !strings.Contains(errb.String(), `warning: search: "kestrel fixtures": 0 results (searxng: `) ||
		!strings.Contains(errb.String(), "fallback: search: 2 of 2 searches failed on every backend") {
		t.Errorf("progress lacks the search warnings:\n%s", errb.String())
	}
	md := out.String()
	if !strings.Contains(md, "# kestrel fixtures") || !strings.Contains(md, site.Hosts[0].Page("/a")) || !strings.Contains(md, "[1]") {
		t.Errorf("report:\n%s", md)
	}
}

// A client command never starts a stack: with no server where the config
// says, research says so and leaves the data directory alone.
func TestResearchNeverStartsAStack(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	addr := freeAddr(t)
	cfg := writeConfig(t, fmt.Sprintf("[server]\naddr = %q\ndata_dir = %q\n", addr, dataDir))
	t.Setenv(envServer, "")
	t.Setenv(envDevToken, devToken)
	r := runCLI(testCtx(t), "research", "q", "--config", cfg)
	wantCode(t, r, 1)
	want := fmt.Sprintf("sandstep research: no sandstep server is running at http://%s (connection refused)", addr)
	if !strings.HasPrefix(r.stderr, want) {
		t.Fatalf("stderr: %q, want it to start %q", r.stderr, want)
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Fatalf("the data dir was touched: %v", err)
	}
}
