package plugin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/sandstep/sandstep/internal/service/logging"
)

// The plugin writes hclog's JSON lines (keys @level, @message, @timestamp)
// to its stderr; the host parses them and logs each through its own
// *slog.Logger with the line's level, message and attributes, as go-plugin's
// client does.

const levelTrace = slog.LevelDebug - 4

// levelName is the most verbose hclog level l lets through, by name.
func levelName(l *slog.Logger) string {
	ctx := context.Background()
	for _, lv := range []struct {
		name  string
		level slog.Level
	}{{"trace", levelTrace}, {"debug", slog.LevelDebug}, {"info", slog.LevelInfo}, {"warn", slog.LevelWarn}, {"error", slog.LevelError}} {
		if l.Enabled(ctx, lv.level) {
			return lv.name
		}
	}
	return "off"
}

// levelOf maps an hclog level name to slog; ok is false for a name hclog
// does not write.
func levelOf(name string) (slog.Level, bool) {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "trace":
		return levelTrace, true
	case "debug":
		return slog.LevelDebug, true
	case "info":
		return slog.LevelInfo, true
	case "warn", "warning":
		return slog.LevelWarn, true
	case "error":
		return slog.LevelError, true
	}
	return 0, false
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

// relayLogs logs each line the plugin writes to its stderr until EOF.
// Lines that are not hclog JSON keep their text, at the level their
// "[LEVEL]" prefix names, or debug; from a "panic: " or "fatal error: "
// line on, every such line is an error (the plugin's crash).
func relayLogs(l *slog.Logger, r io.Reader) {
	br := bufio.NewReaderSize(r, maxLogLine)
	var inPanic bool
	for {
		line, isPrefix, err := br.ReadLine()
		if err != nil {
			if err != io.EOF {
				l.Error("reading plugin stderr", "error", err.Error())
			}
			return
		}
		if isPrefix {
			// Longer than maxLogLine: logged in pieces, as text.
			l.Debug(string(line))
			continue
		}
		inPanic = relayLine(l, line, inPanic)
	}
}

var textLevels = []struct {
	prefix string
	level  slog.Level
}{{"[TRACE]", levelTrace}, {"[DEBUG]", slog.LevelDebug}, {"[INFO]", slog.LevelInfo}, {"[WARN]", slog.LevelWarn}, {"[ERROR]", slog.LevelError}}

func relayLine(l *slog.Logger, line []byte, inPanic bool) bool {
	ctx := context.Background()
	var m map[string]any
	if len(bytes.TrimSpace(line)) == 0 {
		return inPanic
	}
	if json.Unmarshal(line, &m) != nil {
		s := string(line)
		for _, t := range textLevels {
			if strings.HasPrefix(s, t.prefix) {
				l.Log(ctx, t.level, s)
				return inPanic
			}
		}
		if strings.HasPrefix(s, "panic: ") || strings.HasPrefix(s, "fatal error: ") {
			inPanic = true
		}
		lv := slog.LevelDebug
		if inPanic {
			lv = slog.LevelError
		}
		l.Log(ctx, lv, s)
		return inPanic
	}
	name, _ := m["@level"].(string)
	lv, ok := levelOf(name)
	if !ok {
		// JSON from something other than hclog: verbatim.
		l.Debug(string(line))
		return inPanic
	}
	if !l.Enabled(ctx, lv) {
		return inPanic
	}
	msg, _ := m["@message"].(string)
	// The plugin's own time adds nothing to the host's, and the host's
	// logger carries the provider attribute, which a provider's own lines
	// repeat: a JSON line must not hold a key twice.
	for _, k := range []string{"@level", "@message", "@timestamp", "timestamp", "provider"} {
		delete(m, k)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	args := make([]any, 0, 2*len(keys))
	for _, k := range keys {
		args = append(args, k, m[k])
	}
	l.Log(ctx, lv, msg, args...)
	return inPanic
}

// lineLogger logs each line written to it; the host copies what a plugin
// writes to os.Stdout and os.Stderr (after the handshake) into it.
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
