package plugin_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/plugin"
	pluginmtls "github.com/sandstep/sandstep/providers/plugin/mtls"
	"github.com/sandstep/sandstep/providers/providertest"
)

func benchOptions() plugin.Options {
	return plugin.Options{Dir: binDir, Name: "test", Logger: slog.New(slog.DiscardHandler)}
}

// BenchmarkPluginStart is start + handshake + Configure (budget: 15 ms).
// Killing the plugin is not timed.
func BenchmarkPluginStart(b *testing.B) {
	for _, mtls := range []bool{false, true} {
		name := "plain"
		if mtls {
			name = "autoMTLS"
		}
		b.Run(name, func(b *testing.B) {
			opts := benchOptions()
			if mtls {
				opts.MTLS = pluginmtls.OneTime
			}
			for b.Loop() {
				c, err := plugin.Start(context.Background(), opts)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				c.Close()
				b.StartTimer()
			}
		})
	}
}

func benchGet(b *testing.B, p providers.Provider) {
	ctx := context.Background()
	sb, err := p.Create(ctx, providers.CreateSpec{Labels: map[string]string{providers.LabelJob: "bench"}})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := p.Get(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCallInProcess and BenchmarkCallOverPlugin differ by the plugin
// boundary only (budget: 200 us per call).
func BenchmarkCallInProcess(b *testing.B) {
	benchGet(b, providertest.New())
}

func BenchmarkCallOverPlugin(b *testing.B) {
	c := start(b, benchOptions())
	benchGet(b, c)
}

// BenchmarkExecOverPlugin is one short command through the Exec stream.
func BenchmarkExecOverPlugin(b *testing.B) {
	c := start(b, benchOptions())
	ctx := context.Background()
	sb, err := c.Create(ctx, providers.CreateSpec{})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := c.Exec(ctx, sb.ID, providers.ExecRequest{Argv: []string{"echo", "hi"}, Stdout: io.Discard}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFileThroughput writes and reads back 8 MB through the plugin.
func BenchmarkFileThroughput(b *testing.B) {
	c := start(b, benchOptions())
	ctx := context.Background()
	sb, err := c.Create(ctx, providers.CreateSpec{})
	if err != nil {
		b.Fatal(err)
	}
	data := randomBytes(b, 8<<20)
	var out bytes.Buffer
	out.Grow(len(data))
	b.SetBytes(int64(2 * len(data)))
	for b.Loop() {
		if err := c.WriteFile(ctx, sb.ID, providers.WriteFileRequest{Path: "/bench.bin", Content: bytes.NewReader(data)}); err != nil {
			b.Fatal(err)
		}
		out.Reset()
		if _, err := c.ReadFile(ctx, sb.ID, providers.ReadFileRequest{Path: "/bench.bin"}, &out); err != nil {
			b.Fatal(err)
		}
	}
	if !bytes.Equal(out.Bytes(), data) {
		b.Fatal("read back different bytes")
	}
}
