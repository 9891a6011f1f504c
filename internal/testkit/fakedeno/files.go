package fakedeno

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"
)

// fsError renders a Go error as Deno's: the class names of Deno.errors and
// the os error text.
func fsError(err error) *serializedError {
	var errno syscall.Errno
	errors.As(err, &errno)
	msg := err.Error()
	if errno != 0 {
		msg = errno.Error() + " (os error " + itoa(int(errno)) + ")"
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return appError("NotFound", "ENOENT", msg)
	case errno == syscall.EISDIR:
		return appError("IsADirectory", "EISDIR", msg)
	case errno == syscall.ENOTDIR:
		return appError("NotADirectory", "ENOTDIR", msg)
	case errors.Is(err, fs.ErrExist):
		return appError("AlreadyExists", "EEXIST", msg)
	case errors.Is(err, fs.ErrPermission), errno == syscall.EROFS:
		return appError("PermissionDenied", "EACCES", msg)
	case errno == syscall.ENOTEMPTY:
		return appError("Error", "ENOTEMPTY", msg)
	}
	return appError("Error", "", msg)
}

var errReadOnly = &fs.PathError{Op: "write", Err: syscall.EROFS}

type pathParams struct {
	Path    string `json:"path"`
	Options struct {
		Recursive bool    `json:"recursive"`
		Mode      *uint32 `json:"mode"`
		Append    bool    `json:"append"`
		Create    *bool   `json:"create"`
		CreateNew bool    `json:"createNew"`
	} `json:"options"`
	Content         json.RawMessage `json:"content"`
	ContentStreamID *int            `json:"contentStreamId"`
}

// hostPath resolves a sandbox path; relative ones are relative to /home/app.
func (c *conn) hostPath(p string, write bool) (string, *serializedError) {
	if !path.IsAbs(p) {
		p = path.Join("/home/app", p)
	}
	host, writable := c.sb.resolve(p)
	if write && !writable {
		return "", fsError(errReadOnly)
	}
	return host, nil
}

func (c *conn) readFile(_ context.Context, params json.RawMessage) (any, *serializedError, *rpcError) {
	var p pathParams
	if e := decode(params, &p); e != nil {
		return nil, nil, e
	}
	host, aerr := c.hostPath(p.Path, false)
	if aerr != nil {
		return nil, aerr, nil
	}
	b, err := os.ReadFile(host)
	if err != nil {
		return nil, fsError(err), nil
	}
	return b, nil, nil // []byte marshals as base64, as the SDK's bytes() codec wants
}

func (c *conn) readTextFile(_ context.Context, params json.RawMessage) (any, *serializedError, *rpcError) {
	var p pathParams
	if e := decode(params, &p); e != nil {
		return nil, nil, e
	}
	host, aerr := c.hostPath(p.Path, false)
	if aerr != nil {
		return nil, aerr, nil
	}
	b, err := os.ReadFile(host)
	if err != nil {
		return nil, fsError(err), nil
	}
	return string(b), nil, nil
}

func (c *conn) writeFile(_ context.Context, params json.RawMessage) (any, *serializedError, *rpcError) {
	return c.write(params, false)
}

func (c *conn) writeTextFile(_ context.Context, params json.RawMessage) (any, *serializedError, *rpcError) {
	return c.write(params, true)
}

// write serves writeFile (content base64) and writeTextFile (content a
// string), each with contentStreamId as the alternative.
func (c *conn) write(params json.RawMessage, text bool) (any, *serializedError, *rpcError) {
	var p pathParams
	if e := decode(params, &p); e != nil {
		return nil, nil, e
	}
	var src io.Reader
	switch {
	case p.ContentStreamID != nil:
		r, ok := c.claim(*p.ContentStreamID)
		if !ok {
			return nil, nil, invalidParams(errors.New("the content stream is already in use"))
		}
		defer r.Close()
		src = r
	case p.Content != nil && text:
		var t string
		if err := json.Unmarshal(p.Content, &t); err != nil {
			return nil, nil, invalidParams(err)
		}
		src = strings.NewReader(t)
	case p.Content != nil:
		var b []byte
		if err := json.Unmarshal(p.Content, &b); err != nil {
			return nil, nil, invalidParams(err)
		}
		src = bytes.NewReader(b)
	default:
		return nil, nil, invalidParams(errors.New("writeFile needs content or contentStreamId"))
	}
	host, aerr := c.hostPath(p.Path, true)
	if aerr != nil {
		return nil, aerr, nil
	}
	flags := os.O_WRONLY
	if p.Options.Create == nil || *p.Options.Create {
		flags |= os.O_CREATE
	}
	if p.Options.CreateNew {
		flags |= os.O_CREATE | os.O_EXCL
	}
	if p.Options.Append {
		flags |= os.O_APPEND
	} else {
		flags |= os.O_TRUNC
	}
	mode := os.FileMode(0o644)
	if p.Options.Mode != nil {
		mode = os.FileMode(*p.Options.Mode & 0o7777)
	}
	f, err := os.OpenFile(host, flags, mode)
	if err != nil {
		return nil, fsError(err), nil
	}
	_, err = io.Copy(f, src)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, appError("Error", "", "writing "+p.Path+": "+err.Error()), nil
	}
	if p.Options.Mode != nil {
		_ = os.Chmod(host, mode)
	}
	return nil, nil, nil
}

