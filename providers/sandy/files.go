package sandy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandstep/sandstep/providers"
)

// inlineChunk is how many bytes one exec carries in its environment, base64
// encoded (64 KiB), well under the kernel's limit for one variable.
const inlineChunk = 48 << 10

// maxAPIRead is the largest file read through files/read: its answer is
// held in memory whole.
const maxAPIRead = 32 << 20

// scriptTimeout bounds the provider's own file scripts; they move at most a
// chunk.
const scriptTimeout = 2 * time.Minute

func checkPath(op, p string) error {
	if !path.IsAbs(p) || path.Clean(p) != p || strings.IndexByte(p, 0) >= 0 {
		return providers.Errorf(providers.InvalidArgument, op, "path %q must be absolute and clean (no '.', '..' or repeated slashes)", p)
	}
	if len(p) > 4096 {
		return providers.Errorf(providers.InvalidArgument, op, "path is %d bytes long", len(p))
	}
	return nil
}

// script runs one of the provider's scripts and returns its output; the
// warmup quirk is retried.
func (p *Provider) script(ctx context.Context, cfg *settings, op, id, script string, env map[string]string) (execAnswer, error) {
	a, err := cfg.c.exec(ctx, op, id, script, env, scriptTimeout, true)
	if err != nil {
		return a, err
	}
	if a.ExitCode != 0 {
		return a, providers.Errorf(providers.Internal, op, "a helper script failed in sandbox %s: exit %d: %s", id, a.ExitCode, clip(a.Stderr))
	}
	return a, nil
}

// WriteFile writes text up to write_chunk_bytes through files/write, and
// anything else (binary, larger, or a mode of its own) into a temporary
// file by exec, renamed into place once complete.
func (p *Provider) WriteFile(ctx context.Context, id string, f providers.WriteFileRequest) error {
	const op = "write_file"
	cfg, err := p.sandboxCall(op, id)
	if err != nil {
		return err
	}
	if err := checkPath(op, f.Path); err != nil {
		return err
	}
	if f.Path == "/" {
		return providers.Errorf(providers.InvalidArgument, op, "path / is a directory")
	}
	if f.Content == nil {
		return providers.Errorf(providers.InvalidArgument, op, "no content")
	}
	return p.upload(ctx, cfg, op, id, f.Path, f.Mode, f.Content)
}

func (p *Provider) upload(ctx context.Context, cfg *settings, op, id, dst string, mode uint32, r io.Reader) error {
	if mode == 0 {
		mode = 0o644
	}
	limit := cfg.s.WriteChunkBytes
	head := make([]byte, limit+1)
	n, err := io.ReadFull(r, head)
	complete := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
	if err != nil && !complete {
		return providers.Wrap(providers.InvalidArgument, op, fmt.Errorf("reading the content: %w", err))
	}
	head = head[:n]
	if complete && mode == 0o644 && utf8.Valid(head) && bytes.IndexByte(head, 0) < 0 {
		err := p.writeText(ctx, cfg, op, id, dst, head)
		if err == nil || !fallBack(err) {
			return err
		}
		p.log.Debug("files/write failed; writing through exec", "id", id, "path", dst, "error", err.Error())
	}
	u := &uploader{p: p, cfg: cfg, op: op, id: id, dst: dst, mode: mode}
	u.tmp = path.Join(path.Dir(dst), ".sandstep-"+randomHex(6)+".tmp")
	u.stage = stageDir + "/" + randomHex(6)
	if err := u.run(ctx, io.MultiReader(bytes.NewReader(head), r), complete && len(head) <= inlineChunk); err != nil {
		u.cleanup(ctx)
		return err
	}
	return nil
}

// fallBack reports whether a files/write that failed is worth redoing
// through exec: Sandy answered, and not about the key or the rate.
func fallBack(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Status != http.StatusUnauthorized && ae.Status != http.StatusTooManyRequests
}

func (p *Provider) writeText(ctx context.Context, cfg *settings, op, id, dst string, data []byte) error {
	_, err := cfg.c.do(ctx, call{
		op:      op,
		method:  http.MethodPost,
		path:    sandboxPath(id, "files", "write"),
		body:    map[string]string{"path": dst, "content": string(data)},
		timeout: cfg.c.reqTimeout + time.Duration(len(data)>>20)*time.Second,
	})
	return err
}

