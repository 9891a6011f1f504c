package sandy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/testkit/fakesandy"
	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/plugin"
)

func benchSandbox(b *testing.B) (*fakesandy.Running, *plugin.Client, string) {
	b.Helper()
	f, _ := startFake(b, fakesandy.Options{})
	p := startPlugin(b, settingsFor(f.URL, nil), testKey, nil)
	sb, err := p.Create(context.Background(), providers.CreateSpec{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Terminate(context.Background(), sb.ID) })
	return f, p, sb.ID
}

// BenchmarkExec is one short command through the plugin, the provider's
// background runner and its report: the cost of an Exec against the fake.
func BenchmarkExec(b *testing.B) {
	_, p, id := benchSandbox(b)
	var out bytes.Buffer
	for b.Loop() {
		out.Reset()
		res, err := p.Exec(context.Background(), id, providers.ExecRequest{Argv: []string{"echo", "hi"}, Stdout: &out, Timeout: time.Minute})
		if err != nil || res.ExitCode != 0 || out.String() != "hi\n" {
			b.Fatalf("exec: %v, %+v, %q", err, res, out.String())
		}
	}
}

// BenchmarkRawSandyExec is the same command as one bare call to the fake's
// exec endpoint: BenchmarkExec minus this is the provider's overhead.
func BenchmarkRawSandyExec(b *testing.B) {
	f, _, id := benchSandbox(b)
	body, _ := json.Marshal(map[string]any{"command": "echo hi", "timeoutMs": 60000})
	for b.Loop() {
		req, _ := http.NewRequest("POST", f.URL+"/api/sandboxes/"+id+"/exec", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

const benchFileSize = 8 << 20

func benchContent(binary bool) []byte {
	if binary {
		b, _ := io.ReadAll(payload(1, benchFileSize))
		return b
	}
	const line = "a line of text for the benchmark\n"
	return []byte(strings.Repeat(line, benchFileSize/len(line)+1)[:benchFileSize])
}

// BenchmarkWriteFile measures upload throughput: content larger than
// write_chunk_bytes, text or not, is staged as base64 text through
// files/write and decoded by exec, a chunk at a time.
func BenchmarkWriteFile(b *testing.B) {
	for _, kind := range []string{"binary", "text"} {
		b.Run(kind, func(b *testing.B) {
			_, p, id := benchSandbox(b)
			data := benchContent(kind == "binary")
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if err := p.WriteFile(context.Background(), id, providers.WriteFileRequest{Path: "/workspace/bench", Content: bytes.NewReader(data)}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReadFile measures download throughput: binary content comes in
// read_chunk_bytes chunks through exec, text through files/read.
func BenchmarkReadFile(b *testing.B) {
	for _, kind := range []string{"binary", "text"} {
		b.Run(kind, func(b *testing.B) {
			_, p, id := benchSandbox(b)
			data := benchContent(kind == "binary")
			if err := p.WriteFile(context.Background(), id, providers.WriteFileRequest{Path: "/workspace/bench", Content: bytes.NewReader(data)}); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				n, err := p.ReadFile(context.Background(), id, providers.ReadFileRequest{Path: "/workspace/bench"}, io.Discard)
				if err != nil || n != int64(len(data)) {
					b.Fatalf("read %d bytes: %v", n, err)
				}
			}
		})
	}
}

// BenchmarkCreate is create, warmup and terminate.
func BenchmarkCreate(b *testing.B) {
	f, _ := startFake(b, fakesandy.Options{})
	p := startPlugin(b, settingsFor(f.URL, nil), testKey, nil)
	for b.Loop() {
		sb, err := p.Create(context.Background(), providers.CreateSpec{})
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Terminate(context.Background(), sb.ID); err != nil {
			b.Fatal(err)
		}
	}
}
