package local

import (
	"bytes"
	"fmt"
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
		b.Run(c.name, func(b *testing.B) { benchCreateToFirstExec(b, newEnv(b, nil), c.spec) })
	}
}

func benchCreateToFirstExec(b *testing.B, e *testEnv, spec providers.CreateSpec) {
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
	benchWriteRead(b, e, e.create(providers.CreateSpec{}).ID)
}

func benchWriteRead(b *testing.B, e *testEnv, id string) {
	data := make([]byte, 4<<20)
	io.ReadFull(&pattern{}, data)
	b.SetBytes(int64(len(data)))
	var back bytes.Buffer
	for b.Loop() {
		if err := e.p.WriteFile(e.ctx, id, providers.WriteFileRequest{Path: "/workspace/f", Content: bytes.NewReader(data)}); err != nil {
			b.Fatal(err)
		}
		back.Reset()
		if _, err := e.p.ReadFile(e.ctx, id, providers.ReadFileRequest{Path: "/workspace/f"}, &back); err != nil {
			b.Fatal(err)
		}
	}
	if !bytes.Equal(back.Bytes(), data) {
		b.Fatal("the file read back differs")
	}
}

// BenchmarkCreateToFirstExecWithVolume is BenchmarkCreateToFirstExec with
// a volume at /workspace: as root an ext4 image attached to a loop device
// and mounted for each sandbox.
func BenchmarkCreateToFirstExecWithVolume(b *testing.B) {
	e := newEnv(b, nil)
	if _, err := e.p.CreateVolume(e.ctx, providers.VolumeSpec{Slug: "bench"}); err != nil {
		b.Fatal(err)
	}
	benchCreateToFirstExec(b, e, providers.CreateSpec{Mounts: []providers.Mount{{Volume: "bench"}}})
}

// BenchmarkCreateVolume is what a volume costs to make: as root mkfs.ext4
// of a sparse 1 GiB image.
func BenchmarkCreateVolume(b *testing.B) {
	e := newEnv(b, nil)
	i := 0
	for b.Loop() {
		i++
		if _, err := e.p.CreateVolume(e.ctx, providers.VolumeSpec{Slug: fmt.Sprintf("v%d", i), CapacityMB: 1024}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVolumeWrite writes 256 MiB into a volume from inside a sandbox
// and syncs it, on an ext4 image volume (as root) and on a directory
// volume (the provider without images, as before issue 10).
func BenchmarkVolumeWrite(b *testing.B) {
	for _, kind := range []string{"image", "directory"} {
		b.Run(kind, func(b *testing.B) {
			if kind == "directory" {
				saved := loopControl
				loopControl = "/nonexistent/loop-control"
				defer func() { loopControl = saved }()
			}
			e := newEnv(b, func(ls *Settings) {
				ls.UnenforcedLimits = []string{providers.LimitVolumeCapacity}
			})
			if _, err := e.p.CreateVolume(e.ctx, providers.VolumeSpec{Slug: "bench", CapacityMB: 1024}); err != nil {
				b.Fatal(err)
			}
			sb := e.create(providers.CreateSpec{Mounts: []providers.Mount{{Volume: "bench"}}, Resources: providers.Resources{MemoryMB: 1024}})
			b.SetBytes(256 << 20)
			for b.Loop() {
				e.sh(sb.ID, "dd if=/dev/zero of=/workspace/f bs=1M count=256 conv=fsync status=none && rm /workspace/f")
			}
		})
	}
}

// BenchmarkFileWriteReadVolume is BenchmarkFileWriteRead into an image
// volume rather than the tmpfs /workspace.
func BenchmarkFileWriteReadVolume(b *testing.B) {
	e := newEnv(b, nil)
	if _, err := e.p.CreateVolume(e.ctx, providers.VolumeSpec{Slug: "bench"}); err != nil {
		b.Fatal(err)
	}
	benchWriteRead(b, e, e.create(providers.CreateSpec{Mounts: []providers.Mount{{Volume: "bench"}}}).ID)
}
