package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/testkit/testhost"
	"github.com/sandstep/sandstep/providers"
)

// requireEnforced fails (never skips) when the provider does not enforce
// limit here: a host the tests run on must have the mechanisms (root,
// cgroups, loop devices), as CI's has.
func requireEnforced(t *testing.T, e *testEnv, limits ...string) {
	t.Helper()
	info, err := e.p.Info(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range limits {
		if !info.Capabilities.Limits.Enforces(l) {
			t.Fatalf("the provider does not enforce %s here: %+v", l, info.Capabilities.Limits)
		}
	}
}

// recordOf is a sandbox's record as the provider keeps it.
func recordOf(t *testing.T, e *testEnv, id string) sandboxRecord {
	t.Helper()
	sb, ok := e.p.lookup(e.p.s, id)
	if !ok {
		t.Fatalf("no record of %s", id)
	}
	return sb.rec
}

// sampler calls f every interval until stop, at most until limit.
func sampler(interval, limit time.Duration, f func()) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		deadline := time.After(limit)
		for {
			f()
			select {
			case <-done:
				return
			case <-deadline:
				return
			case <-time.After(interval):
			}
		}
	}()
	return func() { close(done); <-finished }
}

// memoryPeak is the most memory the group has held.
func memoryPeak(t *testing.T, cg *sandboxCgroup) int64 {
	t.Helper()
	file := "memory.peak"
	if cg.Version == 1 {
		file = "memory.max_usage_in_bytes"
	}
	b, err := os.ReadFile(filepath.Join(cg.Memory, file))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func readInt(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return -1
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A command that allocates far past its sandbox's memory is killed inside
// the sandbox, the exec says so, the host loses no more memory than the
// limit, and the sandbox, another sandbox and the host carry on.
func TestLimitsMemoryOOMKillsInsideTheSandbox(t *testing.T) {
	execPaths(t, testLimitsMemoryOOMKillsInsideTheSandbox)
}

func testLimitsMemoryOOMKillsInsideTheSandbox(t *testing.T, shim bool) {
	e := newEnv(t, nil)
	e.p.noExecGroups = shim
	requireEnforced(t, e, providers.LimitMemory)
	const limitMB = 128
	other := e.create(providers.CreateSpec{})
	e.sh(other.ID, "sleep 120 >/dev/null 2>&1 &")
	sb := e.create(providers.CreateSpec{Resources: providers.Resources{MemoryMB: limitMB}})
	cg := recordOf(t, e, sb.ID).Cgroup

	// Twice the limit first: killed and reported.
	r := e.exec(sb.ID, providers.ExecRequest{Argv: []string{"python3", "-c", fmt.Sprintf("b = b'x' * (%d << 20)\nprint('survived')", 2*limitMB)}, Timeout: time.Minute})
	if !r.OOM || r.Signal != "SIGKILL" || strings.Contains(r.stdout, "survived") {
		t.Fatalf("allocating twice the limit: %+v stdout %q stderr %q; want an OOM kill", r.ExecResult, r.stdout, r.stderr)
	}

	// Then 2 GiB in 64 MiB steps, which an unlimited sandbox would take
	// from the host, while the host's available memory is watched. The
	// machine is shared: the bound leaves room for others' noise, far
	// below what the allocation would take.
	watch, err := testhost.WatchMemory(5*time.Millisecond, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	r = e.exec(sb.ID, providers.ExecRequest{Argv: []string{"python3", "-c", "chunks = []\nfor i in range(32):\n    chunks.append(b'x' * (64 << 20))\nprint('survived')"}, Timeout: time.Minute})
	drop, err := watch.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if !r.OOM || strings.Contains(r.stdout, "survived") {
		t.Fatalf("allocating 2 GiB: %+v stdout %q stderr %q; want an OOM kill", r.ExecResult, r.stdout, r.stderr)
	}
	t.Logf("host MemAvailable dropped by %d MiB at most (limit %d MiB)", drop>>20, limitMB)
	if drop > (limitMB+512)<<20 {
		t.Errorf("host MemAvailable dropped by %d MiB with a %d MiB sandbox", drop>>20, limitMB)
	}
	if peak := memoryPeak(t, cg); peak > limitMB<<20 {
		t.Errorf("the sandbox's memory peaked at %d bytes, above its %d MiB limit", peak, limitMB)
	}

	// The agent survived: the sandbox runs the next command, which ends
	// normally and is no OOM.
	if r := e.exec(sb.ID, providers.ExecRequest{Shell: "echo alive"}); r.stdout != "alive\n" || r.OOM {
		t.Errorf("after the OOM kill: %+v %q", r.ExecResult, r.stdout)
	}
	if out := e.sh(other.ID, "pgrep -c sleep"); strings.TrimSpace(out) != "1" {
		t.Errorf("the other sandbox's background process: %q", out)
	}
	// An exec that fails for another reason is no OOM, even right after
	// one.
	if r := e.exec(sb.ID, providers.ExecRequest{Shell: "kill -9 $$"}); r.OOM || r.Signal != "SIGKILL" {
		t.Errorf("a command killed by SIGKILL from inside: %+v; want no OOM", r.ExecResult)
	}
}

// Tmpfs pages are memory: a sandbox cannot hold more in its scratch than
// its memory limit.
func TestLimitsScratchCountsAgainstMemory(t *testing.T) {
	e := newEnv(t, nil)
	requireEnforced(t, e, providers.LimitMemory)
	sb := e.create(providers.CreateSpec{Resources: providers.Resources{MemoryMB: 96}})
	// /tmp holds 512 MiB; the memory limit stops the writer first.
	r := e.exec(sb.ID, providers.ExecRequest{Shell: "head -c 300000000 /dev/zero > /tmp/fill", Timeout: time.Minute})
	if r.ExitCode == 0 || !r.OOM {
		t.Fatalf("writing 300 MB into /tmp of a 96 MiB sandbox: %+v %q; want an OOM kill", r.ExecResult, r.stderr)
	}
	if peak := memoryPeak(t, recordOf(t, e, sb.ID).Cgroup); peak > 96<<20 {
		t.Errorf("memory peaked at %d bytes", peak)
	}
}

// The agent is never the OOM killer's choice: every command asks to go
// first.
func TestLimitsCommandsGoFirstToTheOOMKiller(t *testing.T) {
	execPaths(t, testLimitsCommandsGoFirstToTheOOMKiller)
}

func testLimitsCommandsGoFirstToTheOOMKiller(t *testing.T, shim bool) {
	e := newEnv(t, nil)
	e.p.noExecGroups = shim
	sb := e.create(providers.CreateSpec{})
	out := lines(e.sh(sb.ID, "cat /proc/self/oom_score_adj /proc/1/oom_score_adj; sh -c 'cat /proc/self/oom_score_adj'"))
	if len(out) != 3 || out[0] != "1000" || out[2] != "1000" {
		t.Fatalf("oom_score_adj of a command, the agent, a child: %q; want commands at 1000", out)
	}
	if agent, _ := strconv.Atoi(out[1]); agent >= 1000 {
		t.Errorf("the agent's oom_score_adj is %d", agent)
	}
}

// Writing past a volume's capacity fails with ENOSPC, through a command
// and through the file API; the host's disk holds no more than the
// capacity, and the file system stays whole.
func TestLimitsVolumeCapacity(t *testing.T) {
	e := newEnv(t, nil)
	requireEnforced(t, e, providers.LimitVolumeCapacity)
	v, err := e.p.CreateVolume(e.ctx, providers.VolumeSpec{Slug: "small", CapacityMB: 32})
	if err != nil || v.CapacityMB != 32 || v.SizeBytes != 0 {
		t.Fatalf("CreateVolume = %+v, %v", v, err)
	}
	sb := e.create(providers.CreateSpec{Mounts: []providers.Mount{{Volume: "small"}}})
	e.write(sb.ID, "/workspace/keep", []byte("kept"))
	r := e.exec(sb.ID, providers.ExecRequest{Shell: "head -c 64000000 /dev/zero > /workspace/big"})
	if r.ExitCode == 0 || !strings.Contains(r.stderr, "No space left on device") {
		t.Errorf("writing 64 MB into a 32 MiB volume: %+v stderr %q", r.ExecResult, r.stderr)
	}
	err = e.p.WriteFile(e.ctx, sb.ID, providers.WriteFileRequest{Path: "/workspace/big2", Content: io.LimitReader(zeros{}, 64<<20)})
	wantCode(t, "WriteFile past the capacity", err, providers.ResourceExhausted)
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "no space left") {
		t.Errorf("WriteFile past the capacity: %v; want it to say no space is left", err)
	}
	got, err := e.p.GetVolume(e.ctx, "small")
	if err != nil || got.SizeBytes < 24<<20 || got.SizeBytes > 32<<20 {
		t.Errorf("GetVolume of the full volume = %+v, %v", got, err)
	}
	// Full, the volume still works once space is freed.
	e.sh(sb.ID, "rm /workspace/big && echo more > /workspace/after")
	if err := e.p.Terminate(e.ctx, sb.ID); err != nil {
		t.Fatal(err)
	}

	image := volumeImage(e.p.s, "small")
	var st syscall.Stat_t
	if err := syscall.Stat(image, &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 > 40<<20 {
		t.Errorf("the volume's image takes %d bytes of the host's disk", st.Blocks*512)
	}
	b := e.create(providers.CreateSpec{Mounts: []providers.Mount{{Volume: "small", Path: "/data"}}})
	if out := e.sh(b.ID, "cat /data/keep /data/after; ls /data"); out != "keptmore\nafter\nkeep\n" {
		t.Errorf("the volume in the next sandbox: %q", out)
	}
	if err := e.p.Terminate(e.ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	fsck(t, image)
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// fsck checks an unmounted image with e2fsck, which changes nothing.
func fsck(t *testing.T, image string) {
	t.Helper()
	if err := waitDetached(context.Background(), image, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	e2fsck := "/usr/sbin/e2fsck"
	if _, err := os.Stat(e2fsck); err != nil {
		e2fsck = "/sbin/e2fsck"
	}
	if out, err := exec.Command(e2fsck, "-fn", image).CombinedOutput(); err != nil {
		t.Errorf("e2fsck -fn %s: %v\n%s", image, err, out)
	}
}

// A volume handed from sandbox to sandbox as fast as they end is never
// mounted twice at once: every write survives and the file system is
// whole.
func TestLimitsVolumeHandedOverAtOnce(t *testing.T) {
	e := newEnv(t, nil)
	requireEnforced(t, e, providers.LimitVolumeCapacity)
	if _, err := e.p.CreateVolume(e.ctx, providers.VolumeSpec{Slug: "busy"}); err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := range 8 {
		sb := e.create(providers.CreateSpec{Mounts: []providers.Mount{{Volume: "busy"}}})
		e.sh(sb.ID, fmt.Sprintf("echo %d >> /workspace/log && head -c 1000000 /dev/urandom > /workspace/blob-%d", i, i))
		fmt.Fprintf(&want, "%d\n", i)
		// Killed, not asked: its mount namespace goes when the kernel
		// gets to it.
		rec := recordOf(t, e, sb.ID)
		_ = syscall.Kill(rec.InitPID, syscall.SIGKILL)
		if err := e.p.Terminate(e.ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	sb := e.create(providers.CreateSpec{Mounts: []providers.Mount{{Volume: "busy"}}})
	if out := e.sh(sb.ID, "cat /workspace/log; ls /workspace | grep -c blob"); out != want.String()+"8\n" {
		t.Errorf("the volume after 8 sandboxes: %q", out)
	}
	if err := e.p.Terminate(e.ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	fsck(t, volumeImage(e.p.s, "busy"))
}

// /tmp, /home/sandbox and an unmounted /workspace are tmpfs mounts of the
// configured sizes: writing past them fails with ENOSPC.
func TestLimitsScratchSizes(t *testing.T) {
	e := newEnv(t, func(ls *Settings) { ls.TmpSizeMB, ls.HomeSizeMB, ls.WorkspaceSizeMB = 16, 8, 24 })
	requireEnforced(t, e, providers.LimitScratch)
	sb := e.create(providers.CreateSpec{})
	for path, mb := range map[string]int64{"/tmp": 16, "/home/sandbox": 8, "/workspace": 24} {
		out := e.sh(sb.ID, "stat -f -c '%T %b %S' "+path)
		var fstype string
		var blocks, bsize int64
		if _, err := fmt.Sscan(out, &fstype, &blocks, &bsize); err != nil || fstype != "tmpfs" || blocks*bsize != mb<<20 {
			t.Errorf("%s: %q; want a tmpfs of %d MiB", path, out, mb)
		}
		r := e.exec(sb.ID, providers.ExecRequest{Shell: fmt.Sprintf("head -c %d /dev/zero > %s/fill", (mb+8)<<20, path)})
		if r.ExitCode == 0 || !strings.Contains(r.stderr, "No space left on device") || r.OOM {
			t.Errorf("writing past %s: %+v %q", path, r.ExecResult, r.stderr)
		}
	}
	err := e.p.WriteFile(e.ctx, sb.ID, providers.WriteFileRequest{Path: "/tmp/big", Content: io.LimitReader(zeros{}, 32<<20)})
	wantCode(t, "WriteFile past /tmp's size", err, providers.ResourceExhausted)
}

// A fork bomb stops at the sandbox's pids cgroup, even without the
// RLIMIT_NPROC that also bounds it.
func TestLimitsForkBombBoundedByPids(t *testing.T) {
	const limit = 64
	e := newEnv(t, func(ls *Settings) { ls.MaxProcesses = limit })
	requireEnforced(t, e, providers.LimitProcesses)
	// The rlimit off, so that the cgroup alone holds the bomb.
	e.p.mu.Lock()
	e.p.s.limits.NProc = 0
	e.p.mu.Unlock()
	sb := e.create(providers.CreateSpec{})
	cg := recordOf(t, e, sb.ID).Cgroup
	if got := readInt(t, filepath.Join(cg.Pids, "pids.max")); got != limit+agentTasks {
		t.Fatalf("pids.max = %d, want %d", got, limit+agentTasks)
	}
	peak, hits := int64(0), int64(0)
	stop := sampler(10*time.Millisecond, time.Minute, func() {
		if b, err := os.ReadFile(filepath.Join(cg.Pids, "pids.current")); err == nil {
			n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			peak = max(peak, n)
		}
		// cgroup v1 counts a failed fork in the group of the process that
		// forked: the exec's own group below the sandbox's, which the
		// agent removes when the exec ends.
		subs, _ := filepath.Glob(filepath.Join(cg.Pids, "*", "pids.events"))
		for _, f := range subs {
			if n, ok := cgroupStat(f, "max"); ok {
				hits = max(hits, n)
			}
		}
	})
	// Past the limit the agent or the exec's supervisor may fail to make a
	// thread; the bomb is bounded either way, which is what counts here.
	_, err := e.p.Exec(e.ctx, sb.ID, providers.ExecRequest{Argv: []string{"bash", "-c", ":(){ :|:& }; :; sleep 600"}, Timeout: 3 * time.Second})
	stop()
	t.Logf("fork bomb: exec error %v, peak %d tasks", err, peak)
	if peak > limit+agentTasks {
		t.Errorf("the sandbox reached %d tasks with pids.max %d", peak, limit+agentTasks)
	}
	if hit, ok := cgroupStat(filepath.Join(cg.Pids, "pids.events"), "max"); !ok || hit+hits == 0 {
		t.Errorf("pids.events max = %d (%v), %d in the exec's group: the bomb never met the limit", hit, ok, hits)
	}
	if err := exec.Command("true").Run(); err != nil {
		t.Errorf("the host cannot fork after the bomb: %v", err)
	}
	if err := e.p.Terminate(e.ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	for _, d := range cg.dirs() {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s remains after Terminate: %v", d, err)
		}
	}
}

// A sandbox's groups hold its processes with its limits, and go with it:
// on Terminate, and when a restarted plugin finds it dead.
func TestLimitsCgroupsFollowTheSandbox(t *testing.T) {
	e := newEnv(t, nil)
	requireEnforced(t, e, providers.LimitMemory, providers.LimitProcesses, providers.LimitCPU)
	sb := e.create(providers.CreateSpec{Resources: providers.Resources{MemoryMB: 200, CPUs: 0.5}})
	rec := recordOf(t, e, sb.ID)
	cg := rec.Cgroup
	if cg == nil || len(cg.dirs()) == 0 {
		t.Fatalf("no cgroup in the record: %+v", rec)
	}
	for _, d := range cg.dirs() {
		procs, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil || !slices.Contains(strings.Fields(string(procs)), strconv.Itoa(rec.InitPID)) || !slices.Contains(strings.Fields(string(procs)), strconv.Itoa(rec.BwrapPID)) {
			t.Errorf("%s holds %q; want the agent (%d) and bwrap (%d)", d, procs, rec.InitPID, rec.BwrapPID)
		}
	}
	// A command's processes are in the groups too.
	pid := strings.TrimSpace(e.sh(sb.ID, "sleep 60 >/dev/null 2>&1 & echo $!"))
	inside, _ := strconv.Atoi(pid)
	var memLimit, quota string
	switch cg.Version {
	case 1:
		memLimit, quota = "memory.limit_in_bytes", "cpu.cfs_quota_us"
		if got := readInt(t, filepath.Join(cg.CPU, quota)); got != 50000 {
			t.Errorf("%s = %d, want half of the 100000 µs period", quota, got)
		}
	case 2:
		memLimit = "memory.max"
		if b, _ := os.ReadFile(filepath.Join(cg.CPU, "cpu.max")); strings.TrimSpace(string(b)) != "50000 100000" {
			t.Errorf("cpu.max = %q", b)
		}
	}
	if got := readInt(t, filepath.Join(cg.Memory, memLimit)); got != 200<<20 {
		t.Errorf("%s = %d, want 200 MiB", memLimit, got)
	}
	if got := readInt(t, filepath.Join(cg.Pids, "pids.current")); got < 4 || inside == 0 {
		t.Errorf("pids.current = %d with a background command (%q)", got, pid)
	}
	if err := e.p.Terminate(e.ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	for _, d := range cg.dirs() {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s remains after Terminate", d)
		}
	}

	// Dead while no plugin watched: the next plugin process cleans up.
	dead := e.create(providers.CreateSpec{})
	drec := recordOf(t, e, dead.ID)
	if err := syscall.Kill(drec.InitPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); drec.alive() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	p2 := e.newProvider()
	defer p2.Close()
	for _, d := range drec.Cgroup.dirs() {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s of a dead sandbox remains after a plugin restart", d)
		}
	}
}

// Inside a sandbox with a volume, a snapshot and the tools, mountinfo
// names no host path: not the state dir, not the tools, not the
// repository, not the staging directory.
func TestLimitsMountinfoShowsNoHostPaths(t *testing.T) {
	tools := t.TempDir()
	if err := os.WriteFile(filepath.Join(tools, "tool"), []byte("#!/bin/sh\necho tool ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(ls *Settings) { ls.ToolsDir = tools })
	requireEnforced(t, e, providers.LimitVolumeCapacity)
	if _, err := e.p.CreateVolume(e.ctx, providers.VolumeSpec{Slug: "v"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.EnsureSnapshot(e.ctx, snapshotSpec("deps-1")); err != nil {
		t.Fatal(err)
	}
	sb := e.create(providers.CreateSpec{Snapshot: "deps-1", Mounts: []providers.Mount{{Volume: "v"}}})
	if out := e.sh(sb.ID, "tool; "+ToolsPath+"/tool; cat "+SnapshotPath+"/data.txt; echo x > /workspace/x && cat /workspace/x"); out != "tool says hi\ntool ran\ndata\nx\n" {
		t.Errorf("tools, snapshot and volume in the sandbox: %q", out)
	}
	mi := e.sh(sb.ID, "cat /proc/self/mountinfo")
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	for _, host := range []string{e.dir, tools, repo, stageDir, filepath.Dir(exe)} {
		if strings.Contains(mi, host) {
			t.Errorf("mountinfo names the host path %s:\n%s", host, mi)
		}
	}
	for _, want := range []string{" / /workspace ", " / " + SnapshotPath + " ", " /tools " + ToolsPath + " ", " /agent " + agentPath + " "} {
		if !strings.Contains(mi, want) {
			t.Errorf("mountinfo lacks %q:\n%s", want, mi)
		}
	}
}

// Without the mechanisms (no cgroups, no loop devices) the provider
// refuses to start, in one line naming what is missing and the key that
// opts out; opted out, it runs with directory volumes and says what it
// does not enforce.
func TestLimitsConfigureRefusesWithoutMechanisms(t *testing.T) {
	requireBwrap(t)
	fake := t.TempDir()
	for name, body := range map[string]string{"mountinfo": "", "cgroup": "0::/\n"} {
		if err := os.WriteFile(filepath.Join(fake, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	saved := []string{procMountinfo, procCgroup, loopControl}
	procMountinfo, procCgroup, loopControl = filepath.Join(fake, "mountinfo"), filepath.Join(fake, "cgroup"), filepath.Join(fake, "loop-control")
	t.Cleanup(func() { procMountinfo, procCgroup, loopControl = saved[0], saved[1], saved[2] })

	configure := func(unenforced []string) (*Provider, string, error) {
		dir := t.TempDir()
		ls := DefaultSettings()
		ls.StateDir, ls.UnenforcedLimits = dir, unenforced
		b, _ := json.Marshal(ls)
		p := New()
		t.Cleanup(func() { p.Close() })
		return p, dir, p.Configure(context.Background(), providers.Config{Settings: b, Defaults: providers.SandboxDefaults{Lifetime: time.Minute}})
	}
	for _, opted := range [][]string{nil, {"memory", "processes", "cpu"}} {
		_, _, err := configure(opted)
		wantCode(t, fmt.Sprintf("Configure without mechanisms, unenforced_limits = %q", opted), err, providers.FailedPrecondition)
		msg := fmt.Sprint(err)
		if strings.Contains(msg, "\n") || !strings.Contains(msg, `unenforced_limits = ["memory", "processes", "cpu", "volume_capacity"]`) || !strings.Contains(msg, "volume_capacity") {
			t.Errorf("the refusal is not one line naming the limits and the key: %q", msg)
		}
		if len(opted) == 0 && !strings.Contains(msg, "cannot enforce memory, processes, cpu, volume_capacity") {
			t.Errorf("the refusal does not name every missing limit: %q", msg)
		}
		if len(opted) > 0 && !strings.Contains(msg, "cannot enforce volume_capacity here") {
			t.Errorf("the refusal names limits the operator let go: %q", msg)
		}
	}

	p, dir, err := configure(UnenforceableLimits)
	if err != nil {
		t.Fatalf("Configure with every limit unenforced: %v", err)
	}
	info, _ := p.Info(context.Background())
	if l := info.Capabilities.Limits; l.Cgroups != "none" || l.Volumes != "none" || !slices.Equal(l.Enforced, []string{providers.LimitScratch}) {
		t.Errorf("Info limits = %+v", l)
	}
	ctx := context.Background()
	v, err := p.CreateVolume(ctx, providers.VolumeSpec{Slug: "plain", CapacityMB: 32})
	if err != nil || v.CapacityMB != 0 {
		t.Fatalf("CreateVolume without images = %+v, %v; want an uncapped directory volume", v, err)
	}
	sb, err := p.Create(ctx, providers.CreateSpec{Mounts: []providers.Mount{{Volume: "plain"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Terminate(ctx, sb.ID)
	if _, err := p.Exec(ctx, sb.ID, providers.ExecRequest{Shell: "echo hi > /workspace/f"}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "volumes", "plain", "data", "f")); err != nil || string(b) != "hi\n" {
		t.Errorf("the directory volume on the host: %q, %v", b, err)
	}
	if rec, ok := p.lookup(p.s, sb.ID); !ok || rec.rec.Cgroup != nil {
		t.Errorf("a sandbox without cgroups records %+v", rec.rec.Cgroup)
	}
}

// A volume an earlier version kept as a directory becomes an image, with
// its files, the first time it is mounted.
func TestLimitsDirectoryVolumeBecomesAnImage(t *testing.T) {
	e := newEnv(t, nil)
	requireEnforced(t, e, providers.LimitVolumeCapacity)
	vdir := filepath.Join(e.dir, "volumes", "old")
	if err := os.MkdirAll(filepath.Join(vdir, "data", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	meta := fmt.Sprintf(`{"slug": "old", "created_at": %q}`, time.Now().UTC().Format(time.RFC3339Nano))
	for path, body := range map[string]string{"meta.json": meta, "data/notes.txt": "from before\n", "data/sub/deep.txt": "deep\n"} {
		if err := os.WriteFile(filepath.Join(vdir, path), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(filepath.Join(vdir, "data", "notes.txt"), 2_000_000_001, 2_000_000_001); err != nil {
		t.Fatal(err)
	}
	if v, err := e.p.GetVolume(e.ctx, "old"); err != nil || v.SizeBytes != int64(len("from before\ndeep\n")) {
		t.Fatalf("GetVolume of the directory volume = %+v, %v", v, err)
	}
	sb := e.create(providers.CreateSpec{Mounts: []providers.Mount{{Volume: "old"}}})
	if out := e.sh(sb.ID, "cat /workspace/notes.txt /workspace/sub/deep.txt && echo new >> /workspace/notes.txt && ls -A /workspace"); out != "from before\ndeep\nnotes.txt\nsub\n" {
		t.Errorf("the migrated volume: %q", out)
	}
	if _, err := os.Stat(filepath.Join(vdir, "data")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the directory remains after the migration: %v", err)
	}
	v, err := e.p.GetVolume(e.ctx, "old")
	if err != nil || v.CapacityMB != defaultVolumeMB {
		t.Errorf("GetVolume after the migration = %+v, %v", v, err)
	}
	if err := e.p.Terminate(e.ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	fsck(t, volumeImage(e.p.s, "old"))
}

// Snapshots an earlier version built as directories are retired at start
// and built again, as images.
func TestLimitsDirectorySnapshotIsBuiltAgain(t *testing.T) {
	e := newEnv(t, nil)
	requireEnforced(t, e, providers.LimitVolumeCapacity)
	trees := filepath.Join(e.dir, "snapshots", "trees")
	if err := os.MkdirAll(filepath.Join(trees, "deps-1@0123456789abcdef", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	meta := `{"slug": "deps-1", "id": "0123456789abcdef", "size_bytes": 0, "created_at": "2026-01-01T00:00:00Z"}`
	if err := os.WriteFile(filepath.Join(e.dir, "snapshots", "deps-1.json"), []byte(meta), 0o600); err != nil {
		t.Fatal(err)
	}
	p2 := e.newProvider()
	defer p2.Close()
	if _, err := p2.GetSnapshot(e.ctx, "deps-1"); providers.CodeOf(err) != providers.NotFound {
		t.Errorf("GetSnapshot of a retired directory snapshot: %v", err)
	}
	if names := dirNames(t, trees); len(names) != 0 {
		t.Errorf("trees after the restart: %v", names)
	}
	snap, err := p2.EnsureSnapshot(e.ctx, snapshotSpec("deps-1"))
	if err != nil || snap.SizeBytes == 0 {
		t.Fatalf("EnsureSnapshot = %+v, %v", snap, err)
	}
	if names := dirNames(t, trees); len(names) != 1 || !strings.HasSuffix(names[0], ".img") {
		t.Errorf("trees after the build: %v", names)
	}
	fsck(t, filepath.Join(trees, dirNames(t, trees)[0]))
}

// A snapshot's setup that writes past snapshot_size_mb fails the build
// with a message that says so.
func TestLimitsSnapshotSize(t *testing.T) {
	e := newEnv(t, func(ls *Settings) { ls.SnapshotSizeMB = 16 })
	requireEnforced(t, e, providers.LimitVolumeCapacity)
	_, err := e.p.EnsureSnapshot(e.ctx, providers.SnapshotSpec{Slug: "big", Setup: []string{"head -c 32000000 /dev/zero > " + SnapshotPath + "/big"}})
	wantCode(t, "a snapshot past its size", err, providers.FailedPrecondition)
	if err == nil || !strings.Contains(err.Error(), "snapshot_size_mb = 16 MiB") {
		t.Errorf("error %v; want it to name snapshot_size_mb", err)
	}
}

// Cgroup v2 detection on a fake hierarchy (this machine's v2 has no
// controllers to delegate): sandbox groups go into the nearest cgroup
// above the plugin's that hands memory and pids down.
func TestFindCgroupV2Parent(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"cgroup.controllers":                                  "cpu memory pids io",
		"cgroup.subtree_control":                              "cpu memory pids",
		"user.slice/cgroup.controllers":                       "cpu memory pids",
		"user.slice/cgroup.subtree_control":                   "memory pids",
		"user.slice/session-1.scope/cgroup.controllers":       "memory pids",
		"user.slice/session-1.scope/cgroup.subtree_control":   "",
		"system.slice/cgroup.subtree_control":                 "",
		"system.slice/app.service/cgroup.subtree_control":     "",
		"system.slice/app.service/cgroup.controllers":         "",
		"system.slice/cgroup.controllers":                     "",
		"user.slice/session-1.scope/inner/cgroup.controllers": "",
	}
	for name, body := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(body+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mounts := parseMountinfo([]byte("35 24 0:30 / " + strings.ReplaceAll(root, " ", `\040`) + " rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"))
	dir, sub, why := findV2Parent(mounts, parseProcCgroup([]byte("0::/user.slice/session-1.scope\n")))
	if dir != filepath.Join(root, "user.slice") || slices.Contains(sub, "cpu") || why != "" {
		t.Errorf("in a session scope: %q %v %q; want user.slice without cpu", dir, sub, why)
	}
	dir, sub, _ = findV2Parent(mounts, parseProcCgroup([]byte("0::/system.slice/app.service\n")))
	if dir != root || !slices.Contains(sub, "cpu") {
		t.Errorf("in a service: %q %v; want the root with cpu", dir, sub)
	}
	// In a cgroup namespace the mount shows part of the hierarchy.
	nsMounts := parseMountinfo([]byte("35 24 0:30 /user.slice " + filepath.Join(root, "user.slice") + " rw - cgroup2 cgroup2 rw\n"))
	if dir, _, _ := findV2Parent(nsMounts, parseProcCgroup([]byte("0::/user.slice/session-1.scope\n"))); dir != filepath.Join(root, "user.slice") {
		t.Errorf("in a cgroup namespace: %q", dir)
	}
	if dir, _, why := findV2Parent(parseMountinfo(nil), parseProcCgroup([]byte("0::/\n"))); dir != "" || why == "" {
		t.Errorf("without a cgroup2 mount: %q %q", dir, why)
	}

	// The limits a v2 group gets (the kernel makes a group's files; here
	// the test does).
	h := cgroupHost{version: 2, memory: root, pids: root, cpu: root, swap: true}
	cg := h.groupFor("sbx-1")
	if err := os.Mkdir(cg.Memory, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"memory.max", "memory.swap.max", "pids.max", "cpu.max", "cpu.weight"} {
		if err := os.WriteFile(filepath.Join(cg.Memory, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.create(cg, cgroupLimits{memoryBytes: 256 << 20, tasks: 320, cpus: 1.5}); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{"memory.max": "268435456", "memory.swap.max": "0", "pids.max": "320", "cpu.max": "150000 100000", "cpu.weight": "150"} {
		if b, _ := os.ReadFile(filepath.Join(root, "sandstep-sbx-1", file)); string(b) != want {
			t.Errorf("%s = %q, want %q", file, b, want)
		}
	}
}

// The memory default: the request, else [sandbox] memory_mb, else 1024;
// nonsense is refused.
func TestSandboxResources(t *testing.T) {
	for _, c := range []struct {
		req, def int
		cpus     float64
		want     int
		code     providers.Code
	}{{0, 0, 0, defaultMemoryMB, providers.Unknown}, {0, 512, 0, 512, providers.Unknown}, {256, 512, 2, 256, providers.Unknown},
		{-1, 0, 0, 0, providers.InvalidArgument}, {32, 0, 0, 0, providers.InvalidArgument}, {128, 0, -1, 0, providers.InvalidArgument}} {
		mb, _, err := sandboxResources(providers.Resources{MemoryMB: c.req, CPUs: c.cpus}, providers.SandboxDefaults{MemoryMB: c.def})
		if providers.CodeOf(err) != c.code || (c.code == providers.Unknown && mb != c.want) {
			t.Errorf("resources %d MiB (default %d, cpus %v) = %d, %v", c.req, c.def, c.cpus, mb, err)
		}
	}
}

// A host where only some controllers are had (the others listed in
// unenforced_limits) gets groups in those alone.
func TestCgroupCreatePartial(t *testing.T) {
	root := t.TempDir()
	h := cgroupHost{version: 1, memory: root, swap: true}
	cg := h.groupFor("sbx-1")
	if cg.Pids != "" || cg.CPU != "" || len(cg.dirs()) != 1 {
		t.Fatalf("groups = %+v", cg)
	}
	if err := os.Mkdir(cg.Memory, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes"} {
		if err := os.WriteFile(filepath.Join(cg.Memory, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.create(cg, cgroupLimits{memoryBytes: 64 << 20, tasks: 100, cpus: 2}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes"} {
		if b, _ := os.ReadFile(filepath.Join(cg.Memory, f)); string(b) != "67108864" {
			t.Errorf("%s = %q", f, b)
		}
	}
	if names := dirNames(t, cg.Memory); len(names) != 2 {
		t.Errorf("files written: %v", names)
	}
}
