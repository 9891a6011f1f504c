package local

import (
	"bytes"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/providers"
)

func TestFileRoundTrip(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(providers.CreateSpec{})

	text := []byte("héllo\nwörld\n")
	e.write(sb.ID, "/workspace/a/b/text.txt", text)
	if got := e.read(sb.ID, providers.ReadFileRequest{Path: "/workspace/a/b/text.txt"}); !bytes.Equal(got, text) {
		t.Errorf("text reads back as %q", got)
	}
	if out := e.sh(sb.ID, "cat /workspace/a/b/text.txt; stat -c '%a %u' /workspace/a/b/text.txt"); out != string(text)+"644 1000\n" {
		t.Errorf("the sandbox sees %q", out)
	}

	bin := make([]byte, 256*4)
	for i := range bin {
		bin[i] = byte(i)
	}
	if err := e.p.WriteFile(e.ctx, sb.ID, providers.WriteFileRequest{Path: "/tmp/bin", Mode: 0o755, Content: bytes.NewReader(bin)}); err != nil {
		t.Fatal(err)
	}
	if got := e.read(sb.ID, providers.ReadFileRequest{Path: "/tmp/bin"}); !bytes.Equal(got, bin) {
		t.Errorf("binary reads back differently (%d bytes)", len(got))
	}
	if out := e.sh(sb.ID, "stat -c %a /tmp/bin"); out != "755\n" {
		t.Errorf("mode %q, want 755", out)
	}
	for _, c := range []struct {
		off, lim int64
		want     []byte
	}{
		{10, 0, bin[10:]},
		{10, 5, bin[10:15]},
		{0, 3, bin[:3]},
		{int64(len(bin)) - 2, 100, bin[len(bin)-2:]},
		{int64(len(bin)) + 10, 0, nil},
	} {
		got := e.read(sb.ID, providers.ReadFileRequest{Path: "/tmp/bin", Offset: c.off, Limit: c.lim})
		if !bytes.Equal(got, c.want) {
			t.Errorf("offset %d limit %d: %x, want %x", c.off, c.lim, got, c.want)
		}
	}

	// Overwriting replaces; an empty file is a file.
	e.write(sb.ID, "/workspace/a/b/text.txt", []byte("short"))
	if got := e.read(sb.ID, providers.ReadFileRequest{Path: "/workspace/a/b/text.txt"}); string(got) != "short" {
		t.Errorf("after overwrite %q", got)
	}
	e.write(sb.ID, "/workspace/empty", nil)
	if got := e.read(sb.ID, providers.ReadFileRequest{Path: "/workspace/empty"}); len(got) != 0 {
		t.Errorf("empty file reads %q", got)
	}

	infos, err := e.p.ListFiles(e.ctx, sb.ID, "/workspace/a/b")
	if err != nil || len(infos) != 1 || infos[0].Name != "text.txt" || infos[0].Path != "/workspace/a/b/text.txt" || infos[0].Size != 5 || infos[0].IsDir {
		t.Errorf("ListFiles = %+v, %v", infos, err)
	}
	infos, err = e.p.ListFiles(e.ctx, sb.ID, "/workspace")
	if err != nil || len(infos) != 2 {
		t.Errorf("ListFiles(/workspace) = %+v, %v", infos, err)
	}
	for _, fi := range infos {
		if fi.Name == "a" && !fi.IsDir {
			t.Errorf("a is listed as a file")
		}
	}
}

func TestFileLarge(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(providers.CreateSpec{})
	const size = 50 << 20
	want := sha256.New()
	if err := e.p.WriteFile(e.ctx, sb.ID, providers.WriteFileRequest{
		Path:    "/workspace/big.bin",
		Content: io.TeeReader(io.LimitReader(&pattern{}, size), want),
	}); err != nil {
		t.Fatalf("WriteFile 50 MiB: %v", err)
	}
	got := sha256.New()
	n, err := e.p.ReadFile(e.ctx, sb.ID, providers.ReadFileRequest{Path: "/workspace/big.bin"}, got)
	if err != nil || n != size {
		t.Fatalf("ReadFile 50 MiB: %d bytes, %v", n, err)
	}
	if !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Errorf("50 MiB file reads back with a different hash")
	}
	if out := e.sh(sb.ID, "stat -c %s /workspace/big.bin"); out != "52428800\n" {
		t.Errorf("size in the sandbox %q", out)
	}
	tail := e.read(sb.ID, providers.ReadFileRequest{Path: "/workspace/big.bin", Offset: size - 1000})
	var p pattern
	full := make([]byte, size)
	io.ReadFull(&p, full)
	if !bytes.Equal(tail, full[size-1000:]) {
		t.Errorf("the last 1000 bytes differ")
	}
}

// pattern is an endless deterministic byte stream that does not repeat
// with any power-of-two period a chunking bug would hide in.
type pattern struct{ i uint32 }

