package deno_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sandstep/sandstep/internal/testkit/fakedeno"
	"github.com/sandstep/sandstep/internal/testkit/testbin"
	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/deno"
	"github.com/sandstep/sandstep/providers/plugin"
)

// pluginPath is the Deno provider's plugin, built once by TestMain.
var pluginPath string

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sandstep-deno-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if _, err := testbin.Build(dir, testbin.DenoPlugin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	pluginPath = filepath.Join(dir, testbin.DenoPlugin)
	return m.Run()
}

// testToken is the organisation token the fake expects.
const testToken = "ddo_provider_test_3e9b51c0d7"

// startFake serves a fake Deno on 127.0.0.1; hosts maps names sandboxes use
// to 127.0.0.1 servers. Without bubblewrap the test is skipped, or fails
// under CI.
func startFake(t testing.TB, opts fakedeno.Options) *fakedeno.Running {
	t.Helper()
	if opts.Token == "" {
		opts.Token = testToken
	}
	if opts.DenoPath == "" {
		if root, err := testbin.Root(); err == nil && fileExists(filepath.Join(root, testbin.DenoPath)) {
			opts.DenoPath = filepath.Join(root, testbin.DenoPath)
		}
	}
	f, err := fakedeno.Start(opts, "", "")
	if errors.Is(err, fakedeno.ErrNoBubblewrap) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Errorf("closing the fake: %v", err)
		}
	})
	return f
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// settingsFor is the provider's settings JSON for the fake; extra overrides
// keys.
func settingsFor(f *fakedeno.Running, extra map[string]any) []byte {
	s := map[string]any{"token_env": "DENO_DEPLOY_TOKEN", "console_url": f.ConsoleURL, "sandbox_url": f.SandboxURL, "create_timeout": "90s"}
	for k, v := range extra {
		s[k] = v
	}
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return b
}

// startPlugin starts the provider through the plugin boundary.
func startPlugin(t testing.TB, f *fakedeno.Running, defaults providers.SandboxDefaults) *plugin.Client {
	t.Helper()
	p, err := plugin.Start(context.Background(), plugin.Options{
		Path:     pluginPath,
		Settings: settingsFor(f, nil),
		Secrets:  map[string]string{"token": testToken},
		Defaults: defaults,
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatalf("starting the deno provider plugin: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("closing the plugin: %v", err)
		}
	})
	return p
}

// inProcess is a configured provider in this process, for the tests that
// call what the plugin protocol does not carry (ListSnapshots, ExposeHTTP)
// or that need two providers as two processes would be.
func inProcess(t testing.TB, f *fakedeno.Running) *deno.Provider {
	t.Helper()
	p := deno.New()
	if err := p.Configure(t.Context(), providers.Config{Settings: settingsFor(f, nil), Secrets: map[string]string{"token": testToken}}); err != nil {
		t.Fatal(err)
	}
	return p
}

// newRecorder serves on 127.0.0.1 and records each request's X-Key.
func newRecorder(t testing.TB, mu *sync.Mutex, seen *[]string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		*seen = append(*seen, r.Header.Get("X-Key"))
		mu.Unlock()
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}
