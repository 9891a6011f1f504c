package conformance_test

import (
	"context"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/sandstep/sandstep/providers"
)

// BenchmarkLocalOverPlugin is the local provider as the server uses it,
// through the plugin's gRPC boundary: an exec of `true` in a running
// sandbox next to a fork and exec of /bin/true here (x-fork-exec), and a
// create up to the end of its first exec next to a bare bubblewrap
// sandbox running /bin/true (x-bwrap). Each pair is measured in the same
// iteration, so the ratio holds on a loaded machine.
func BenchmarkLocalOverPlugin(b *testing.B) {
	p := startLocal(b, nil)
	ctx := context.Background()
	b.Run("exec-true", func(b *testing.B) {
		sb, err := p.Create(ctx, providers.CreateSpec{})
		if err != nil {
			b.Fatal(err)
		}
		defer p.Terminate(ctx, sb.ID)
		var ours, base []time.Duration
		for b.Loop() {
			start := time.Now()
			pid, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{Files: []uintptr{0, 1, 2}})
			if err != nil {
				b.Fatal(err)
			}
			var ws syscall.WaitStatus
			if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
				b.Fatal(err)
			}
			base = append(base, time.Since(start))
			start = time.Now()
			if r, err := p.Exec(ctx, sb.ID, providers.ExecRequest{Argv: []string{"true"}}); err != nil || r.ExitCode != 0 {
				b.Fatalf("exec: %+v, %v", r, err)
			}
			ours = append(ours, time.Since(start))
		}
		versus(b, "exec", ours, "fork-exec", base)
	})
	b.Run("create-to-first-exec", func(b *testing.B) {
		bwrap, err := exec.LookPath("bwrap")
		if err != nil {
			b.Fatal(err)
		}
		var ours, base []time.Duration
		for b.Loop() {
			start := time.Now()
			if err := exec.Command(bwrap, "--unshare-all", "--ro-bind", "/", "/", "/bin/true").Run(); err != nil {
				b.Fatalf("bare bwrap: %v", err)
			}
			base = append(base, time.Since(start))
			start = time.Now()
			sb, err := p.Create(ctx, providers.CreateSpec{})
			if err != nil {
				b.Fatal(err)
			}
			if r, err := p.Exec(ctx, sb.ID, providers.ExecRequest{Argv: []string{"true"}}); err != nil || r.ExitCode != 0 {
				b.Fatalf("exec: %+v, %v", r, err)
			}
			ours = append(ours, time.Since(start))
			b.StopTimer()
			if err := p.Terminate(ctx, sb.ID); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		versus(b, "to-first-exec", ours, "bwrap", base)
	})
}

// versus reports the median of ours and of the baseline measured with it,
// and their ratio.
func versus(b *testing.B, name string, ours []time.Duration, base string, baseline []time.Duration) {
	if len(ours) == 0 {
		return
	}
	slices.Sort(ours)
	slices.Sort(baseline)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(ours[len(ours)/2]), name+"-ms-p50")
	b.ReportMetric(ms(baseline[len(baseline)/2]), base+"-ms-p50")
	b.ReportMetric(float64(ours[len(ours)/2])/float64(baseline[len(baseline)/2]), "x-"+base)
}
