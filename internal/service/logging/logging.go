// Package logging builds sandstep's loggers: the server, the CLI, the
// Lambdas and the provider plugins all log through New or NewHandler, so
// that every line has the same shape. Lines are JSON (text for a person
// reading a terminal), levels are named as slog names them, and durations
// are milliseconds under a key ending in _ms ("took_ms": 53.2), never Go's
// nanosecond integers.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"
)

// ParseLevel reads a level name: debug, info, warn (or warning), error, in
// any case; "" is info.
func ParseLevel(name string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "debug":
		return slog.LevelDebug, nil
	case "", "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return slog.LevelInfo, fmt.Errorf("unknown log level %q (debug, info, warn or error)", name)
}

// Options shape a handler.
type Options struct {
	// Level is the least level written; nil means info.
	Level slog.Leveler
	// Text writes key=value lines instead of JSON, for a person reading a
	// terminal (the CLI's own messages).
	Text bool
	// ReplaceAttr rewrites attributes after the durations are turned into
	// milliseconds (a plugin renames the keys go-plugin reads).
	ReplaceAttr func(groups []string, a slog.Attr) slog.Attr
}

// NewHandler returns a handler writing to w.
func NewHandler(w io.Writer, o Options) slog.Handler {
	replace := func(groups []string, a slog.Attr) slog.Attr {
		a = millis(a)
		if o.ReplaceAttr != nil {
			a = o.ReplaceAttr(groups, a)
		}
		return a
	}
	ho := &slog.HandlerOptions{Level: o.Level, ReplaceAttr: replace}
	if o.Text {
		return slog.NewTextHandler(w, ho)
	}
	return slog.NewJSONHandler(w, ho)
}

// New returns a JSON logger writing to w at the named level.
func New(w io.Writer, level string) (*slog.Logger, error) {
	l, err := ParseLevel(level)
	if err != nil {
		return nil, err
	}
	return slog.New(NewHandler(w, Options{Level: l})), nil
}

// MustNew is New for a level that is not the user's to get wrong (a
// Lambda's environment): an unknown level is info, and says so.
func MustNew(w io.Writer, level string) *slog.Logger {
	l, err := New(w, level)
	if err != nil {
		l, _ = New(w, "info")
		l.Warn("logging at info", "err", err)
	}
	return l
}

// millis turns a duration into milliseconds, with microseconds kept, under
// the same key with _ms appended.
func millis(a slog.Attr) slog.Attr {
	if a.Value.Kind() != slog.KindDuration {
		return a
	}
	d := a.Value.Duration()
	key := a.Key
	if !strings.HasSuffix(key, "_ms") {
		key += "_ms"
	}
	return slog.Float64(key, float64(d.Round(time.Microsecond))/float64(time.Millisecond))
}

// Default returns a logger that writes through slog's default logger as it
// is when each record is logged, not as it was when Default was called. A
// provider plugin builds its provider (and its logger) in main before
// plugin.Serve installs the handler the host reads: a logger taken from
// slog.Default() then would write through the standard library's default
// text handler, and the host would show "INFO configured ..." as a message.
func Default(args ...any) *slog.Logger {
	return slog.New(lateHandler{}).With(args...)
}

// lateHandler hands each record to slog's default handler of the moment.
type lateHandler struct {
	wrap func(slog.Handler) slog.Handler // attributes and groups added with With
}

func (h lateHandler) handler() slog.Handler {
	d := slog.Default().Handler()
	if h.wrap != nil {
		return h.wrap(d)
	}
	return d
}

func (h lateHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.handler().Enabled(ctx, l)
}

func (h lateHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.handler().Handle(ctx, r)
}

func (h lateHandler) then(f func(slog.Handler) slog.Handler) lateHandler {
	prev := h.wrap
	return lateHandler{wrap: func(d slog.Handler) slog.Handler {
		if prev != nil {
			d = prev(d)
		}
		return f(d)
	}}
}

func (h lateHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return h.then(func(d slog.Handler) slog.Handler { return d.WithAttrs(as) })
}

func (h lateHandler) WithGroup(name string) slog.Handler {
	return h.then(func(d slog.Handler) slog.Handler { return d.WithGroup(name) })
}
