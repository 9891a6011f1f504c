package local

import (
	"bytes"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/sandstep/sandstep/providers"
)

// The agent in the create and exec benchmarks is the dedicated agent
// (cmd/sandstep-local-agent, built once), as the plugin runs it; elsewhere
// it is the test binary. Run them with CGO_ENABLED=0 for a static binary,
// as the plugin is built, or the dynamic loader's work is counted in every
// exec.

// BenchmarkCreateToFirstExec creates a sandbox, runs `true` in it and
// terminates it: ms-to-first-exec-p50 is from calling Create to the end of
// the first exec (DESIGN budget: 50 ms). Each iteration also starts a bare
// bubblewrap sandbox running /bin/true (bwrap-p50), the floor of any
// sandbox start on this machine: x-bwrap is the ratio of the two medians,
// measured under the same load.
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
	useDedicatedAgent(b)
	for _, c := range specs {
		b.Run(c.name, func(b *testing.B) { benchCreateToFirstExec(b, newEnv(b, nil), c.spec) })
	}
}

func benchCreateToFirstExec(b *testing.B, e *testEnv, spec providers.CreateSpec) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		b.Fatal(err)
	}
	var firsts, bare []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := exec.Command(bwrap, "--unshare-all", "--ro-bind", "/", "/", "/bin/true").Run(); err != nil {
			b.Fatalf("bare bwrap: %v", err)
		}
		bare = append(bare, time.Since(start))

		start = time.Now()
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
	reportVersus(b, "to-first-exec", firsts, "bwrap", bare)
}

// BenchmarkExecTrue is the cost of one exec of `true` in a running sandbox,
// started by the agent itself (agent) or under a shim (shim, the path of
// hosts without cgroups). Each iteration also forks and executes /bin/true
// from the benchmark process (fork-exec-p50), the floor of starting any
// command: x-fork-exec is the ratio of the two medians.
func BenchmarkExecTrue(b *testing.B) {
	useDedicatedAgent(b)
	for _, shim := range []bool{false, true} {
		name := "agent"
		if shim {
			name = "shim"
		}
		b.Run(name, func(b *testing.B) {
			e := newEnv(b, nil)
			e.p.noExecGroups = shim
			sb := e.create(providers.CreateSpec{})
			var execs, bare []time.Duration
			for b.Loop() {
				start := time.Now()
				if err := forkExecTrue(); err != nil {
					b.Fatal(err)
				}
				bare = append(bare, time.Since(start))
				start = time.Now()
				if r, err := e.p.Exec(e.ctx, sb.ID, providers.ExecRequest{Argv: []string{"true"}}); err != nil || r.ExitCode != 0 {
					b.Fatalf("exec: %+v, %v", r, err)
				}
				execs = append(execs, time.Since(start))
			}
			reportVersus(b, "exec", execs, "fork-exec", bare)
		})
	}
}

// forkExecTrue starts /bin/true and waits for it, with nothing around it.
func forkExecTrue() error {
	pid, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{Files: []uintptr{0, 1, 2}})
	if err != nil {
		return err
	}
	var ws syscall.WaitStatus
	_, err = syscall.Wait4(pid, &ws, 0, nil)
	return err
}

// reportVersus reports the median and 90th percentile of ours, the median
// of the baseline measured alongside, and their ratio.
func reportVersus(b *testing.B, name string, ours []time.Duration, base string, baseline []time.Duration) {
	if len(ours) == 0 || len(baseline) == 0 {
		return
	}
	slices.Sort(ours)
	slices.Sort(baseline)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(ours[len(ours)/2]), name+"-ms-p50")
	b.ReportMetric(ms(ours[len(ours)*9/10]), name+"-ms-p90")
	b.ReportMetric(ms(baseline[len(baseline)/2]), base+"-ms-p50")
	b.ReportMetric(float64(ours[len(ours)/2])/float64(baseline[len(baseline)/2]), "x-"+base)
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
