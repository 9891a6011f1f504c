package sandy

import (
	"context"
	"log/slog"
)

// lateHandler hands each record to slog's default handler as it is when
// the record is logged: plugin.Serve installs the handler the host reads
// only after main has built the provider.
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
