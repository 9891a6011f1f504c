package local

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/providers"
)

// execPaths runs f with execs started by the agent itself (the fast path)
// and through the shim, which is what a host without cgroups gets.
func execPaths(t *testing.T, f func(t *testing.T, shim bool)) {
	t.Run("agent", func(t *testing.T) { f(t, false) })
	t.Run("shim", func(t *testing.T) { f(t, true) })
}

var execGroupLine = regexp.MustCompile(`(?m)^\d+:[^:]*:/(\S+/)?e\d+$`)

// Started by the agent, a command is the agent's child in an exec group of
// its own; the group goes when the exec leaves nothing behind, and stays
// while a background process it started runs. Through the shim it is the
// shim's child, and no group is made.
func TestExecFastPath(t *testing.T) {
	e := newEnv(t, nil)
	requireEnforced(t, e, providers.LimitProcesses)
	sb := e.create(providers.CreateSpec{})
	cg := recordOf(t, e, sb.ID).Cgroup
	out := e.sh(sb.ID, `echo $PPID; cat /proc/self/cgroup`)
	ppid, groups, _ := strings.Cut(out, "\n")
	if ppid != "1" {
		t.Errorf("the command's parent is %s, want the agent (1)", ppid)
	}
	if !execGroupLine.MatchString(groups) {
		t.Errorf("the command is in no exec group of its own:\n%s", groups)
	}
	subgroups := func() []string {
		m, _ := filepath.Glob(filepath.Join(cg.execDir(), "e*"))
		return m
	}
	if left := subgroups(); len(left) != 0 {
		t.Errorf("exec groups left after execs that left nothing behind: %v", left)
	}

	e.sh(sb.ID, "sleep 4600 >/dev/null 2>&1 &")
	if left := subgroups(); len(left) != 1 {
		t.Errorf("exec groups with a background process running: %v, want its one", left)
	}
	e.sh(sb.ID, "pkill -x sleep; true")
	deadline := time.Now().Add(10 * time.Second)
	for len(subgroups()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the group of an ended background process remains: %v", subgroups())
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Not found and not executable, as a shell reports them.
	r := e.exec(sb.ID, providers.ExecRequest{Argv: []string{"no-such-command"}})
	if r.ExitCode != 127 || !strings.Contains(r.stderr, "no-such-command") {
		t.Errorf("a missing command: %+v %q", r.ExecResult, r.stderr)
	}
	e.write(sb.ID, "/workspace/noexec", []byte("#!/bin/sh\n"))
	r = e.exec(sb.ID, providers.ExecRequest{Argv: []string{"/workspace/noexec"}})
	if r.ExitCode != 126 {
		t.Errorf("a file without exec permission: %+v %q", r.ExecResult, r.stderr)
	}

	s := newEnv(t, nil)
	s.p.noExecGroups = true
	sb = s.create(providers.CreateSpec{})
	out = s.sh(sb.ID, `echo $PPID; cat /proc/self/cgroup`)
	ppid, groups, _ = strings.Cut(out, "\n")
	if ppid == "1" || execGroupLine.MatchString(groups) {
		t.Errorf("through the shim the command has parent %s and groups\n%s", ppid, groups)
	}
	if _, err := os.Stat(cg.execDir()); err == nil {
		// The first sandbox is still up: only its own groups are there.
		if left := subgroups(); len(left) != 0 {
			t.Errorf("exec groups: %v", left)
		}
	}
}
