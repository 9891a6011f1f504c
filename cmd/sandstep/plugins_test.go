package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/internal/testkit/testbin"
)

// buildLocalPlugin builds the local provider plugin into a fresh plugin dir.
func buildLocalPlugin(t *testing.T) string {
	t.Helper()
	dir, err := testbin.Build(t.TempDir(), testbin.LocalPlugin)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestPluginsListsLocalWithCapabilities(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil && os.Getenv("CI") != "true" {
		t.Skip("bwrap missing")
	}
	dir := buildLocalPlugin(t)
	cfg := writeConfig(t, "[server]\ndata_dir = \""+t.TempDir()+"\"\n[provider]\nname = \"local\"\nplugin_dir = \""+dir+"\"\ndeployment = \"stack-a\"\n")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"plugins", "--config", cfg}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s%s", code, out.String(), errb.String())
	}
	if !strings.HasPrefix(out.String(), "deployment: stack-a\n") {
		t.Errorf("output does not start with the deployment id:\n%s", out.String())
	}
	line := ""
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "local (active)") {
			line = l
		}
	}
	// This machine's mechanism: cgroup v2 or v1, and volumes as images
	// (the tests run as root).
	for _, want := range []string{"v1", "snapshots", "volumes", "exec-streaming", "files", "host-scoped-secrets", "network=none|all|allowlist", "list-snapshots",
		"limits=cgroup-v", "memory|processes|cpu|scratch|volume_capacity", "volumes=ext4-image"} {
		if !strings.Contains(line, want) {
			t.Errorf("local line %q lacks %q; output:\n%s", line, want, out.String())
		}
	}
}

// TestPluginsSaysWhichLackHostScopedSecrets: a provider without
// host-scoped secrets (Sandy) is named as one whose secrets are plain
// environment variables; Deno, which has them, is not.
func TestPluginsSaysWhichLackHostScopedSecrets(t *testing.T) {
	dir, err := testbin.Build(t.TempDir(), testbin.SandyPlugin, testbin.DenoPlugin)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SANDY_API_KEY", "k")
	t.Setenv("DENO_DEPLOY_TOKEN", "ddo_k")
	cfg := writeConfig(t, "[provider]\nname = \"deno\"\nplugin_dir = \""+dir+"\"\n[provider.sandy]\napi_key_env = \"SANDY_API_KEY\"\nbase_url = \"http://127.0.0.1:1\"\n[provider.deno]\ntoken_env = \"DENO_DEPLOY_TOKEN\"\nconsole_url = \"http://127.0.0.1:1\"\nsandbox_url = \"http://127.0.0.1:1\"\n")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"plugins", "--config", cfg}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s%s", code, out.String(), errb.String())
	}
	var deno, note string
	for _, l := range strings.Split(out.String(), "\n") {
		switch {
		case strings.HasPrefix(l, "deno (active)"):
			deno = l
		case strings.HasPrefix(l, "no host-scoped secrets:"):
			note = l
		}
	}
	if !strings.Contains(deno, "host-scoped-secrets") {
		t.Errorf("the deno line %q lacks host-scoped-secrets; output:\n%s", deno, out.String())
	}
	if !strings.Contains(note, "sandy") || strings.Contains(note, "deno") || !strings.Contains(note, "plain environment variable") {
		t.Errorf("the note %q should name sandy alone; output:\n%s", note, out.String())
	}
}

func TestPluginsMissingBinaryIsOneClearLine(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, "[provider]\nname = \"sandy\"\nplugin_dir = \""+dir+"\"\n[provider.sandy]\nbase_url = \"http://127.0.0.1:1\"\n")
	t.Setenv("SANDY_API_KEY", "k")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"plugins", "--config", cfg}, &out, &errb); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	msg := strings.TrimRight(errb.String(), "\n")
	want := filepath.Join(dir, "sandstep-provider-sandy")
	if strings.Count(msg, "\n") != 0 || !strings.Contains(msg, want) || !strings.Contains(msg, "not found") {
		t.Errorf("error output %q: want one line naming %s", msg, want)
	}
}

// The local provider checks its own table when it starts; its problems
// still name the key, its line and a suggestion.
func TestConfigTypoNamesKeyAndLine(t *testing.T) {
	dir := buildLocalPlugin(t)
	cfg := writeConfig(t, "[provider]\nname = \"local\"\nplugin_dir = \""+dir+"\"\n[provider.local]\nmax_proces = 3\n")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"plugins", "--config", cfg}, &out, &errb); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if msg := errb.String(); !strings.Contains(msg, ":5: provider.local.max_proces: unknown key") || !strings.Contains(msg, `did you mean "max_processes"`) {
		t.Errorf("error %q: want line 5, the key and a suggestion", msg)
	}
}

// serve refuses an address other machines could reach unless the config
// says it means it, before starting anything.
func TestServeRefusesANonLoopbackAddress(t *testing.T) {
	cfg := writeConfig(t, fmt.Sprintf("[server]\ndata_dir = %q\n", t.TempDir()))
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.2:0"} {
		var out, errb bytes.Buffer
		code := run(context.Background(), []string{"serve", "--config", cfg, "--addr", addr}, &out, &errb)
		if code == 0 || !strings.Contains(errb.String(), "allow_non_loopback") {
			t.Errorf("serve --addr %s: exit %d, stderr %q", addr, code, errb.String())
		}
	}
}
