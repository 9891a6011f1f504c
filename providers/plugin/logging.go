package plugin

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"

	"github.com/sandstep/sandstep/internal/service/logging"
)

// go-plugin speaks hclog on both sides. The plugin writes hclog's JSON
// lines to stderr; the host's go-plugin client parses them and hands them
// to an hclog.Logger, which here forwards to the host's *slog.Logger.

const levelTrace = slog.LevelDebug - 4

func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return levelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	case hclog.Off:
		return slog.LevelError + 100
	default:
		return slog.LevelInfo
	}
}

// hclogLevel is the most verbose hclog level l lets through.
func hclogLevel(l *slog.Logger) hclog.Level {
	ctx := context.Background()
	for _, lv := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if l.Enabled(ctx, slogLevel(lv)) {
			return lv
		}
	}
	return hclog.Off
}

// newPluginLogHandler writes slog records in the JSON shape go-plugin's
// host side recognises as hclog (keys @level, @message, @timestamp), so
// that a plugin's slog lines keep their level and attributes on the host.
func newPluginLogHandler(w io.Writer, level slog.Leveler) slog.Handler {
	return logging.NewHandler(w, logging.Options{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) > 0 {
				return a
			}
			switch a.Key {
			case slog.TimeKey:
				return slog.String("@timestamp", a.Value.Time().Format("2006-01-02T15:04:05.000000Z07:00"))
			case slog.LevelKey:
				lv, _ := a.Value.Any().(slog.Level)
				name := "info"
				switch {
				case lv < slog.LevelDebug:
					name = "trace"
				case lv < slog.LevelInfo:
					name = "debug"
				case lv < slog.LevelWarn:
					name = "info"
				case lv < slog.LevelError:
					name = "warn"
				default:
					name = "error"
				}
				return slog.String("@level", name)
			case slog.MessageKey:
				a.Key = "@message"
			}
			return a
		},
	})
}

// hclogAdapter is an hclog.Logger that logs to a *slog.Logger.
type hclogAdapter struct {
	l       *slog.Logger
	name    string
	implied []any
	// ending is set once the host ends the plugin on purpose: its exit is
	// then no error, whatever its status.
	ending *atomic.Bool
}

func newHCLogger(l *slog.Logger, ending *atomic.Bool) hclog.Logger {
	return &hclogAdapter{l: l, ending: ending}
}

// exitMessage is what go-plugin logs when the plugin process ends, at
// error level when its exit status is not zero.
const exitMessage = "plugin process exited"

func (h *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Error && msg == exitMessage && h.ending != nil && h.ending.Load() {
		level = hclog.Info
		args = renameArg(args, "error", "exit")
	}
	lv := slogLevel(level)
	ctx := context.Background()
	if !h.l.Enabled(ctx, lv) {
		return
	}
	// go-plugin adds the plugin's own time to each line it relays, beside
	// the host's, and names the relay after the binary; the host's logger
	// carries the provider attribute, which a provider's own lines repeat.
	// A JSON line must not hold a key twice.
	args = dropArg(dropArg(args, "timestamp"), "provider")
	if h.name != "" && !strings.HasPrefix(h.name, BinaryPrefix) {
		args = append(args, "logger", h.name)
	}
	h.l.Log(ctx, lv, msg, args...)
}

// dropArg removes key and its value from key-value pairs.
func dropArg(args []any, key string) []any {
	for i := 0; i+1 < len(args); i += 2 {
		if k, ok := args[i].(string); ok && k == key {
			return append(args[:i:i], args[i+2:]...)
		}
	}
	return args
}

func renameArg(args []any, from, to string) []any {
	out := append([]any(nil), args...)
	for i := 0; i+1 < len(out); i += 2 {
		if k, ok := out[i].(string); ok && k == from {
			out[i] = to
		}
	}
	return out
}

func (h *hclogAdapter) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *hclogAdapter) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *hclogAdapter) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *hclogAdapter) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *hclogAdapter) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *hclogAdapter) enabled(l hclog.Level) bool {
	return h.l.Enabled(context.Background(), slogLevel(l))
}

func (h *hclogAdapter) IsTrace() bool { return h.enabled(hclog.Trace) }
func (h *hclogAdapter) IsDebug() bool { return h.enabled(hclog.Debug) }
func (h *hclogAdapter) IsInfo() bool  { return h.enabled(hclog.Info) }
func (h *hclogAdapter) IsWarn() bool  { return h.enabled(hclog.Warn) }
func (h *hclogAdapter) IsError() bool { return h.enabled(hclog.Error) }

func (h *hclogAdapter) ImpliedArgs() []any { return h.implied }

func (h *hclogAdapter) With(args ...any) hclog.Logger {
	return &hclogAdapter{l: h.l.With(args...), name: h.name, implied: append(append([]any(nil), h.implied...), args...), ending: h.ending}
}

func (h *hclogAdapter) Name() string { return h.name }

func (h *hclogAdapter) Named(name string) hclog.Logger {
	if h.name != "" {
		name = h.name + "." + name
	}
	return &hclogAdapter{l: h.l, name: name, implied: h.implied, ending: h.ending}
}

func (h *hclogAdapter) ResetNamed(name string) hclog.Logger {
	return &hclogAdapter{l: h.l, name: name, implied: h.implied, ending: h.ending}
}

// SetLevel does nothing: the slog handler owns the level.
func (h *hclogAdapter) SetLevel(hclog.Level) {}

func (h *hclogAdapter) GetLevel() hclog.Level { return hclogLevel(h.l) }

func (h *hclogAdapter) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return slog.NewLogLogger(h.l.Handler(), slog.LevelInfo)
}

func (h *hclogAdapter) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	return h.StandardLogger(opts).Writer()
}

// lineLogger logs each line written to it; go-plugin copies a plugin's
// os.Stdout and os.Stderr (after the handshake) into it.
type lineLogger struct {
	l      *slog.Logger
	stream string
	mu     sync.Mutex
	buf    []byte
}

// maxLogLine caps a line held back waiting for its newline.
const maxLogLine = 64 << 10

func (w *lineLogger) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			if len(w.buf) >= maxLogLine {
				w.emit(w.buf)
				w.buf = w.buf[:0]
			}
			return len(p), nil
		}
		w.emit(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
}

func (w *lineLogger) emit(line []byte) {
	if s := strings.TrimRight(string(line), "\r"); s != "" {
		w.l.Info(s, "stream", w.stream)
	}
}
