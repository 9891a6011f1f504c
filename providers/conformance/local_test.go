package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/testkit/testbin"
	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/conformance"
	"github.com/sandstep/sandstep/providers/plugin"
)

// pluginPath is the local provider's plugin, built once by TestMain.
var pluginPath string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sandstep-conformance-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if _, err := testbin.Build(dir, testbin.LocalPlugin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	pluginPath = filepath.Join(dir, testbin.LocalPlugin)
	return m.Run()
}

// requireBwrap skips (fails under CI) when bubblewrap cannot make a
// sandbox on this machine: not installed, or no user namespaces.
func requireBwrap(t testing.TB) {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf(format, args...)
		}
		t.Skipf(format, args...)
	}
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		missing("bubblewrap is not installed (Debian package bubblewrap): %v", err)
		return
	}
	if out, err := exec.Command(bwrap, "--ro-bind", "/", "/", "--unshare-all", "--", "true").CombinedOutput(); err != nil {
		missing("bubblewrap cannot create a sandbox here: %v: %s", err, out)
	}
}

// startLocal starts the local provider through the plugin boundary with its
// own state directory.
func startLocal(t testing.TB, fx *conformance.Fixture) *plugin.Client {
	t.Helper()
	requireBwrap(t)
	ls := map[string]any{"state_dir": t.TempDir()}
	var defaults providers.SandboxDefaults
	if fx != nil {
		ls["dns_servers"] = []string{fx.DNS}
		defaults.AllowPrivate = []string{fx.Listed}
	}
	settings, err := json.Marshal(ls)
	if err != nil {
		t.Fatal(err)
	}
	// Warnings only: the plugin logs every sandbox at info level.
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	p, err := plugin.Start(context.Background(), plugin.Options{Path: pluginPath, Settings: settings, Defaults: defaults, Logger: logger})
	if err != nil {
		t.Fatalf("starting the local provider plugin: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("closing the plugin: %v", err)
		}
	})
	return p
}

// startFixture starts the network cases' fixture for the test.
func startFixture(t *testing.T) *conformance.Fixture {
	t.Helper()
	fx, err := conformance.StartFixture()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fx.Close)
	return fx
}

func TestLocalProvider(t *testing.T) {
	fx := startFixture(t)
	p := startLocal(t, fx)
	conformance.Run(t, p, conformance.Options{
		Fixture:    fx,
		FixtureDNS: true,
		Short:      testing.Short(),
		// A healthy case takes seconds; the bound keeps a hung provider
		// from running into go test's own timeout, which would leak the
		// plugin process.
		CaseTimeout: 90 * time.Second,
	})
}

// TestRunAllLocal runs a few cases the way the command line does and checks
// what it prints.
func TestRunAllLocal(t *testing.T) {
	p := startLocal(t, nil)
	var out bytes.Buffer
	sum := conformance.RunAll(t.Context(), p, conformance.Options{
		Only:     []string{"info", "exec-exit-codes", "files-round-trip", "network-none"},
		Parallel: 2,
	}, &out)
	t.Logf("RunAll output:\n%s", &out)
	if !sum.OK() || sum.Passed != 4 || sum.Skipped != 1 || sum.Failed != 0 {
		t.Errorf("summary %d passed, %d skipped, %d failed; want 4 passed (3 cases and no-leaks), 1 skipped (network-none without a fixture)", sum.Passed, sum.Skipped, sum.Failed)
	}
	line := regexp.MustCompile(`^(PASS|FAIL|SKIP) [a-z0-9-]+ \([0-9a-zµ.]+\)$`)
	var results []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if strings.HasPrefix(l, "    ") || strings.HasPrefix(l, "conformance run ") {
			continue
		}
		if !line.MatchString(l) {
			t.Errorf("unexpected output line %q", l)
		}
		results = append(results, l)
	}
	if len(results) != 5 || !strings.HasPrefix(results[len(results)-1], "PASS no-leaks ") {
		t.Errorf("result lines %q, want 5 ending with no-leaks", results)
	}
}
