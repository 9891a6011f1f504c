package direct

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/sandstep/sandstep/internal/service/artifacts"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/providers"
)

// cleanPath validates a file path of a request and returns it clean: an
// absolute path without "..", whose repeated slashes, "." and trailing
// slash are dropped (the providers take only clean paths).
func cleanPath(field, p string) (string, error) {
	if p == "" || !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) || len(p) > 4096 {
		return "", invalid(field, "%s must be an absolute path, not %q", field, p)
	}
	if slices.Contains(strings.Split(p, "/"), "..") {
		return "", invalid(field, "%s must not contain \"..\", not %q", field, p)
	}
	return path.Clean(p), nil
}

// fileErr is sandboxErr for a request about a path: what the provider
// says is wrong with the path (a folder where a file is wanted, a
// read-only or forbidden place) is the request's fault, named by field.
func (s *Service) fileErr(d store.DirectSandbox, err error, field, p string) error {
	var pe *providers.Error
	if errors.As(err, &pe) {
		switch pe.Code {
		case providers.InvalidArgument, providers.FailedPrecondition:
			return &Error{Kind: KindInvalid, Field: field, Message: fmt.Sprintf("%s %q: %s", field, p, pathMessage(err)), Err: err}
		case providers.PermissionDenied:
			return &Error{Kind: KindForbidden, Field: field, Message: fmt.Sprintf("%s %q: %s", field, p, pathMessage(err)), Err: err}
		}
	}
	return s.sandboxErr(d, err)
}

// WriteFile streams r into path in the sandbox (binary-safe, any size the
// sandbox's disk takes).
func (s *Service) WriteFile(ctx context.Context, caller Caller, id, p string, mode uint32, r io.Reader) error {
	p, err := cleanPath("path", p)
	if err != nil {
		return err
	}
	d, err := s.live(ctx, caller, id)
	if err != nil {
		return err
	}
	s.touch(ctx, d, time.Time{})
	if err := s.o.Provider.WriteFile(ctx, d.ProviderID, providers.WriteFileRequest{Path: p, Mode: mode, Content: r}); err != nil {
		return s.fileErr(d, err, "path", p)
	}
	return nil
}

// ReadFile streams path from the sandbox into w; start, when set, is
// called once before the first byte (with nothing sent yet on an error).
func (s *Service) ReadFile(ctx context.Context, caller Caller, id, p string, w io.Writer) (int64, error) {
	p, err := cleanPath("path", p)
	if err != nil {
		return 0, err
	}
	d, err := s.live(ctx, caller, id)
	if err != nil {
		return 0, err
	}
	s.touch(ctx, d, time.Time{})
	return s.readFile(ctx, d, p, w)
}

func (s *Service) readFile(ctx context.Context, d store.DirectSandbox, p string, w io.Writer) (int64, error) {
	n, err := s.o.Provider.ReadFile(ctx, d.ProviderID, providers.ReadFileRequest{Path: p}, w)
	if err != nil {
		return n, s.fileErr(d, err, "path", p)
	}
	return n, nil
}

