package docsearch

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/sandstep/sandstep/internal/service/ids"
	"github.com/sandstep/sandstep/internal/service/store"
)

// Module is a code module a session saved in its volume, as the model
// describes it (the seed's code_modules finalizer): no source, the volume
// holds it.
type Module struct {
	Path        string   `json:"path"`
	Description string   `json:"description"`
	Exports     []string `json:"exports"`
	Usage       string   `json:"usage"`
}

// Limits of one code_modules call.
const (
	MaxModules           = 50
	MaxModulePath        = 512
	MaxModuleDescription = 2000
	MaxModuleUsage       = 4000
	MaxModuleExports     = 100
	MaxModuleExportLen   = 200
)

// WorkspacePrefix is where the session's volume is mounted; module paths
// are relative to it and may be given with it.
const WorkspacePrefix = "/workspace/"

// FieldError is a module that cannot be stored, naming the field.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// Errors of PutModules about the session.
var (
	ErrSessionNotFound = errors.New("no such session")
	ErrSessionGone     = errors.New("the session's volume is deleted")
)

// CleanModules checks modules and returns them with their paths made
// relative to the workspace; a problem is a *FieldError.
func CleanModules(mods []Module) ([]Module, error) {
	if len(mods) == 0 {
		return nil, &FieldError{Field: "modules", Message: "must list at least one module"}
	}
	if len(mods) > MaxModules {
		return nil, &FieldError{Field: "modules", Message: fmt.Sprintf("at most %d modules per call, not %d", MaxModules, len(mods))}
	}
	out := make([]Module, len(mods))
	seen := map[string]int{}
	for i, m := range mods {
		f := func(name string) string { return fmt.Sprintf("modules[%d].%s", i, name) }
		p := strings.TrimPrefix(m.Path, WorkspacePrefix)
		switch {
		case strings.TrimSpace(p) == "":
			return nil, &FieldError{Field: f("path"), Message: "must name the module's file in the workspace, such as \"lib/linear.ts\""}
		case len(p) > MaxModulePath:
			return nil, &FieldError{Field: f("path"), Message: fmt.Sprintf("at most %d bytes", MaxModulePath)}
		case !utf8.ValidString(p) || strings.ContainsAny(p, "\x00\n\r\\"):
			return nil, &FieldError{Field: f("path"), Message: "must be a plain relative path"}
		case strings.HasPrefix(p, "/") || path.Clean(p) != p || p == "." || strings.HasPrefix(p, "../") || p == "..":
			return nil, &FieldError{Field: f("path"), Message: fmt.Sprintf("%q must be a clean path inside %s (no leading /, no . or .. parts)", m.Path, strings.TrimSuffix(WorkspacePrefix, "/"))}
		}
		if j, dup := seen[p]; dup {
			return nil, &FieldError{Field: f("path"), Message: fmt.Sprintf("%q is already modules[%d]", p, j)}
		}
		seen[p] = i
		if strings.TrimSpace(m.Description) == "" {
			return nil, &FieldError{Field: f("description"), Message: "must say what the module does"}
		}
		if utf8.RuneCountInString(m.Description) > MaxModuleDescription {
			return nil, &FieldError{Field: f("description"), Message: fmt.Sprintf("at most %d characters", MaxModuleDescription)}
		}
		if utf8.RuneCountInString(m.Usage) > MaxModuleUsage {
			return nil, &FieldError{Field: f("usage"), Message: fmt.Sprintf("at most %d characters", MaxModuleUsage)}
		}
		if len(m.Exports) > MaxModuleExports {
			return nil, &FieldError{Field: f("exports"), Message: fmt.Sprintf("at most %d names", MaxModuleExports)}
		}
		exports := make([]string, 0, len(m.Exports))
		for k, e := range m.Exports {
			if strings.TrimSpace(e) == "" || utf8.RuneCountInString(e) > MaxModuleExportLen {
				return nil, &FieldError{Field: fmt.Sprintf("modules[%d].exports[%d]", i, k), Message: fmt.Sprintf("must be a name of 1 to %d characters", MaxModuleExportLen)}
			}
			exports = append(exports, e)
		}
		out[i] = Module{Path: p, Description: m.Description, Exports: exports, Usage: m.Usage}
	}
	return out, nil
}

// PutModules upserts a session's module entries while its volume exists:
// ErrSessionNotFound or ErrSessionGone otherwise. Modules are embedded
// when embeddings are configured; an embedding failure stores them for
// BM25 and is returned as warning.
func (s *Service) PutModules(ctx context.Context, tenant, session string, mods []Module) (warning string, err error) {
	mods, err = CleanModules(mods)
	if err != nil {
		return "", err
	}
	key := ids.SessionKey(tenant, session)
	sess, err := s.st.GetSession(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return "", ErrSessionNotFound
	}
	if err != nil {
		return "", err
	}
	if !volumeAlive(sess) {
		return "", ErrSessionGone
	}
	now := s.now()
	entries := make([]store.CodeModule, len(mods))
	for i, m := range mods {
		entries[i] = store.CodeModule{Session: key, SessionCreatedAt: sess.CreatedAt, Path: m.Path, Description: m.Description,
			Exports: m.Exports, Usage: m.Usage, UpdatedAt: now}
	}
	if s.emb != nil {
		texts := make([]string, len(entries))
		for i, e := range entries {
			texts[i] = moduleText(e)
		}
		if vecs, err := s.emb.Embed(ctx, texts); err != nil {
			warning = "stored without embeddings, found by BM25 only: " + err.Error()
		} else {
			for i := range entries {
				entries[i].Vector, entries[i].Model = vecs[i], s.emb.Model()
			}
		}
	}
	return warning, s.st.PutCodeModules(ctx, entries)
}

// liveModules returns the session's modules while its volume exists, and
// deletes the entries of a volume that is gone (the session deleted, or
// deleted and started again with a new volume) as soon as it finds them.
func (s *Service) liveModules(ctx context.Context, tenant, session string) ([]store.CodeModule, error) {
	if session == "" {
		return nil, nil
	}
	key := ids.SessionKey(tenant, session)
	mods, err := s.st.CodeModules(ctx, key)
	if err != nil || len(mods) == 0 {
		return nil, err
	}
	sess, err := s.st.GetSession(ctx, key)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	alive := err == nil && volumeAlive(sess)
	var live []store.CodeModule
	var stale []string
	for _, m := range mods {
		if alive && m.SessionCreatedAt.Equal(sess.CreatedAt) {
			live = append(live, m)
		} else {
			stale = append(stale, m.Path)
		}
	}
	if len(stale) > 0 {
		if err := s.st.DeleteCodeModules(ctx, key, stale); err != nil {
			s.log.Warn("deleting stale code modules", "session", key, "err", err)
		} else {
			s.log.Info("stale code modules deleted", "session", key, "modules", len(stale))
		}
	}
	return live, nil
}

// volumeAlive: the session's volume exists while the session is idle or
// running; from deleting on, it is going or gone.
func volumeAlive(sess store.Session) bool {
	return sess.State == store.SessionIdle || sess.State == store.SessionRunning
}

func moduleText(m store.CodeModule) string {
	return m.Path + "\n" + m.Description + "\n" + strings.Join(m.Exports, " ") + "\n" + m.Usage
}
