package modal

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/sandstep/sandstep/providers"
)

// Files move through execs: Modal's V2 backend has no file RPCs (the old
// ContainerFilesystemExec is unsupported there). Content travels as the
// command's stdin or stdout, binary-safe and in chunks, and both ways are
// size-checked.

// Exit codes the file scripts answer with.
const (
	exitNotFound  = 44
	exitWrongType = 45
	exitDenied    = 46
)

// checkPath refuses paths that are not clean and absolute.
func checkPath(op, p string) error {
	if p == "" || !path.IsAbs(p) || path.Clean(p) != p || strings.ContainsRune(p, 0) {
		return providers.Errorf(providers.InvalidArgument, op, "%q is not a clean absolute path", p)
	}
	return nil
}

// scriptError turns a file script's exit into an error.
func scriptError(op, p string, r providers.ExecResult, stderr string) error {
	msg := strings.TrimSpace(stderr)
	switch {
	case r.ExitCode == exitNotFound:
		return providers.Errorf(providers.NotFound, op, "%s: no such file or directory", p)
	case r.ExitCode == exitWrongType:
		return providers.Errorf(providers.FailedPrecondition, op, "%s: %s", p, msg)
	case r.ExitCode == exitDenied:
		return providers.Errorf(providers.PermissionDenied, op, "%s: permission denied", p)
	case r.TimedOut:
		return providers.Errorf(providers.DeadlineExceeded, op, "%s: the command timed out", p)
	}
	return providers.Errorf(providers.Internal, op, "%s: exit %d: %s", p, r.ExitCode, clip(msg))
}

// fileTimeout bounds one file exec: long enough for hundreds of MB.
const fileTimeout = 30 * time.Minute

// writeScript writes stdin to a temporary file beside the target and
// prints its size; the provider moves it into place (commitScript) only
// when the size is what it sent, so a failed write leaves the old file.
const writeScript = `p=$1
d=$(dirname -- "$p")
[ -d "$p" ] && { echo "is a directory" >&2; exit 45; }
if [ -e "$d" ] && [ ! -d "$d" ]; then echo "a parent is not a directory" >&2; exit 45; fi
mkdir -p -- "$d" 2>/dev/null || { echo "cannot create the parent directory" >&2; exit 45; }
t="$d/.sandstep-write-$2"
cat > "$t" || { rm -f -- "$t"; exit 1; }
wc -c < "$t"`

const commitScript = `p=$1; t="$(dirname -- "$p")/.sandstep-write-$2"
if [ "$(wc -c < "$t")" != "$3" ]; then rm -f -- "$t"; echo "size changed" >&2; exit 1; fi
chmod "$4" "$t" && mv -f -- "$t" "$p"`

const discardScript = `rm -f -- "$(dirname -- "$1")/.sandstep-write-$2"`

// WriteFile writes the content through a temporary file, size-checked,
// then renames it into place.
func (p *Provider) WriteFile(ctx context.Context, id string, f providers.WriteFileRequest) error {
	const op = "write file"
	st, err := p.settings(op)
	if err != nil {
		return err
	}
	if err := checkID(op, id); err != nil {
		return err
	}
	if err := checkPath(op, f.Path); err != nil {
		return err
	}
	mode := f.Mode & 0o7777
	if mode == 0 {
		mode = 0o644
	}
	tmp := randomHex(8)
	content := &countingReader{r: f.Content}
	if content.r == nil {
		content.r = strings.NewReader("")
	}
	var stdout, stderr bytes.Buffer
	r, err := p.exec(ctx, st, op, id, providers.ExecRequest{
		Argv: []string{"/bin/sh", "-c", writeScript, "sh", f.Path, tmp}, Cwd: "/",
		Stdin: content, Stdout: &stdout, Stderr: &stderr, Timeout: fileTimeout,
	})
	if err != nil {
		p.discard(ctx, st, id, f.Path, tmp)
		return err
	}
	if r.ExitCode != 0 || r.Signal != "" {
		p.discard(ctx, st, id, f.Path, tmp)
		return scriptError(op, f.Path, r, stderr.String())
	}
	if got := strings.TrimSpace(stdout.String()); got != strconv.FormatInt(content.n, 10) {
		p.discard(ctx, st, id, f.Path, tmp)
		return providers.Errorf(providers.Unavailable, op, "%s: %s bytes arrived of %d sent", f.Path, got, content.n)
	}
	stderr.Reset()
	r, err = p.exec(ctx, st, op, id, providers.ExecRequest{
		Argv: []string{"/bin/sh", "-c", commitScript, "sh", f.Path, tmp, strconv.FormatInt(content.n, 10), strconv.FormatUint(uint64(mode), 8)},
		Cwd:  "/", Stderr: &stderr, Timeout: time.Minute,
	})
	if err != nil {
		p.discard(ctx, st, id, f.Path, tmp)
		return err
	}
	if r.ExitCode != 0 || r.Signal != "" {
		p.discard(ctx, st, id, f.Path, tmp)
		return scriptError(op, f.Path, r, stderr.String())
	}
	return nil
}