// ListFiles lists a folder of the sandbox.
func (s *Service) ListFiles(ctx context.Context, caller Caller, id, p string) ([]providers.FileInfo, error) {
	p, err := cleanPath("path", p)
	if err != nil {
		return nil, err
	}
	d, err := s.live(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	s.touch(ctx, d, time.Time{})
	list, err := s.o.Provider.ListFiles(ctx, d.ProviderID, p)
	if err != nil {
		return nil, s.fileErr(d, err, "path", p)
	}
	return list, nil
}

// ArtifactsDir is the folder of a sandbox whose files GET .../artifacts
// serves.
func (s *Service) ArtifactsDir() string { return s.o.Config.ArtifactsDir }

// ArtifactPath resolves rel (the path after /artifacts/) inside the
// artifacts folder, refusing any that steps out of it.
func (s *Service) ArtifactPath(rel string) (string, error) {
	if rel == "" || strings.ContainsRune(rel, 0) || strings.HasPrefix(rel, "/") {
		return "", invalid("path", "the artifact path %q must be relative to the artifacts folder", rel)
	}
	for _, seg := range strings.Split(rel, "/") {
		if seg == ".." || seg == "." || seg == "" {
			return "", invalid("path", "the artifact path %q steps out of the artifacts folder", rel)
		}
	}
	return path.Join(s.o.Config.ArtifactsDir, rel), nil
}

// Artifact streams an artifact of the sandbox d into w (see ArtifactPath),
// after checking inside the sandbox that the file, symlinks resolved, is in
// the artifacts folder: a link pointing out of it is refused like "..".
// It returns the content type and size before writing.
func (s *Service) Artifact(ctx context.Context, d store.DirectSandbox, rel string, start func(contentType string, size int64) io.Writer) error {
	p, err := s.ArtifactPath(rel)
	if err != nil {
		return err
	}
	if d.State != store.DirectRunning {
		return &Error{Kind: KindConflict, Message: fmt.Sprintf("sandbox %s is %s", d.ID, d.State)}
	}
	s.touch(ctx, d, time.Time{})
	var out bytes.Buffer
	script := fmt.Sprintf(`root=$(realpath -e -- %s 2>/dev/null) || exit 3
f=$(realpath -e -- %s 2>/dev/null) || exit 4
case "$f" in "$root"/*) ;; *) exit 5;; esac
[ -f "$f" ] || exit 4
printf '%%s\n' "$f"; wc -c < "$f"`, shellQuote(s.o.Config.ArtifactsDir), shellQuote(p))
	res, err := s.o.Provider.Exec(ctx, d.ProviderID, providers.ExecRequest{Shell: script, Stdout: &out, Timeout: 30 * time.Second})
	if err != nil {
		return s.sandboxErr(d, err)
	}
	switch res.ExitCode {
	case 0:
	case 5:
		return invalid("path", "the artifact path %q leads out of the artifacts folder", rel)
	default:
		return &Error{Kind: KindNotFound, Message: fmt.Sprintf("artifact %q not found", rel)}
	}
	lines := strings.SplitN(strings.TrimSpace(out.String()), "\n", 2)
	var size int64
	if len(lines) == 2 {
		fmt.Sscan(strings.TrimSpace(lines[1]), &size)
	}
	w := start(artifacts.ContentType(p), size)
	_, err = s.o.Provider.ReadFile(ctx, d.ProviderID, providers.ReadFileRequest{Path: lines[0]}, w)
	return err
}

// Artifacts lists the regular files of the sandbox d's artifacts folder,
// at any depth, by path (none where there is no folder); cut says the
// listing stopped at artifacts.ListLimit. Symlinks are neither followed
// nor listed.
func (s *Service) Artifacts(ctx context.Context, d store.DirectSandbox) (files []artifacts.File, cut bool, err error) {
	if d.State != store.DirectRunning {
		return nil, false, &Error{Kind: KindConflict, Message: fmt.Sprintf("sandbox %s is %s", d.ID, d.State)}
	}
	s.touch(ctx, d, time.Time{})
	var out, stderr bytes.Buffer
	res, err := s.o.Provider.Exec(ctx, d.ProviderID, providers.ExecRequest{Shell: artifacts.ListCommand(s.o.Config.ArtifactsDir),
		Stdout: &out, Stderr: &stderr, Timeout: 30 * time.Second})
	if err != nil {
		return nil, false, s.sandboxErr(d, err)
	}
	if res.ExitCode != 0 {
		return nil, false, fmt.Errorf("listing %s in sandbox %s exited %d: %s", s.o.Config.ArtifactsDir, d.ID, res.ExitCode,
			strings.TrimSpace(stderr.String()))
	}
	files, cut = artifacts.Parse(out.Bytes())
	return files, cut, nil
}