// uploader writes one file through exec.
type uploader struct {
	p     *Provider
	cfg   *settings
	op    string
	id    string
	dst   string
	mode  uint32
	tmp   string // the file being built, next to dst
	stage string // prefix of staged base64 files
	seq   int
}

// run copies r into the sandbox chunk by chunk, reading one byte ahead to
// know which chunk is the last. Small content goes inline in one exec.
func (u *uploader) run(ctx context.Context, r io.Reader, small bool) error {
	if small {
		data, err := io.ReadAll(r)
		if err != nil {
			return providers.Wrap(providers.InvalidArgument, u.op, fmt.Errorf("reading the content: %w", err))
		}
		return u.inline(ctx, data, true, true)
	}
	limit := u.cfg.s.WriteChunkBytes
	br := bufio.NewReaderSize(r, 64<<10)
	buf := make([]byte, limit)
	for first := true; ; first = false {
		n, err := io.ReadFull(br, buf)
		last := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
		if err != nil && !last {
			return providers.Wrap(providers.InvalidArgument, u.op, fmt.Errorf("reading the content: %w", err))
		}
		if !last {
			if _, err := br.Peek(1); errors.Is(err, io.EOF) {
				last = true
			} else if err != nil {
				return providers.Wrap(providers.InvalidArgument, u.op, fmt.Errorf("reading the content: %w", err))
			}
		}
		if err := u.chunk(ctx, buf[:n], first, last); err != nil {
			return err
		}
		if last {
			return nil
		}
	}
}

// chunk stages data as base64 text through files/write and has exec decode
// it; when the text does not arrive whole, or files/write fails, the data
// goes inline through exec instead.
func (u *uploader) chunk(ctx context.Context, data []byte, first, last bool) error {
	u.seq++
	stage := fmt.Sprintf("%s.%d.b64", u.stage, u.seq)
	text := base64.StdEncoding.EncodeToString(data)
	err := u.p.writeText(ctx, u.cfg, u.op, u.id, stage, []byte(text))
	if err == nil {
		env := u.env(first, last)
		env["SS_S"] = stage
		env["SS_SL"] = strconv.Itoa(len(text))
		out, err := u.p.script(ctx, u.cfg, u.op, u.id, writeScript, env)
		if err != nil {
			return err
		}
		if strings.TrimSpace(out.Stdout) != "short" {
			return u.verdict(out)
		}
		u.p.log.Debug("a staged upload arrived incomplete; sending it through exec", "id", u.id, "path", u.dst, "bytes", len(data))
	} else if !fallBack(err) {
		return err
	} else {
		u.p.log.Debug("staging an upload failed; sending it through exec", "id", u.id, "path", u.dst, "error", err.Error())
	}
	return u.inline(ctx, data, first, last)
}

// inline sends data base64 encoded in the environment of execs, a piece of
// at most inlineChunk bytes per exec.
func (u *uploader) inline(ctx context.Context, data []byte, first, last bool) error {
	for {
		piece := data[:min(len(data), inlineChunk)]
		data = data[len(piece):]
		env := u.env(first, last && len(data) == 0)
		env["SS_B"] = base64.StdEncoding.EncodeToString(piece)
		out, err := u.p.script(ctx, u.cfg, u.op, u.id, writeScript, env)
		if err != nil {
			return err
		}
		if err := u.verdict(out); err != nil {
			return err
		}
		first = false
		if len(data) == 0 {
			return nil
		}
	}
}

func (u *uploader) env(first, last bool) map[string]string {
	env := map[string]string{"SS_P": u.dst, "SS_T": u.tmp, "SS_MODE": strconv.FormatUint(uint64(u.mode&0o7777), 8)}
	if first {
		env["SS_FIRST"] = "1"
	}
	if last {
		env["SS_LAST"] = "1"
	}
	return env
}

func (u *uploader) verdict(a execAnswer) error {
	switch v := strings.TrimSpace(a.Stdout); v {
	case "ok":
		return nil
	case "isdir":
		return providers.Errorf(providers.FailedPrecondition, u.op, "%s is a directory", u.dst)
	case "fail":
		return scriptFailure(u.op, "writing "+u.dst, a.Stderr)
	default:
		return providers.Errorf(providers.Internal, u.op, "writing %s: unexpected answer %q", u.dst, clip(v))
	}
}