func (p *pattern) Read(b []byte) (int, error) {
	for k := range b {
		p.i = p.i*1664525 + 1013904223
		b[k] = byte(p.i >> 24)
	}
	return len(b), nil
}

func TestFileErrors(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(providers.CreateSpec{})
	var sink bytes.Buffer
	_, err := e.p.ReadFile(e.ctx, sb.ID, providers.ReadFileRequest{Path: "/workspace/missing"}, &sink)
	wantCode(t, "ReadFile of a missing file", err, providers.NotFound)
	_, err = e.p.ListFiles(e.ctx, sb.ID, "/workspace/missing")
	wantCode(t, "ListFiles of a missing dir", err, providers.NotFound)
	_, err = e.p.ReadFile(e.ctx, sb.ID, providers.ReadFileRequest{Path: "/workspace"}, &sink)
	wantCode(t, "ReadFile of a directory", err, providers.FailedPrecondition)
	e.write(sb.ID, "/workspace/d/inside", []byte("x"))
	err = e.p.WriteFile(e.ctx, sb.ID, providers.WriteFileRequest{Path: "/workspace/d", Content: strings.NewReader("x")})
	wantCode(t, "WriteFile onto a directory", err, providers.FailedPrecondition)
	_, err = e.p.ListFiles(e.ctx, sb.ID, "/workspace/d/inside")
	wantCode(t, "ListFiles of a file", err, providers.FailedPrecondition)
	err = e.p.WriteFile(e.ctx, sb.ID, providers.WriteFileRequest{Path: "/workspace/d/inside/x", Content: strings.NewReader("x")})
	wantCode(t, "WriteFile below a file", err, providers.FailedPrecondition)
	for _, p := range []string{"workspace/x", "/workspace/../etc/passwd", "/workspace/./x", "/workspace//x", "/workspace/x/", "", "/.."} {
		_, err := e.p.ReadFile(e.ctx, sb.ID, providers.ReadFileRequest{Path: p}, &sink)
		wantCode(t, "ReadFile("+p+")", err, providers.InvalidArgument)
		err = e.p.WriteFile(e.ctx, sb.ID, providers.WriteFileRequest{Path: p, Content: strings.NewReader("x")})
		wantCode(t, "WriteFile("+p+")", err, providers.InvalidArgument)
		_, err = e.p.ListFiles(e.ctx, sb.ID, p)
		wantCode(t, "ListFiles("+p+")", err, providers.InvalidArgument)
	}
	err = e.p.WriteFile(e.ctx, sb.ID, providers.WriteFileRequest{Path: "/usr/evil", Content: strings.NewReader("x")})
	wantCode(t, "WriteFile into read-only /usr", err, providers.PermissionDenied)
	_, err = e.p.ReadFile(e.ctx, sb.ID, providers.ReadFileRequest{Path: "/workspace/x", Offset: -1}, &sink)
	wantCode(t, "ReadFile with a negative offset", err, providers.InvalidArgument)
	if sink.Len() != 0 {
		t.Errorf("failed reads wrote %q", sink.String())
	}
}

// TestFileSymlinkEscape: symlinks made inside a sandbox resolve inside it;
// the file API cannot be led to host files through them.
func TestFileSymlinkEscape(t *testing.T) {
	e := newEnv(t, nil)
	hostDir := worldReadableDir(t)
	hostFile := filepath.Join(hostDir, "host-secret")
	if err := os.WriteFile(hostFile, []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb := e.create(providers.CreateSpec{})
	e.sh(sb.ID, "ln -s /etc/shadow /workspace/shadow; ln -s "+hostFile+" /workspace/hostfile; ln -s "+hostDir+" /workspace/hostdir; ln -s / /workspace/root")

	var sink bytes.Buffer
	for _, p := range []string{"/workspace/shadow", "/workspace/hostfile", "/workspace/hostdir/host-secret", "/workspace/root" + hostFile, "/etc/shadow", hostFile} {
		_, err := e.p.ReadFile(e.ctx, sb.ID, providers.ReadFileRequest{Path: p}, &sink)
		wantCode(t, "ReadFile("+p+")", err, providers.NotFound)
	}
	if sink.Len() != 0 {
		t.Errorf("reads through symlinks returned %q", sink.String())
	}
	for _, p := range []string{"/workspace/hostfile", "/workspace/hostdir/host-secret", "/workspace/hostdir/new", "/workspace/shadow"} {
		// Whatever the sandbox makes of it, the host must not change.
		_ = e.p.WriteFile(e.ctx, sb.ID, providers.WriteFileRequest{Path: p, Content: strings.NewReader("overwritten")})
	}
	if b, err := os.ReadFile(hostFile); err != nil || string(b) != "host secret" {
		t.Errorf("host file now %q, %v", b, err)
	}
	if names := dirNames(t, hostDir); len(names) != 1 {
		t.Errorf("host dir now holds %v", names)
	}
	if b, err := os.ReadFile("/etc/shadow"); err == nil && strings.Contains(string(b), "overwritten") {
		t.Errorf("/etc/shadow was written")
	}
}