func (c *conn) readDir(_ context.Context, params json.RawMessage) (any, *serializedError, *rpcError) {
	var p pathParams
	if e := decode(params, &p); e != nil {
		return nil, nil, e
	}
	host, aerr := c.hostPath(p.Path, false)
	if aerr != nil {
		return nil, aerr, nil
	}
	entries, err := os.ReadDir(host)
	if err != nil {
		return nil, fsError(err), nil
	}
	out := []map[string]any{}
	for _, e := range entries {
		t := e.Type()
		out = append(out, map[string]any{"name": e.Name(), "isFile": t.IsRegular(), "isDirectory": t.IsDir(), "isSymlink": t&fs.ModeSymlink != 0})
	}
	return out, nil, nil
}

func (c *conn) mkdir(_ context.Context, params json.RawMessage) (any, *serializedError, *rpcError) {
	var p pathParams
	if e := decode(params, &p); e != nil {
		return nil, nil, e
	}
	host, aerr := c.hostPath(p.Path, true)
	if aerr != nil {
		return nil, aerr, nil
	}
	mode := os.FileMode(0o755)
	if p.Options.Mode != nil {
		mode = os.FileMode(*p.Options.Mode & 0o7777)
	}
	var err error
	if p.Options.Recursive {
		err = os.MkdirAll(host, mode)
	} else {
		err = os.Mkdir(host, mode)
	}
	if err != nil {
		return nil, fsError(err), nil
	}
	return nil, nil, nil
}

func (c *conn) remove(_ context.Context, params json.RawMessage) (any, *serializedError, *rpcError) {
	var p pathParams
	if e := decode(params, &p); e != nil {
		return nil, nil, e
	}
	host, aerr := c.hostPath(p.Path, true)
	if aerr != nil {
		return nil, aerr, nil
	}
	if _, err := os.Lstat(host); err != nil {
		return nil, fsError(err), nil
	}
	var err error
	if p.Options.Recursive {
		err = os.RemoveAll(host)
	} else {
		err = os.Remove(host)
	}
	if err != nil {
		return nil, fsError(err), nil
	}
	return nil, nil, nil
}

func (c *conn) rename(_ context.Context, params json.RawMessage) (any, *serializedError, *rpcError) {
	var p struct {
		OldPath string `json:"oldPath"`
		NewPath string `json:"newPath"`
	}
	if e := decode(params, &p); e != nil {
		return nil, nil, e
	}
	from, aerr := c.hostPath(p.OldPath, true)
	if aerr != nil {
		return nil, aerr, nil
	}
	to, aerr := c.hostPath(p.NewPath, true)
	if aerr != nil {
		return nil, aerr, nil
	}
	if err := os.Rename(from, to); err != nil {
		return nil, fsError(err), nil
	}
	return nil, nil, nil
}

func (c *conn) stat(_ context.Context, params json.RawMessage) (any, *serializedError, *rpcError) {
	return c.statWith(params, os.Stat)
}

func (c *conn) lstat(_ context.Context, params json.RawMessage) (any, *serializedError, *rpcError) {
	return c.statWith(params, os.Lstat)
}

func (c *conn) statWith(params json.RawMessage, statFn func(string) (os.FileInfo, error)) (any, *serializedError, *rpcError) {
	var p pathParams
	if e := decode(params, &p); e != nil {
		return nil, nil, e
	}
	host, aerr := c.hostPath(p.Path, false)
	if aerr != nil {
		return nil, aerr, nil
	}
	fi, err := statFn(host)
	if err != nil {
		return nil, fsError(err), nil
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	iso := func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
	out := map[string]any{
		"isFile": fi.Mode().IsRegular(), "isDirectory": fi.IsDir(), "isSymlink": fi.Mode()&fs.ModeSymlink != 0,
		"size": fi.Size(), "mtime": iso(fi.ModTime()), "atime": iso(fi.ModTime()), "birthtime": iso(fi.ModTime()), "ctime": iso(fi.ModTime()),
		"mode": uint32(fi.Mode().Perm()), "dev": 0, "ino": 0, "nlink": 1, "uid": 1000, "gid": 1000, "rdev": 0, "blksize": 4096, "blocks": (fi.Size() + 511) / 512,
		"isBlockDevice": false, "isCharDevice": fi.Mode()&fs.ModeCharDevice != 0, "isFifo": fi.Mode()&fs.ModeNamedPipe != 0, "isSocket": fi.Mode()&fs.ModeSocket != 0,
	}
	if st != nil {
		out["mode"] = st.Mode
		out["dev"], out["ino"], out["nlink"] = st.Dev, st.Ino, st.Nlink
		out["atime"] = iso(time.Unix(st.Atim.Sec, st.Atim.Nsec))
		out["ctime"] = iso(time.Unix(st.Ctim.Sec, st.Ctim.Nsec))
	}
	return out, nil, nil
}

// File handles live as long as the connection that opened them.
type handles struct {
	mu    sync.Mutex
	next  int
	files map[int]*os.File
}

func (h *handles) put(f *os.File) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.files == nil {
		h.files = map[int]*os.File{}
	}
	id := h.next
	h.next++
	h.files[id] = f
	return id
}

