package agents_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCLIAgentRun: `sandstep agent run claude "PROMPT" --file PATH` prints
// the run's events as they happen on stderr, the agent's answer on stdout
// and the artifacts' URLs, and exits 0.
func TestCLIAgentRun(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "notes"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes", "input.txt"), []byte("from the CLI"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(pluginDir, "sandstep"), "agent", "run", "claude", "How do kestrels hover?", "--file", "notes/input.txt", "--id", "cli-run")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SANDSTEP_URL="+e.url, "SANDSTEP_TOKEN="+tokenAcme)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\nstdout: %s\nstderr: %s", err, out.String(), errb.String())
	}
	if got := out.String(); got != "Done: Kestrels hover by facing into the wind. (22 chars read)\n" {
		t.Errorf("stdout = %q", got)
	}
	logs := errb.String()
	for _, want := range []string{"agent run cli-run\n", " sandbox.created sandbox ", " exec.started agent claude started", " agent.tool_use using Write",
		" agent.result Done: Kestrels", " file.written artifact report.md kept", " job.succeeded job succeeded",
		"artifact report.md (text/markdown; charset=utf-8, 88 bytes): " + e.url + "/v1/agent-runs/cli-run/artifacts/report.md"} {
		if !strings.Contains(logs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, logs)
		}
	}
	md := e.do("GET", "/v1/agent-runs/cli-run/artifacts/report.md", nil)
	if !strings.HasSuffix(string(md.body), "Notes: from the CLI") {
		t.Errorf("the file given with --file did not reach the agent: %q", md.body)
	}
}
