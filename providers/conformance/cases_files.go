package conformance

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/sandstep/sandstep/providers"
)

func caseFilesRoundTrip(t T, p providers.Provider) {
	f := newFix(t, p)
	sb := f.sandbox()

	text := workspace + "/a/b/c/text.txt" // parents do not exist yet
	f.writeFile(sb.ID, text, []byte("hello\nworld\n"))
	if got := f.readFile(sb.ID, providers.ReadFileRequest{Path: text}); string(got) != "hello\nworld\n" {
		t.Errorf("text round trip: %q", got)
	}

	bin := make([]byte, 0, 512)
	for i := range 256 {
		bin = append(bin, byte(i))
	}
	for i := range 256 {
		bin = append(bin, byte(255-i))
	}
	binPath := workspace + "/bin/all-bytes"
	f.writeFile(sb.ID, binPath, bin)
	if got := f.readFile(sb.ID, providers.ReadFileRequest{Path: binPath}); !bytes.Equal(got, bin) {
		t.Errorf("binary round trip differs: got %d bytes %x", len(got), got)
	}
	// The bytes are really in the sandbox, not only in the provider's
	// bookkeeping.
	if r := f.exec(sb.ID, providers.ExecRequest{Argv: []string{"cat", binPath}}); r.Stdout != string(bin) {
		t.Errorf("binary file as seen by cat in the sandbox differs: %d bytes %x", len(r.Stdout), r.Stdout)
	}

	// Overwriting truncates.
	f.writeFile(sb.ID, text, []byte("short"))
	if got := f.readFile(sb.ID, providers.ReadFileRequest{Path: text}); string(got) != "short" {
		t.Errorf("after overwrite with a shorter content: %q, want %q", got, "short")
	}
	empty := workspace + "/empty"
	f.writeFile(sb.ID, empty, nil)
	if got := f.readFile(sb.ID, providers.ReadFileRequest{Path: empty}); len(got) != 0 {
		t.Errorf("empty file reads back %d bytes", len(got))
	}

	script := workspace + "/run.sh"
	if err := f.put(sb.ID, script, 0o755, strings.NewReader("#!/bin/sh\necho ran\n")); err != nil {
		t.Fatalf("WriteFile(%s, mode 0755): %v", script, err)
	}
	if r := f.exec(sb.ID, providers.ExecRequest{Argv: []string{script}}); r.Stdout != "ran\n" {
		t.Errorf("a script written with mode 0755 does not run: exit %d, stdout %q, stderr %s", r.ExitCode, r.Stdout, clip(r.Stderr))
	}
	if out := f.sh(sb.ID, "stat -c %a "+script+" "+empty); out != "755\n644\n" {
		t.Errorf("modes of files written with 0755 and 0 (= 0644): %q", out)
	}
}

func caseFilesOffsetLimit(t T, p providers.Provider) {
	f := newFix(t, p)
	sb := f.sandbox()
	data, err := io.ReadAll(newPayload(2, 1000))
	if err != nil {
		t.Fatalf("payload: %v", err)
	}
	file := workspace + "/ranges.bin"
	f.writeFile(sb.ID, file, data)
	for _, c := range []struct {
		off, limit int64
		want       []byte
	}{
		{0, 0, data},
		{0, -1, data},
		{100, 50, data[100:150]},
		{500, 0, data[500:]},
		{990, 50, data[990:]},
		{999, 1, data[999:]},
		{1000, 10, nil},
		{0, 1000, data},
		{0, 5000, data},
	} {
		got := f.readFile(sb.ID, providers.ReadFileRequest{Path: file, Offset: c.off, Limit: c.limit})
		if !bytes.Equal(got, c.want) {
			t.Errorf("offset %d limit %d: got %d bytes, want %d (equal: %v)", c.off, c.limit, len(got), len(c.want), bytes.Equal(got, c.want))
		}
	}
}

