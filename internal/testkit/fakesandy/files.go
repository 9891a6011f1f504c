package fakesandy

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"syscall"
)

// location is where a sandbox path lives on this machine: inside one of the
// sandbox's own directories (root set, rel inside it) or, anywhere else, on
// the host, read-only.
type location struct {
	root *os.Root
	rel  string
	host string
	name string // the path as the sandbox sees it, for messages
}

func (l location) close() {
	if l.root != nil {
		_ = l.root.Close()
	}
}

// locate resolves p as commands in the sandbox would: relative to
// /workspace, with the sandbox's mounts. os.Root keeps symlinks from
// leading out of the sandbox's directories.
func (sb *sandbox) locate(p string) (location, error) {
	if !path.IsAbs(p) {
		p = path.Join("/workspace", p)
	}
	p = path.Clean(p)
	for _, m := range mounts {
		if p == m.at || len(p) > len(m.at) && p[:len(m.at)+1] == m.at+"/" {
			root, err := os.OpenRoot(filepath.Join(sb.dir, m.sub))
			if err != nil {
				return location{}, err
			}
			rel := "."
			if p != m.at {
				rel = p[len(m.at)+1:]
			}
			return location{root: root, rel: rel, name: p}, nil
		}
	}
	return location{host: p, name: p}, nil
}

func (l location) stat() (fs.FileInfo, error) {
	if l.root != nil {
		return l.root.Stat(l.rel)
	}
	return os.Stat(l.host)
}

func (l location) readFile() ([]byte, error) {
	if l.root != nil {
		return l.root.ReadFile(l.rel)
	}
	return os.ReadFile(l.host)
}

func (l location) fs() (fs.FS, string) {
	if l.root != nil {
		return l.root.FS(), l.rel
	}
	return os.DirFS("/"), l.host[1:]
}

// fileError answers an error of the file API the way a Python handler that
// maps OSError would.
func fileError(w http.ResponseWriter, name string, err error) {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		writeDetail(w, http.StatusNotFound, "File not found: "+name)
	case errors.Is(err, syscall.EISDIR):
		writeDetail(w, http.StatusBadRequest, "Is a directory: "+name)
	case errors.Is(err, syscall.ENOTDIR):
		writeDetail(w, http.StatusBadRequest, "Not a directory: "+name)
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		writeDetail(w, http.StatusForbidden, "Permission denied: "+name)
	default:
		writeDetail(w, http.StatusInternalServerError, fmt.Sprintf("%s: %v", name, err))
	}
}

// handleWrite writes content literally as text; Sandy has no working binary
// mode, and fields such as "encoding" are ignored. Parent directories are
// created.
func (s *Server) handleWrite(w http.ResponseWriter, r *http.Request) {
	sb := s.find(r.PathValue("id"), false)
	if sb == nil {
		notFound(w)
		return
	}
	fields, err := decodeBody(r)
	if err != nil {
		badBody(w, err)
		return
	}
	var p, content *string
	if !field(w, fields, "path", &p, "Input should be a valid string") ||
		!field(w, fields, "content", &content, "Input should be a valid string") {
		return
	}
	switch {
	case p == nil:
		validationError(w, "path", "Field required", nil)
		return
	case content == nil:
		validationError(w, "content", "Field required", nil)
		return
	}
	loc, err := sb.locate(*p)
	if err != nil {
		fileError(w, *p, err)
		return
	}
	defer loc.close()
	if loc.root == nil {
		fileError(w, loc.name, syscall.EROFS)
		return
	}
	if st, err := loc.root.Stat(loc.rel); err == nil && st.IsDir() {
		fileError(w, loc.name, syscall.EISDIR)
		return
	}
	if dir := path.Dir(loc.rel); dir != "." {
		if err := loc.root.MkdirAll(dir, 0o755); err != nil {
			if errors.Is(err, fs.ErrExist) {
				err = syscall.ENOTDIR // a parent is a file
			}
			fileError(w, loc.name, err)
			return
		}
	}
	if err := loc.root.WriteFile(loc.rel, []byte(*content), 0o644); err != nil {
		fileError(w, loc.name, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "path": loc.name})
}

func (s *Server) handleRead(w http.ResponseWriter, r *http.Request) {
	sb := s.find(r.PathValue("id"), false)
	if sb == nil {
		notFound(w)
		return
	}
	if !r.URL.Query().Has("path") {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{
			"detail": []map[string]any{{"type": "missing", "loc": []string{"query", "path"}, "msg": "Field required"}},
		})
		return
	}
	loc, err := sb.locate(r.URL.Query().Get("path"))
	if err != nil {
		fileError(w, r.URL.Query().Get("path"), err)
		return
	}
	defer loc.close()
	if st, err := loc.stat(); err == nil && st.IsDir() {
		fileError(w, loc.name, syscall.EISDIR)
		return
	}
	data, err := loc.readFile()
	if err != nil {
		fileError(w, loc.name, err)
		return
	}
	f := s.Faults()
	if f.TruncateReadsAbove > 0 && len(data) > f.TruncateReadsAbove {
		data = data[:f.TruncateReadsAbove]
	}
	switch f.ReadFormat {
	case "base64":
		writeJSON(w, http.StatusOK, map[string]string{"content": base64.StdEncoding.EncodeToString(data), "encoding": "base64"})
	case "raw":
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(data)
	default:
		writeJSON(w, http.StatusOK, map[string]string{"content": string(data)})
	}
}

// maxListed bounds a listing: a recursive walk of a big tree is huge.
const maxListed = 10000

// handleList answers every file below path, recursively, relative to it;
// directories themselves are not listed.
func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	sb := s.find(r.PathValue("id"), false)
	if sb == nil {
		notFound(w)
		return
	}
	p := r.URL.Query().Get("path")
	if p == "" {
		p = "/workspace"
	}
	loc, err := sb.locate(p)
	if err != nil {
		fileError(w, p, err)
		return
	}
	defer loc.close()
	st, err := loc.stat()
	if err != nil {
		fileError(w, loc.name, err)
		return
	}
	if !st.IsDir() {
		fileError(w, loc.name, syscall.ENOTDIR)
		return
	}
	fsys, top := loc.fs()
	if top == "" {
		top = "."
	}
	files := []string{}
	_ = fs.WalkDir(fsys, top, func(p string, d fs.DirEntry, err error) error {
		switch {
		case len(files) >= maxListed:
			return fs.SkipAll
		case err != nil:
			return nil // an unreadable entry is left out
		}
		if !d.IsDir() {
			rel := p
			if top != "." {
				rel = p[len(top)+1:]
			}
			files = append(files, rel)
		}
		return nil
	})
	slices.Sort(files)
	writeJSON(w, http.StatusOK, map[string][]string{"files": files})
}