// discard removes a write's temporary file, best effort.
func (p *Provider) discard(ctx context.Context, st *state, id, file, tmp string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_, _ = p.exec(ctx, st, "write file", id, providers.ExecRequest{Argv: []string{"/bin/sh", "-c", discardScript, "sh", file, tmp}, Cwd: "/", Timeout: 20 * time.Second})
}

// readScript prints the file's size on stderr, then the asked range on
// stdout.
const readScript = `p=$1
[ -e "$p" ] || exit 44
[ -d "$p" ] && { echo "is a directory" >&2; exit 45; }
[ -r "$p" ] || exit 46
wc -c < "$p" >&2 || exit 1
if [ "$3" -gt 0 ]; then tail -c +"$2" -- "$p" | head -c "$3"; else tail -c +"$2" -- "$p"; fi`

// ReadFile streams the range into w and checks that as many bytes came as
// the file's size says.
func (p *Provider) ReadFile(ctx context.Context, id string, f providers.ReadFileRequest, w io.Writer) (int64, error) {
	const op = "read file"
	st, err := p.settings(op)
	if err != nil {
		return 0, err
	}
	if err := checkID(op, id); err != nil {
		return 0, err
	}
	if f.Offset < 0 {
		return 0, providers.Errorf(providers.InvalidArgument, op, "offset %d is negative", f.Offset)
	}
	if err := checkPath(op, f.Path); err != nil {
		return 0, err
	}
	limit := max(f.Limit, 0)
	out := &countingWriter{w: w}
	var stderr bytes.Buffer
	r, err := p.exec(ctx, st, op, id, providers.ExecRequest{
		Argv: []string{"/bin/sh", "-c", readScript, "sh", f.Path, strconv.FormatInt(f.Offset+1, 10), strconv.FormatInt(limit, 10)},
		Cwd:  "/", Stdout: out, Stderr: &stderr, Timeout: fileTimeout,
	})
	if err != nil {
		return out.n, err
	}
	if r.ExitCode != 0 || r.Signal != "" {
		return out.n, scriptError(op, f.Path, r, stderr.String())
	}
	size, perr := strconv.ParseInt(strings.TrimSpace(stderr.String()), 10, 64)
	if perr != nil {
		return out.n, providers.Errorf(providers.Internal, op, "%s: the size came back as %q", f.Path, clip(stderr.String()))
	}
	want := max(size-f.Offset, 0)
	if limit > 0 {
		want = min(want, limit)
	}
	if out.n != want {
		return out.n, providers.Errorf(providers.Unavailable, op, "%s: %d bytes arrived of %d (the file may have changed while read)", f.Path, out.n, want)
	}
	return out.n, nil
}

const listScript = `[ -e "$1" ] || exit 44
[ -d "$1" ] || { echo "not a directory" >&2; exit 45; }
[ -r "$1" ] || exit 46
find "$1" -mindepth 1 -maxdepth 1 -printf '%y %s %m %T@ %f\0'`

// ListFiles lists a directory with find, NUL-separated so that any name
// survives.
func (p *Provider) ListFiles(ctx context.Context, id, dir string) ([]providers.FileInfo, error) {
	const op = "list files"
	st, err := p.settings(op)
	if err != nil {
		return nil, err
	}
	if err := checkID(op, id); err != nil {
		return nil, err
	}
	if err := checkPath(op, dir); err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	r, err := p.exec(ctx, st, op, id, providers.ExecRequest{
		Argv: []string{"/bin/sh", "-c", listScript, "sh", dir}, Cwd: "/", Stdout: &stdout, Stderr: &stderr, Timeout: 5 * time.Minute,
	})
	if err != nil {
		return nil, err
	}
	if r.ExitCode != 0 || r.Signal != "" {
		return nil, scriptError(op, dir, r, stderr.String())
	}
	var out []providers.FileInfo
	for _, rec := range strings.Split(stdout.String(), "\x00") {
		if rec == "" {
			continue
		}
		fields := strings.SplitN(rec, " ", 5)
		if len(fields) != 5 {
			return nil, providers.Errorf(providers.Internal, op, "%s: unreadable listing entry %q", dir, clip(rec))
		}
		size, _ := strconv.ParseInt(fields[1], 10, 64)
		mode, _ := strconv.ParseUint(fields[2], 8, 32)
		secs, _ := strconv.ParseFloat(fields[3], 64)
		fi := providers.FileInfo{
			Name: fields[4], Path: path.Join(dir, fields[4]), Size: size, Mode: uint32(mode),
			IsDir: fields[0] == "d", ModTime: time.Unix(0, int64(secs*1e9)).UTC(),
		}
		if fi.IsDir {
			fi.Size = 0
		}
		out = append(out, fi)
	}
	return out, nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// clip shortens text for an error message.
func clip(s string) string {
	if len(s) > 300 {
		return s[:300] + fmt.Sprintf("... (%d bytes)", len(s))
	}
	return s
}
