package modal_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sandstep/sandstep/internal/testkit/fakemodal"
	"github.com/sandstep/sandstep/internal/testkit/testbin"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/modal"
	"github.com/sandstep/sandstep/providers/plugin"
	"github.com/sandstep/sandstep/providers/plugin/plugintest"
)

// pluginPath is the Modal provider's plugin, built once by TestMain.
var pluginPath string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sandstep-modal-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if _, err := testbin.Build(dir, testbin.ModalPlugin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	pluginPath = filepath.Join(dir, testbin.ModalPlugin)
	// DynamoDB Local starts only for the tests that ask for it
	// (crash_test.go) and stops here.
	return testddb.RunTests(m)
}

// The token the fake expects. Tests check that neither part shows up in
// logs or errors.
const (
	testTokenID     = "ak-sandstepmodaltest4c1d"
	testTokenSecret = "as-sandstepmodalsecret9e2f7b"
)

func testSecrets() map[string]string {
	return map[string]string{"token_id": testTokenID, "token_secret": testTokenSecret}
}

// startFake serves a fake Modal on 127.0.0.1 and checks, when the test
// ends, that no sandbox is left running on it. Without a working
// bubblewrap the test is skipped, or fails under CI.
func startFake(t testing.TB, opts fakemodal.Options) *fakemodal.Running {
	t.Helper()
	opts.TokenID, opts.TokenSecret = testTokenID, testTokenSecret
	f, err := fakemodal.Start(opts, "")
	if errors.Is(err, fakemodal.ErrNoBubblewrap) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ids := f.Sandboxes(); len(ids) > 0 {
			t.Errorf("sandboxes left running on the fake: %v", ids)
		}
		if err := f.Close(); err != nil {
			t.Errorf("closing the fake: %v", err)
		}
	})
	return f
}

// settingsFor is the provider's settings JSON for the fake at url, with
// quick retries; extra overrides keys.
func settingsFor(url string, extra map[string]any) []byte {
	s := map[string]any{"server_url": url, "retry_base_delay": "5ms", "max_retries": 6, "app_name": "sandstep-test"}
	for k, v := range extra {
		s[k] = v
	}
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return b
}

// startPlugin starts the provider as a plugin subprocess; its log lines
// go to logs (and warnings to stderr when logs is nil).
func startPlugin(t testing.TB, settings []byte, secrets map[string]string, logs *syncBuffer) *plugin.Client {
	t.Helper()
	var h slog.Handler = slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})
	if logs != nil {
		h = slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})
	}
	p, err := plugin.Start(context.Background(), plugin.Options{
		Path: pluginPath, Settings: settings, Secrets: secrets, Logger: slog.New(h),
	})
	if err != nil {
		t.Fatalf("starting the modal provider plugin: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("closing the plugin: %v", err)
		}
	})
	return p
}

// inProcess connects to the provider through the plugin protocol inside
// the test process.
func inProcess(t testing.TB, f *fakemodal.Running, extra map[string]any) providers.Provider {
	t.Helper()
	p := plugintest.Connect(t, modal.New())
	if err := p.Configure(t.Context(), providers.Config{Settings: settingsFor(f.URL, extra), Secrets: testSecrets()}); err != nil {
		t.Fatal(err)
	}
	return p
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