func caseFilesNotFound(t T, p providers.Provider) {
	f := newFix(t, p)
	sb := f.sandbox()
	for _, path := range []string{workspace + "/missing.txt", workspace + "/no/such/dir/file"} {
		_, err := p.ReadFile(f.ctx, sb.ID, providers.ReadFileRequest{Path: path}, io.Discard)
		f.wantCode("ReadFile of missing "+path, err, providers.NotFound)
	}
	_, err := p.ListFiles(f.ctx, sb.ID, workspace+"/no/such/dir")
	f.wantCode("ListFiles of a missing directory", err, providers.NotFound)
}

func caseFilesInvalidPath(t T, p providers.Provider) {
	f := newFix(t, p)
	sb := f.sandbox()
	_, err := p.ReadFile(f.ctx, sb.ID, providers.ReadFileRequest{Path: workspace + "/x", Offset: -1}, io.Discard)
	f.wantCode("ReadFile with a negative offset", err, providers.InvalidArgument)
	for _, path := range []string{"", "relative.txt", "./x", "..", "/workspace/../etc/passwd", "/workspace/a/../../b", "/workspace/.."} {
		_, err := p.ReadFile(f.ctx, sb.ID, providers.ReadFileRequest{Path: path}, io.Discard)
		f.wantCode(fmt.Sprintf("ReadFile(%q)", path), err, providers.InvalidArgument)
		err = p.WriteFile(f.ctx, sb.ID, providers.WriteFileRequest{Path: path, Content: strings.NewReader("x")})
		f.wantCode(fmt.Sprintf("WriteFile(%q)", path), err, providers.InvalidArgument)
		_, err = p.ListFiles(f.ctx, sb.ID, path)
		f.wantCode(fmt.Sprintf("ListFiles(%q)", path), err, providers.InvalidArgument)
	}
}

func caseFilesList(t T, p providers.Provider) {
	f := newFix(t, p)
	sb := f.sandbox()
	dir := workspace + "/list"
	f.writeFile(sb.ID, dir+"/a.txt", []byte("abc"))
	f.writeFile(sb.ID, dir+"/.hidden", []byte("h"))
	f.writeFile(sb.ID, dir+"/sub/c.txt", []byte("c"))
	f.sh(sb.ID, "mkdir -p "+dir+"/empty && head -c 4096 /dev/zero > "+dir+"/b.bin")

	entries, err := p.ListFiles(f.ctx, sb.ID, dir)
	if err != nil {
		t.Fatalf("ListFiles(%s): %v", dir, err)
	}
	want := map[string]struct {
		size  int64
		isDir bool
	}{".hidden": {1, false}, "a.txt": {3, false}, "b.bin": {4096, false}, "empty": {0, true}, "sub": {0, true}}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name)
		w, ok := want[e.Name]
		if !ok {
			continue
		}
		if e.IsDir != w.isDir {
			t.Errorf("%s: IsDir %v, want %v", e.Name, e.IsDir, w.isDir)
		}
		if !w.isDir && e.Size != w.size {
			t.Errorf("%s: Size %d, want %d", e.Name, e.Size, w.size)
		}
		if e.Path != dir+"/"+e.Name {
			t.Errorf("%s: Path %q, want %q", e.Name, e.Path, dir+"/"+e.Name)
		}
		if e.ModTime.IsZero() {
			t.Errorf("%s: ModTime not set", e.Name)
		}
		if e.Mode&0o777 == 0 {
			t.Errorf("%s: Mode %o has no permission bits", e.Name, e.Mode)
		}
	}
	slices.Sort(names)
	if wantNames := []string{".hidden", "a.txt", "b.bin", "empty", "sub"}; !slices.Equal(names, wantNames) {
		t.Errorf("ListFiles(%s) names %q, want %q", dir, names, wantNames)
	}
	if entries, err := p.ListFiles(f.ctx, sb.ID, dir+"/empty"); err != nil || len(entries) != 0 {
		t.Errorf("ListFiles of an empty directory: %d entries, error %v", len(entries), err)
	}
}

