// Package artifacts holds what a job keeps of the files its sandbox leaves
// in the artifacts folder: the folder, how it is listed, which files are
// kept and the content type each is served with. Research jobs and agent
// runs copy them into the store before their sandboxes go, each through
// its own way of reaching the sandbox.
package artifacts

import (
	"bytes"
	"fmt"
	"mime"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/sandstep/sandstep/internal/service/store"
)

const (
	// Dir is where whatever runs in a job's sandbox puts the files the
	// job keeps.
	Dir = "/workspace/artifacts"
	// MaxFiles is how many files a job keeps; each is at most
	// store.MaxArtifactBytes.
	MaxFiles = 64
)

// ListLimit bounds a listing: ListCommand prints at most ListLimit+1
// bytes, so that Parse can tell a listing cut short.
const ListLimit = 1 << 20

// ListCommand is the shell command that lists the regular files under dir
// (symlinks are not followed) as "<size> <path>\0" records, paths relative
// to dir. It succeeds, listing nothing, where there is no dir.
func ListCommand(dir string) string {
	q := "'" + strings.ReplaceAll(dir, "'", `'\''`) + "'"
	return "[ -d " + q + " ] || exit 0; cd " + q + " && find . -type f -printf '%s %P\\0' | head -c " + strconv.Itoa(ListLimit+1)
}

// File is one file ListCommand listed, by its path under its folder.
type File struct {
	Path string
	Size int64
}

// Parse reads ListCommand's output, by path, so that which files are kept
// past MaxFiles, and the order of their events, does not depend on the
// file system's order. truncated says the listing was cut at ListLimit:
// the record it was cut in is left out, as are malformed ones.
func Parse(listing []byte) (files []File, truncated bool) {
	if len(listing) > ListLimit {
		listing, truncated = listing[:ListLimit], true
	}
	// Every whole record ends with a NUL: what follows the last one is a
	// record cut short ("12 charts/pl" of "12 charts/plot.png").
	if i := bytes.LastIndexByte(listing, 0); i >= 0 {
		listing = listing[:i]
	} else {
		listing = nil
	}
	for _, rec := range bytes.Split(listing, []byte{0}) {
		size, name, ok := strings.Cut(string(rec), " ")
		n, err := strconv.ParseInt(size, 10, 64)
		if !ok || err != nil || name == "" {
			continue
		}
		files = append(files, File{Path: name, Size: n})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files, truncated
}

// SkipReason says why a file of size bytes is not kept when kept files
// are already kept, or "" to keep it.
func SkipReason(kept int, size int64) string {
	switch {
	case kept >= MaxFiles:
		return fmt.Sprintf("more than %d artifacts", MaxFiles)
	case size > store.MaxArtifactBytes:
		return fmt.Sprintf("larger than %d bytes", store.MaxArtifactBytes)
	}
	return ""
}

var extraTypes = map[string]string{
	".md": "text/markdown; charset=utf-8", ".csv": "text/csv; charset=utf-8", ".txt": "text/plain; charset=utf-8",
	".log": "text/plain; charset=utf-8", ".ipynb": "application/x-ipynb+json", ".zip": "application/zip",
	".tar": "application/x-tar", ".gz": "application/gzip", ".yaml": "application/yaml", ".yml": "application/yaml",
}

// ContentType is the content type an artifact is served with.
func ContentType(name string) string {
	ext := strings.ToLower(path.Ext(name))
	if t, ok := extraTypes[ext]; ok {
		return t
	}
	if t := mime.TypeByExtension(ext); t != "" {
		return t
	}
	return "application/octet-stream"
}
