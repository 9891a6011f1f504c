package main

import (
	"bytes"
	"context"
	"fmt"
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

func TestResearchStartsALocalServerAndPrintsTheReport(t *testing.T) {
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := writeConfig(t, fmt.Sprintf(`
[server]
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
`, t.TempDir(), plugins, tools, site.AllowPrivate()[0]))
	t.Setenv(envToken, "")
	t.Setenv(envDevToken, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, []string{"research", "kestrel fixtures", "--url", site.Hosts[0].Page("/a"), "--server", "http://" + addr, "--config", cfg, "--interval", "100ms"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), "starting the local stack") || !strings.Contains(errb.String(), "[x] Crawling sources") {
		t.Errorf("progress lacks the started server or the finished crawl:\n%s", errb.String())
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
