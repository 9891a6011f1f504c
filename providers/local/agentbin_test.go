package local

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/providers"
)

// agentSize is the size of the agent a sandbox runs, read from inside.
func agentSize(e *testEnv, id string) int64 {
	e.t.Helper()
	n, err := strconv.ParseInt(strings.TrimSpace(e.sh(id, "stat -c %s "+agentPath)), 10, 64)
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// The dedicated agent (cmd/sandstep-local-agent) is what sandboxes run when
// the plugin has one, on the fast exec path and through the shim alike.
func TestDedicatedAgent(t *testing.T) {
	agent := useDedicatedAgent(t)
	e := newEnv(t, nil)
	for _, shim := range []bool{false, true} {
		e.p.noExecGroups = shim
		sb := e.create(providers.CreateSpec{})
		if got, want := agentSize(e, sb.ID), fileSize(t, agent); got != want {
			t.Errorf("shim=%v: the sandbox runs a %d-byte agent, the dedicated one has %d bytes", shim, got, want)
		}
		if out := e.sh(sb.ID, "echo $((6*7)) && exit 0"); strings.TrimSpace(out) != "42" {
			t.Errorf("shim=%v: exec printed %q", shim, out)
		}
		if r := e.exec(sb.ID, providers.ExecRequest{Shell: "exit 3"}); r.ExitCode != 3 {
			t.Errorf("shim=%v: exit status %d, want 3", shim, r.ExitCode)
		}
	}
}

// An agent of another build (one that speaks another protocol, or one from
// before the check, which answers the probe with a bare "ok") is not used:
// the plugin's own binary takes its place.
func TestAgentFromAnotherBuild(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, answer := range []string{"ok v0.1-0123456789ab", "ok"} {
		dir := worldReadableDir(t)
		stale := filepath.Join(dir, AgentBinary)
		if err := os.WriteFile(stale, []byte("#!/bin/sh\necho '"+answer+"'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		envAgent = stale
		e := newEnv(t, nil)
		envAgent = ""
		sb := e.create(providers.CreateSpec{})
		if got, want := agentSize(e, sb.ID), fileSize(t, self); got != want {
			t.Errorf("probe answer %q: the sandbox runs a %d-byte agent, not the plugin's own (%d bytes)", answer, got, want)
		}
	}
}

func TestDedicatedAgentLookup(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "sandstep-provider-local")
	agent := filepath.Join(dir, AgentBinary)
	p := New()
	if got := p.dedicatedAgent(exe); got != "" {
		t.Errorf("no agent next to the plugin: got %q", got)
	}
	if err := os.WriteFile(agent, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := p.dedicatedAgent(exe); got != "" {
		t.Errorf("a file that cannot run was taken: %q", got)
	}
	if err := os.Chmod(agent, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := p.dedicatedAgent(exe); got != agent {
		t.Errorf("dedicatedAgent = %q, want %q", got, agent)
	}
	p.agentBinary = "/no/such/agent"
	if got := p.dedicatedAgent(exe); got != "" {
		t.Errorf("a missing agentBinary gave %q", got)
	}
}

// The agent's config (its env among it) reaches it whatever its size: one
// larger than a pipe holds without a reader is written once bwrap runs.
func TestLargeAgentConfig(t *testing.T) {
	e := newEnv(t, nil)
	for _, n := range []int{100, 100 << 10} {
		sb := e.create(providers.CreateSpec{Env: map[string]string{"BIG": strings.Repeat("x", n)}})
		if out := e.sh(sb.ID, "printf %s \"$BIG\" | wc -c"); strings.TrimSpace(out) != strconv.Itoa(n) {
			t.Errorf("an env value of %d bytes arrives as %s bytes", n, out)
		}
	}
}
