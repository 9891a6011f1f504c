package conformance

import (
	"strings"
	"time"

	"github.com/sandstep/sandstep/providers"
)

func enforces(limit string) func(providers.Capabilities) bool {
	return func(c providers.Capabilities) bool { return c.Limits.Enforces(limit) }
}

// caseLimitsMemory: a command that holds twice the sandbox's memory is
// killed, the exec says OOM, and the sandbox runs the next command.
func caseLimitsMemory(t T, p providers.Provider) {
	f := newFix(t, p)
	sb := f.create(providers.CreateSpec{Resources: providers.Resources{MemoryMB: 128}})
	// tail keeps the last 256 MB of its input in memory; a shell reports
	// it killed with status 137.
	r := f.exec(sb.ID, providers.ExecRequest{Shell: "head -c 268435456 /dev/zero | tail -c 268435456 >/dev/null && echo survived", Timeout: f.e.scale(2 * time.Minute)})
	if !r.OOM || r.ExitCode == 0 || strings.Contains(r.Stdout, "survived") {
		t.Errorf("holding 256 MB in a 128 MiB sandbox: exit %d, signal %q, oom %v, stdout %q; want an OOM kill", r.ExitCode, r.Signal, r.OOM, r.Stdout)
	}
	if out := f.sh(sb.ID, "echo alive"); out != "alive\n" {
		t.Errorf("the sandbox after the OOM kill answers %q", out)
	}
	if r := f.exec(sb.ID, providers.ExecRequest{Shell: "exit 137"}); r.OOM {
		t.Errorf("exit 137 without an OOM kill reports OOM")
	}
}

// caseLimitsVolumeCapacity: writing past a volume's capacity fails with
// ENOSPC, and what fits stays.
func caseLimitsVolumeCapacity(t T, p providers.Provider) {
	f := newFix(t, p)
	slug := f.unique("v")
	v, err := p.CreateVolume(f.ctx, providers.VolumeSpec{Slug: slug, Labels: f.labels(), CapacityMB: 32})
	if err != nil {
		t.Fatalf("CreateVolume: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := f.cleanupCtx()
		defer cancel()
		if err := p.DeleteVolume(ctx, slug); err != nil {
			t.Errorf("cleanup: DeleteVolume(%s): %v", slug, err)
		}
	})
	if v.CapacityMB != 32 {
		t.Errorf("CreateVolume: capacity %d MiB, want 32", v.CapacityMB)
	}
	sb := f.create(providers.CreateSpec{Mounts: []providers.Mount{{Volume: slug}}})
	f.sh(sb.ID, "echo kept > "+workspace+"/small")
	r := f.exec(sb.ID, providers.ExecRequest{Shell: "head -c 67108864 /dev/zero > " + workspace + "/big"})
	if r.ExitCode == 0 || !strings.Contains(r.Stderr, "No space left on device") {
		t.Errorf("writing 64 MiB into a 32 MiB volume: exit %d, stderr %q; want ENOSPC", r.ExitCode, clip(r.Stderr))
	}
	if out := f.sh(sb.ID, "rm "+workspace+"/big; cat "+workspace+"/small"); out != "kept\n" {
		t.Errorf("the volume after ENOSPC: %q", out)
	}
	f.terminateNow(sb.ID)
}
