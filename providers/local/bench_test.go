package local

import (
	"bytes"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/sandstep/sandstep/providers"
)

// The agent in these benchmarks is the test binary. Run them with
// CGO_ENABLED=0 for a static binary, as the plugin is built, or the
// dynamic loader's work is counted in every exec.

// BenchmarkCreateToFirstExec creates a sandbox, runs `true` in it and
// terminates it. ms-to-first-exec-p50 is the DESIGN budget (<= 50 ms): from
// calling Create to the end of the first exec.
func BenchmarkCreateToFirstExec(b *testing.B) {
	specs := []struct {
		name string
		spec providers.CreateSpec
	}{
		{"none", providers.CreateSpec{}},
		// With network, the sandbox's way out is set up before the create
		// returns.
		{"all", providers.CreateSpec{Network: providers.NetworkPolicy{Mode: providers.NetworkAll}}},
		// A host-scoped secret adds a CA and its bundle.
		{"all+secret", providers.CreateSpec{Network: providers.NetworkPolicy{Mode: providers.NetworkAll},
			Secrets: []providers.Secret{{Name: "K", Value: "v", Hosts: []string{"api.example.com"}}}}},
	}
	for _, c := range specs {
		b.Run(c.name, func(b *testing.B) { benchCreate(b, c.spec) })
	}
}

func benchCreate(b *testing.B, spec providers.CreateSpec) {
	e := newEnv(b, nil)
	var firsts []time.Duration
	for b.Loop() {
		start := time.Now()
		sb, err := e.p.Create(e.ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		if r, err := e.p.Exec(e.ctx, sb.ID, providers.ExecRequest{Argv: []string{"true"}}); err != nil || r.ExitCode != 0 {
			b.Fatalf("exec: %+v, %v", r, err)
		}
		firsts = append(firsts, time.Since(start))
		if err := e.p.Terminate(e.ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(firsts)
	b.ReportMetric(float64(firsts[len(firsts)/2])/float64(time.Millisecond), "ms-to-first-exec-p50")
	b.ReportMetric(float64(firsts[len(firsts)*9/10])/float64(time.Millisecond), "ms-to-first-exec-p90")
}

// BenchmarkExecTrue is the cost of one exec in a running sandbox.
func BenchmarkExecTrue(b *testing.B) {
	e := newEnv(b, nil)
	sb := e.create(providers.CreateSpec{})
	for b.Loop() {
		if r, err := e.p.Exec(e.ctx, sb.ID, providers.ExecRequest{Argv: []string{"true"}}); err != nil || r.ExitCode != 0 {
			b.Fatalf("exec: %+v, %v", r, err)
		}
	}
}

// BenchmarkFileWriteRead writes a 4 MiB file into a sandbox and reads it
// back; the throughput counts the bytes of one direction.
func BenchmarkFileWriteRead(b *testing.B) {
	e := newEnv(b, nil)
	sb := e.create(providers.CreateSpec{})
	data := make([]byte, 4<<20)
	io.ReadFull(&pattern{}, data)
	b.SetBytes(int64(len(data)))
	var back bytes.Buffer
	for b.Loop() {
		if err := e.p.WriteFile(e.ctx, sb.ID, providers.WriteFileRequest{Path: "/workspace/f", Content: bytes.NewReader(data)}); err != nil {
			b.Fatal(err)
		}
		back.Reset()
		if _, err := e.p.ReadFile(e.ctx, sb.ID, providers.ReadFileRequest{Path: "/workspace/f"}, &back); err != nil {
			b.Fatal(err)
		}
	}
	if !bytes.Equal(back.Bytes(), data) {
		b.Fatal("the file read back differs")
	}
}