// cleanup removes what a failed upload left, even when ctx is cancelled.
func (u *uploader) cleanup(ctx context.Context) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if _, err := u.p.script(cctx, u.cfg, u.op, u.id, cleanupScript, map[string]string{"SS_T": u.tmp, "SS_W": u.stage}); err != nil && !providers.IsNotFound(err) {
		u.p.log.Warn("removing the remains of a failed upload failed", "id", u.id, "path", u.tmp, "error", err.Error())
	}
}

// scriptFailure turns "fail" with its stderr into an error with a code.
func scriptFailure(op, what, stderr string) error {
	code := providers.Internal
	switch {
	case strings.Contains(stderr, "No space left"):
		code = providers.ResourceExhausted
	case strings.Contains(stderr, "Not a directory"), strings.Contains(stderr, "Is a directory"),
		strings.Contains(stderr, "Read-only file system"), strings.Contains(stderr, "Permission denied"):
		code = providers.FailedPrecondition
	}
	return providers.Errorf(code, op, "%s: %s", what, clip(stderr))
}

// ReadFile learns the file's size by exec, which brings a small file or
// range along; a large text file is read through files/read and checked
// against the size; everything else, and whatever files/read cuts short or
// garbles, comes in chunks through exec.
func (p *Provider) ReadFile(ctx context.Context, id string, f providers.ReadFileRequest, w io.Writer) (int64, error) {
	const op = "read_file"
	cfg, err := p.sandboxCall(op, id)
	if err != nil {
		return 0, err
	}
	if err := checkPath(op, f.Path); err != nil {
		return 0, err
	}
	if f.Offset < 0 {
		return 0, providers.Errorf(providers.InvalidArgument, op, "negative offset %d", f.Offset)
	}
	chunk := cfg.s.ReadChunkBytes
	whole := f.Offset == 0 && f.Limit <= 0
	limit := f.Limit
	if limit <= 0 {
		limit = -1
	}
	env := map[string]string{
		"SS_P": f.Path,
		"SS_O": strconv.FormatInt(f.Offset, 10),
		"SS_L": strconv.FormatInt(limit, 10),
		"SS_C": strconv.Itoa(chunk),
	}
	if whole {
		env["SS_FULL"] = "1"
	}
	a, err := cfg.c.exec(ctx, op, id, metaScript, env, scriptTimeout, true)
	if err != nil {
		return 0, err
	}
	lines := strings.Split(a.Stdout, "\n")
	head := strings.Fields(lines[0])
	switch {
	case a.ExitCode != 0:
		return 0, providers.Errorf(providers.Internal, op, "a helper script failed in sandbox %s: exit %d: %s", id, a.ExitCode, clip(a.Stderr))
	case len(head) == 1 && head[0] == "dir":
		return 0, providers.Errorf(providers.FailedPrecondition, op, "%s is a directory", f.Path)
	case len(head) == 1 && head[0] == "none":
		return 0, providers.Errorf(providers.NotFound, op, "no file %s", f.Path)
	case len(head) == 1 && head[0] == "unreadable":
		return 0, scriptFailure(op, "reading "+f.Path, a.Stderr)
	case len(head) != 3 || head[0] != "ok":
		return 0, providers.Errorf(providers.Internal, op, "unexpected answer about %s: %q", f.Path, clip(a.Stdout))
	}
	size, err := strconv.ParseInt(head[1], 10, 64)
	if err != nil {
		return 0, providers.Errorf(providers.Internal, op, "unexpected size of %s: %q", f.Path, head[1])
	}
	start := min(f.Offset, size)
	end := size
	if f.Limit > 0 {
		end = min(size, start+f.Limit)
	}
	if end-start <= int64(chunk) {
		z := slices.Index(lines, "Z")
		if z < 0 {
			// The answer was cut short; read in chunks instead.
			return p.readChunks(ctx, cfg, op, id, f.Path, start, end, chunk, w)
		}
		data, err := decodeLines(lines[1:z])
		if err != nil {
			return 0, providers.Wrap(providers.Internal, op, err)
		}
		return write(w, data)
	}
	if whole && head[2] != "0" && size <= maxAPIRead {
		if data, ok := p.readAPI(ctx, cfg, op, id, f.Path, size); ok {
			return write(w, data)
		}
	}
	return p.readChunks(ctx, cfg, op, id, f.Path, start, end, chunk, w)
}