func (h *handles) get(id int) *os.File {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.files[id]
}

func (h *handles) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, f := range h.files {
		_ = f.Close()
		delete(h.files, id)
	}
}

func (c *conn) open(_ context.Context, params json.RawMessage) (any, *serializedError, *rpcError) {
	var p struct {
		Path    string `json:"path"`
		Options struct {
			Read, Write, Append, Truncate, Create, CreateNew bool
			Mode                                             *uint32
		} `json:"options"`
	}
	if e := decode(params, &p); e != nil {
		return nil, nil, e
	}
	o := p.Options
	write := o.Write || o.Append || o.Truncate || o.Create || o.CreateNew
	host, aerr := c.hostPath(p.Path, write)
	if aerr != nil {
		return nil, aerr, nil
	}
	flags := os.O_RDONLY
	switch {
	case write && (o.Read || !o.Write && !o.Append):
		flags = os.O_RDWR
	case write:
		flags = os.O_WRONLY
	}
	for _, f := range []struct {
		on   bool
		flag int
	}{{o.Append, os.O_APPEND}, {o.Truncate, os.O_TRUNC}, {o.Create, os.O_CREATE}, {o.CreateNew, os.O_CREATE | os.O_EXCL}} {
		if f.on {
			flags |= f.flag
		}
	}
	mode := os.FileMode(0o644)
	if o.Mode != nil {
		mode = os.FileMode(*o.Mode & 0o7777)
	}
	f, err := os.OpenFile(host, flags, mode)
	if err != nil {
		return nil, fsError(err), nil
	}
	if fi, err := f.Stat(); err == nil && fi.IsDir() && write {
		_ = f.Close()
		return nil, fsError(&fs.PathError{Op: "open", Path: p.Path, Err: syscall.EISDIR}), nil
	}
	return map[string]int{"fileHandleId": c.files.put(f)}, nil, nil
}

func (c *conn) fileRead(_ context.Context, params json.RawMessage) (any, *serializedError, *rpcError) {
	var p struct {
		FileHandleID int `json:"fileHandleId"`
		Length       int `json:"length"`
	}
	if e := decode(params, &p); e != nil {
		return nil, nil, e
	}
	f := c.files.get(p.FileHandleID)
	if f == nil {
		return nil, appError("BadResource", "", "bad file handle"), nil
	}
	buf := make([]byte, min(max(p.Length, 1), 8<<20))
	n, err := f.Read(buf)
	if errors.Is(err, io.EOF) || (n == 0 && err == nil) {
		return map[string]any{"data": nil}, nil, nil
	}
	if err != nil {
		return nil, fsError(err), nil
	}
	return map[string]any{"data": buf[:n]}, nil, nil
}

func (c *conn) fileSeek(_ context.Context, params json.RawMessage) (any, *serializedError, *rpcError) {
	var p struct {
		FileHandleID int         `json:"fileHandleId"`
		Offset       json.Number `json:"offset"` // a number, or a bigint's decimal string
		Whence       int         `json:"whence"`
	}
	if e := decode(params, &p); e != nil {
		return nil, nil, e
	}
	f := c.files.get(p.FileHandleID)
	if f == nil {
		return nil, appError("BadResource", "", "bad file handle"), nil
	}
	off, err := p.Offset.Int64()
	if err != nil {
		return nil, nil, invalidParams(err)
	}
	pos, err := f.Seek(off, p.Whence)
	if err != nil {
		return nil, fsError(err), nil
	}
	return map[string]int64{"position": pos}, nil, nil
}

func (c *conn) fileClose(_ context.Context, params json.RawMessage) (any, *serializedError, *rpcError) {
	var p struct {
		FileHandleID int `json:"fileHandleId"`
	}
	if e := decode(params, &p); e != nil {
		return nil, nil, e
	}
	c.files.mu.Lock()
	f := c.files.files[p.FileHandleID]
	delete(c.files.files, p.FileHandleID)
	c.files.mu.Unlock()
	if f == nil {
		return nil, appError("BadResource", "", "bad file handle"), nil
	}
	_ = f.Close()
	return nil, nil, nil
}
