package conformance

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstep/sandstep/providers"
)

// These tests cover the runner RunAll uses, with cases that never touch a
// provider; the cases themselves are exercised against the local provider
// in local_test.go.

func TestRunCaseOutcomes(t *testing.T) {
	e := newEnv(Options{CaseTimeout: time.Minute}, providers.Info{Name: "none"})
	var mu sync.Mutex
	var trail []string
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		trail = append(trail, s)
	}
	tests := []struct {
		name   string
		run    func(t T)
		status Status
		msgs   []string
		trail  []string
	}{
		{
			name:   "pass",
			run:    func(t T) { t.Logf("hello %d", 1) },
			status: Pass,
			msgs:   []string{"hello 1"},
		},
		{
			name: "error-continues",
			run: func(t T) {
				t.Errorf("first")
				note("after error")
			},
			status: Fail,
			msgs:   []string{"first"},
			trail:  []string{"after error"},
		},
		{
			name: "fatal-stops-and-cleans-up-in-reverse",
			run: func(t T) {
				t.Cleanup(func() { note("cleanup 1") })
				t.Cleanup(func() {
					note("cleanup 2")
					t.Fatalf("fatal in cleanup")
				})
				t.Fatalf("stop")
				note("not reached")
			},
			status: Fail,
			msgs:   []string{"stop", "fatal in cleanup"},
			trail:  []string{"cleanup 2", "cleanup 1"},
		},
		{
			name:   "skip",
			run:    func(t T) { t.Skipf("no %s", "way"); note("not reached") },
			status: Skip,
			msgs:   []string{"no way"},
		},
		{
			name: "failure-survives-skip",
			run: func(t T) {
				t.Errorf("broken")
				t.Skipf("then skipped")
			},
			status: Fail,
			msgs:   []string{"broken", "then skipped"},
		},
		{
			name:   "panic",
			run:    func(t T) { panic("boom") },
			status: Fail,
			msgs:   []string{"panic: boom"},
		},
		{
			name: "context-and-name",
			run: func(t T) {
				if t.Name() != "context-and-name" {
					t.Errorf("Name() = %q", t.Name())
				}
				if _, ok := t.Context().Deadline(); !ok {
					t.Errorf("the case's context has no deadline")
				}
				if _, name := envOf(t); name != "context-and-name" {
					t.Errorf("envOf: case name %q", name)
				}
			},
			status: Pass,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			trail = nil
			mu.Unlock()
			r := e.runCase(t.Context(), Case{Name: tc.name, Run: func(t T, _ providers.Provider) { tc.run(t) }}, nil)
			if r.Status != tc.status {
				t.Errorf("status %s, want %s (messages %q)", r.Status, tc.status, r.Messages)
			}
			if len(r.Messages) != len(tc.msgs) {
				t.Fatalf("messages %q, want %q", r.Messages, tc.msgs)
			}
			for i, m := range tc.msgs {
				if !strings.HasPrefix(r.Messages[i], m) {
					t.Errorf("message %d = %q, want prefix %q", i, r.Messages[i], m)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(trail, tc.trail) {
				t.Errorf("trail %q, want %q", trail, tc.trail)
			}
		})
	}
}

func TestRunCaseHung(t *testing.T) {
	e := newEnv(Options{CaseTimeout: 20 * time.Millisecond}, providers.Info{Name: "none"})
	e.cleanupTimeout = 20 * time.Millisecond
	release := make(chan struct{})
	defer close(release)
	// The case ignores its context, as a provider call that hangs would.
	r := e.runCase(t.Context(), Case{Name: "hung", Run: func(T, providers.Provider) { <-release }}, nil)
	if r.Status != Fail || len(r.Messages) != 1 || !strings.Contains(r.Messages[0], "did not end") {
		t.Errorf("hung case: %s %q", r.Status, r.Messages)
	}
}

func TestRunCaseCancelled(t *testing.T) {
	e := newEnv(Options{}, providers.Info{Name: "none"})
	ctx, cancel := context.WithCancel(t.Context())
	started := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	go func() {
		<-started
		cancel()
	}()
	r := e.runCase(ctx, Case{Name: "cancelled", Run: func(T, providers.Provider) {
		close(started)
		<-release
	}}, nil)
	if r.Status != Fail || len(r.Messages) != 1 || !strings.Contains(r.Messages[0], "run cancelled") {
		t.Errorf("cancelled run: %s %q", r.Status, r.Messages)
	}
}

func TestSelection(t *testing.T) {
	caps := providers.Capabilities{Volumes: true, NetworkModes: []providers.NetworkMode{providers.NetworkNone}}
	e := newEnv(Options{Only: []string{"exec-*", "volumes-*", "network-none", "concurrency-20"}, Skip: []string{"exec-stdin"}, Short: true}, providers.Info{Capabilities: caps})
	var run, skipped []string
	for _, c := range Cases() {
		if !e.selected(c.Name) {
			continue
		}
		if e.skipReason(c) != "" {
			skipped = append(skipped, c.Name)
			continue
		}
		run = append(run, c.Name)
	}
	for _, want := range []string{"exec-exit-codes", "exec-timeout-kills-tree", "volumes-persist"} {
		if !slices.Contains(run, want) {
			t.Errorf("%s is not run; run: %q", want, run)
		}
	}
	for _, not := range []string{"exec-stdin", "info", "files-round-trip"} {
		if slices.Contains(run, not) || slices.Contains(skipped, not) {
			t.Errorf("%s is selected although filtered out", not)
		}
	}
	// Streaming is not claimed, the network case needs a Fixture, the
	// concurrency case is heavy.
	for _, want := range []string{"exec-streaming", "network-none", "concurrency-20"} {
		if !slices.Contains(skipped, want) {
			t.Errorf("%s is not skipped; skipped: %q", want, skipped)
		}
	}
}

func TestCaseNamesUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Cases() {
		if seen[c.Name] {
			t.Errorf("two cases are named %q", c.Name)
		}
		seen[c.Name] = true
		if c.Run == nil {
			t.Errorf("case %q has no Run", c.Name)
		}
		// Case names end up in labels and sandbox names.
		for _, r := range c.Name {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
				t.Errorf("case name %q has %q; use lowercase letters, digits and dashes", c.Name, r)
				break
			}
		}
	}
}