func write(w io.Writer, b []byte) (int64, error) {
	n, err := w.Write(b)
	return int64(n), err
}

// readAPI reads a whole file through files/read and accepts it only at its
// known size. Sandy has answered {content}, {content, encoding: base64} and
// raw bytes over time.
func (p *Provider) readAPI(ctx context.Context, cfg *settings, op, id, file string, size int64) ([]byte, bool) {
	a, err := cfg.c.do(ctx, call{
		op:      op,
		method:  http.MethodGet,
		path:    sandboxPath(id, "files", "read"),
		query:   url.Values{"path": {file}},
		timeout: cfg.c.reqTimeout + time.Duration(size>>20)*time.Second,
		noRetry: true,
	})
	if err != nil {
		p.log.Debug("files/read failed; reading through exec", "id", id, "path", file, "error", err.Error())
		return nil, false
	}
	data, err := fileContent(a.ctype, a.body)
	if err != nil {
		p.log.Debug("files/read answered something unparsable; reading through exec", "id", id, "path", file, "error", err.Error())
		return nil, false
	}
	if int64(len(data)) != size {
		p.log.Debug("files/read came back with another size than the file's; reading through exec", "id", id, "path", file, "got", len(data), "size", size)
		return nil, false
	}
	return data, true
}

// fileContent decodes a files/read answer: the raw bytes, or a JSON
// {content, encoding} with the content as text or base64.
func fileContent(ctype string, body []byte) ([]byte, error) {
	if !strings.Contains(ctype, "json") {
		return body, nil
	}
	var m struct {
		Content  *string `json:"content"`
		Encoding string  `json:"encoding"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	if m.Content == nil {
		return nil, errors.New("the answer has no content")
	}
	if strings.EqualFold(m.Encoding, "base64") {
		return base64.StdEncoding.DecodeString(*m.Content)
	}
	return []byte(*m.Content), nil
}

// readChunks reads bytes [start, end) of file through exec, chunk by chunk,
// halving the chunk when an answer comes back cut short.
func (p *Provider) readChunks(ctx context.Context, cfg *settings, op, id, file string, start, end int64, chunk int, w io.Writer) (int64, error) {
	var total int64
	for pos := start; pos < end; {
		n := min(int64(chunk), end-pos)
		a, err := p.script(ctx, cfg, op, id, chunkScript, map[string]string{
			"SS_P": file,
			"SS_O": strconv.FormatInt(pos, 10),
			"SS_N": strconv.FormatInt(n, 10),
		})
		if err != nil {
			return total, err
		}
		lines := strings.Split(a.Stdout, "\n")
		switch {
		case lines[0] == "none":
			return total, providers.Errorf(providers.NotFound, op, "%s disappeared while being read", file)
		case lines[0] != "ok":
			return total, providers.Errorf(providers.Internal, op, "unexpected answer reading %s: %q", file, clip(a.Stdout))
		}
		z := slices.Index(lines, "Z")
		if z < 0 {
			if chunk <= minReportChunk {
				return total, providers.Errorf(providers.Internal, op, "reading %s: answers come back incomplete", file)
			}
			chunk /= 2
			continue
		}
		data, err := decodeLines(lines[1:z])
		if err != nil {
			return total, providers.Wrap(providers.Internal, op, err)
		}
		if len(data) == 0 {
			return total, providers.Errorf(providers.FailedPrecondition, op, "%s shrank while being read", file)
		}
		k, err := w.Write(data)
		total += int64(k)
		if err != nil {
			return total, err
		}
		pos += int64(len(data))
	}
	return total, nil
}

// ListFiles lists a directory by exec: files/list recurses, and has no
// sizes, modes, times or empty directories.
func (p *Provider) ListFiles(ctx context.Context, id, dir string) ([]providers.FileInfo, error) {
	const op = "list_files"
	cfg, err := p.sandboxCall(op, id)
	if err != nil {
		return nil, err
	}
	if err := checkPath(op, dir); err != nil {
		return nil, err
	}
	a, err := p.script(ctx, cfg, op, id, listScript, map[string]string{"SS_P": dir})
	if err != nil {
		return nil, err
	}
	out := a.Stdout
	lines := strings.Split(out, "\n")
	head := lines[0]
	switch head {
	case "none":
		return nil, providers.Errorf(providers.NotFound, op, "no directory %s", dir)
	case "notdir":
		return nil, providers.Errorf(providers.FailedPrecondition, op, "%s is not a directory", dir)
	case "ok gnu", "ok stat":
	default:
		return nil, providers.Errorf(providers.Internal, op, "unexpected answer listing %s: %q", dir, clip(out))
	}
	files, err := parseListing(lines, dir)
	if err != nil {
		return nil, providers.Wrap(providers.Internal, op, err)
	}
	return files, nil
}

// parseListing reads the answer of listScript past its "ok" head: base64
// lines up to "Z" of NUL-separated find records (ok gnu) or stat lines (ok
// stat).
func parseListing(lines []string, dir string) ([]providers.FileInfo, error) {
	z := slices.Index(lines, "Z")
	if z < 1 {
		return nil, fmt.Errorf("the listing of %s came back incomplete", dir)
	}
	raw, err := decodeLines(lines[1:z])
	if err != nil {
		return nil, err
	}
	var files []providers.FileInfo
	if lines[0] == "ok gnu" {
		for rec := range bytes.SplitSeq(raw, []byte{0}) {
			if len(rec) == 0 {
				continue
			}
			fi, err := parseFindRecord(string(rec), dir)
			if err != nil {
				return nil, err
			}
			files = append(files, fi)
		}
		return files, nil
	}
	for line := range strings.Lines(string(raw)) {
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			continue
		}
		fi, err := parseStatLine(line, dir)
		if err != nil {
			return nil, err
		}
		files = append(files, fi)
	}
	return files, nil
}

// parseFindRecord reads "type mode size mtime name" from GNU find's
// -printf '%y %m %s %T@ %f'.
func parseFindRecord(rec, dir string) (providers.FileInfo, error) {
	f := strings.SplitN(rec, " ", 5)
	if len(f) != 5 {
		return providers.FileInfo{}, fmt.Errorf("unexpected listing entry %q", rec)
	}
	mode, err1 := strconv.ParseUint(f[1], 8, 32)
	size, err2 := strconv.ParseInt(f[2], 10, 64)
	mtime, err3 := parseSeconds(f[3])
	if err := errors.Join(err1, err2, err3); err != nil {
		return providers.FileInfo{}, fmt.Errorf("unexpected listing entry %q: %w", rec, err)
	}
	return providers.FileInfo{
		Name:    f[4],
		Path:    path.Join(dir, f[4]),
		Size:    size,
		Mode:    uint32(mode),
		IsDir:   f[0] == "d",
		ModTime: mtime,
	}, nil
}

// parseStatLine reads "rawmode size mtime path" from stat -c '%f %s %Y %n'.
func parseStatLine(line, dir string) (providers.FileInfo, error) {
	f := strings.SplitN(line, " ", 4)
	if len(f) != 4 {
		return providers.FileInfo{}, fmt.Errorf("unexpected listing entry %q", line)
	}
	raw, err1 := strconv.ParseUint(f[0], 16, 32)
	size, err2 := strconv.ParseInt(f[1], 10, 64)
	mtime, err3 := strconv.ParseInt(f[2], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return providers.FileInfo{}, fmt.Errorf("unexpected listing entry %q: %w", line, err)
	}
	name := path.Base(f[3])
	const typeMask, dirType = 0o170000, 0o040000
	return providers.FileInfo{
		Name:    name,
		Path:    path.Join(dir, name),
		Size:    size,
		Mode:    uint32(raw & 0o7777),
		IsDir:   raw&typeMask == dirType,
		ModTime: time.Unix(mtime, 0),
	}, nil
}

// parseSeconds reads "1700000000.123456789" (find's %T@).
func parseSeconds(s string) (time.Time, error) {
	sec, frac, _ := strings.Cut(s, ".")
	secs, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	var nsec int64
	if frac != "" {
		frac = (frac + "000000000")[:9]
		if nsec, err = strconv.ParseInt(frac, 10, 64); err != nil {
			return time.Time{}, err
		}
	}
	return time.Unix(secs, nsec), nil
}