func caseFilesLarge(t T, p providers.Provider) {
	f := newFix(t, p)
	sb := f.sandbox()
	const size = 50 << 20
	file := workspace + "/large.bin"
	// Streamed both ways: the suite never holds the content, only hashes.
	in := newPayload(3, size)
	if err := f.put(sb.ID, file, 0, in); err != nil {
		t.Fatalf("WriteFile of %d bytes: %v", size, err)
	}
	out := newHashWriter()
	n, err := f.get(sb.ID, providers.ReadFileRequest{Path: file}, out)
	if err != nil {
		t.Fatalf("ReadFile of %d bytes: %v", size, err)
	}
	if n != size || out.n != size {
		t.Errorf("ReadFile returned n=%d and wrote %d bytes, want %d", n, out.n, size)
	}
	if out.sum() != in.sum() {
		t.Errorf("content read back differs from content written")
	}
	r := f.exec(sb.ID, providers.ExecRequest{Shell: "wc -c < " + file + "; if command -v sha256sum >/dev/null; then sha256sum " + file + "; fi"})
	lines := strings.Fields(r.Stdout)
	if len(lines) == 0 || lines[0] != strconv.Itoa(size) {
		t.Errorf("inside the sandbox the file has %q bytes, want %d", r.Stdout, size)
	}
	if sum := in.sum(); len(lines) > 1 && lines[1] != hex.EncodeToString(sum[:]) {
		t.Errorf("inside the sandbox the file hashes to %s, want %x", lines[1], sum)
	}
}

func caseFilesWrongType(t T, p providers.Provider) {
	f := newFix(t, p)
	sb := f.sandbox()
	dir, file := workspace+"/adir", workspace+"/afile"
	f.writeFile(sb.ID, dir+"/inside", []byte("x"))
	f.writeFile(sb.ID, file, []byte("x"))
	_, err := p.ReadFile(f.ctx, sb.ID, providers.ReadFileRequest{Path: dir}, io.Discard)
	f.wantCode("ReadFile of a directory", err, providers.FailedPrecondition)
	_, err = p.ListFiles(f.ctx, sb.ID, file)
	f.wantCode("ListFiles of a file", err, providers.FailedPrecondition)
	err = p.WriteFile(f.ctx, sb.ID, providers.WriteFileRequest{Path: dir, Content: strings.NewReader("x")})
	f.wantCode("WriteFile onto a directory", err, providers.FailedPrecondition)
	if got := f.readFile(sb.ID, providers.ReadFileRequest{Path: dir + "/inside"}); string(got) != "x" {
		t.Errorf("a refused write onto a directory changed what is inside it: %q", got)
	}
}

// failingReader yields n bytes, then fails.
type failingReader struct{ n int }

var errBrokenContent = errors.New("conformance: content source broke")

func (r *failingReader) Read(b []byte) (int, error) {
	if r.n == 0 {
		return 0, errBrokenContent
	}
	k := min(len(b), r.n)
	for i := range k {
		b[i] = 'y'
	}
	r.n -= k
	return k, nil
}

func caseFilesFailedWrite(t T, p providers.Provider) {
	f := newFix(t, p)
	sb := f.sandbox()
	kept, fresh := workspace+"/kept.txt", workspace+"/fresh.txt"
	f.writeFile(sb.ID, kept, []byte("old content"))
	// Enough bytes to cross the boundary in several chunks before failing.
	for _, path := range []string{kept, fresh} {
		err := p.WriteFile(f.ctx, sb.ID, providers.WriteFileRequest{Path: path, Content: &failingReader{n: 3 << 20}})
		if err == nil {
			t.Errorf("WriteFile(%s) whose content failed midway succeeded", path)
		}
	}
	if got := f.readFile(sb.ID, providers.ReadFileRequest{Path: kept}); string(got) != "old content" {
		t.Errorf("a failed write replaced an existing file: it now has %d bytes", len(got))
	}
	_, err := p.ReadFile(f.ctx, sb.ID, providers.ReadFileRequest{Path: fresh}, io.Discard)
	f.wantCode("ReadFile of a file whose only write failed midway", err, providers.NotFound)
}
