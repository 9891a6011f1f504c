package sandy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sandstep/sandstep/internal/testkit/fakesandy"
	"github.com/sandstep/sandstep/internal/testkit/testbin"
	"github.com/sandstep/sandstep/providers/plugin"
)

// pluginPath is the Sandy provider's plugin, built once by TestMain.
var pluginPath string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sandstep-sandy-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if _, err := testbin.Build(dir, testbin.SandyPlugin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	pluginPath = filepath.Join(dir, testbin.SandyPlugin)
	return m.Run()
}

// testKey is the API key the fake expects.
const testKey = "sk-sandy-test-5f1c9e27d3b84a06"

// startFake serves a fake Sandy on 127.0.0.1 whose requests are recorded.
// Without a working bubblewrap the test is skipped, or fails under CI.
func startFake(t testing.TB, opts fakesandy.Options) (*fakesandy.Running, *requestLog) {
	t.Helper()
	if opts.APIKey == "" {
		opts.APIKey = testKey
	}
	log := &requestLog{}
	opts.Logger = slog.New(log)
	f, err := fakesandy.Start(opts, "")
	if errors.Is(err, fakesandy.ErrNoBubblewrap) && os.Getenv("CI") != "true" {
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
	return f, log
}

// settingsFor is the provider's settings JSON for the fake at url, with
// quick retries; extra overrides keys.
func settingsFor(url string, extra map[string]any) []byte {
	s := map[string]any{
		"base_url":         url,
		"retry_base_delay": "5ms",
		"max_retries":      6,
	}
	for k, v := range extra {
		s[k] = v
	}
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return b
}

// startPlugin starts the provider through the plugin boundary. A nil
// logger shows warnings on stderr.
func startPlugin(t testing.TB, settings []byte, key string, logger *slog.Logger) *plugin.Client {
	t.Helper()
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	p, err := plugin.Start(context.Background(), plugin.Options{
		Path:     pluginPath,
		Settings: settings,
		Secrets:  map[string]string{"api_key": key},
		Logger:   logger,
	})
	if err != nil {
		t.Fatalf("starting the sandy provider plugin: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("closing the plugin: %v", err)
		}
	})
	return p
}

// requestLog is a slog.Handler that keeps the fake's request lines.
type requestLog struct {
	mu   sync.Mutex
	reqs []request
}

type request struct {
	method, path string
	status       int
}

func (l *requestLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *requestLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *requestLog) WithGroup(string) slog.Handler            { return l }

func (l *requestLog) Handle(_ context.Context, r slog.Record) error {
	var q request
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "method":
			q.method = a.Value.String()
		case "path":
			q.path = a.Value.String()
		case "status":
			q.status = int(a.Value.Int64())
		}
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reqs = append(l.reqs, q)
	return nil
}

// count counts the requests that match.
func (l *requestLog) count(match func(request) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, q := range l.reqs {
		if match(q) {
			n++
		}
	}
	return n
}
