package logging

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestDurationsAreMilliseconds(t *testing.T) {
	var buf bytes.Buffer
	l, err := New(&buf, "debug")
	if err != nil {
		t.Fatal(err)
	}
	l.With("wait", 2*time.Second).Debug("done", "took", 53236180*time.Nanosecond, "limit_ms", 1500*time.Microsecond,
		slog.Group("phase", "took", time.Minute), "n", 3)
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"msg": "done", "level": "DEBUG", "took_ms": 53.236, "limit_ms": 1.5, "wait_ms": 2000.0,
		"phase": map[string]any{"took_ms": 60000.0}, "n": 3.0}
	for k, v := range want {
		got, _ := json.Marshal(m[k])
		w, _ := json.Marshal(v)
		if string(got) != string(w) {
			t.Errorf("%s = %s, want %s (line %s)", k, got, w, buf.String())
		}
	}
	if _, ok := m["took"]; ok {
		t.Errorf("nanoseconds kept: %s", buf.String())
	}

	buf.Reset()
	slog.New(NewHandler(&buf, Options{Text: true})).Info("text", "took", 250*time.Millisecond)
	if !strings.Contains(buf.String(), " took_ms=250 ") && !strings.HasSuffix(strings.TrimSpace(buf.String()), "took_ms=250") {
		t.Errorf("text line: %q", buf.String())
	}
}

func TestParseLevel(t *testing.T) {
	for name, want := range map[string]slog.Level{"": slog.LevelInfo, "DEBUG": slog.LevelDebug, "warning": slog.LevelWarn, "error": slog.LevelError} {
		if got, err := ParseLevel(name); err != nil || got != want {
			t.Errorf("%q: %v %v", name, got, err)
		}
	}
	if _, err := ParseLevel("verbose"); err == nil || err.Error() != `unknown log level "verbose" (debug, info, warn or error)` {
		t.Errorf("verbose: %v", err)
	}
	var buf bytes.Buffer
	MustNew(&buf, "loud").Debug("hidden")
	if !strings.Contains(buf.String(), `"msg":"logging at info"`) || strings.Contains(buf.String(), "hidden") {
		t.Errorf("MustNew with a bad level: %s", buf.String())
	}
}

// Default follows slog's default logger as it is at each record, with the
// attributes given to it and to With.
func TestDefaultFollowsTheDefaultLogger(t *testing.T) {
	old := slog.Default()
	defer slog.SetDefault(old)
	l := Default("provider", "p").With("k", "v")
	var buf bytes.Buffer
	slog.SetDefault(slog.New(NewHandler(&buf, Options{})))
	l.Info("configured", "took", time.Millisecond)
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatalf("%q: %v", buf.String(), err)
	}
	if m["msg"] != "configured" || m["level"] != "INFO" || m["provider"] != "p" || m["k"] != "v" || m["took_ms"] != 1.0 {
		t.Fatalf("line: %s", buf.String())
	}
}
