package local

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/sandstep/sandstep/providers"
)

// Sandboxes' memory when neither the request nor the [sandbox] defaults
// name it, and the least a sandbox may have: the agent and an exec's
// supervisor take about 15 MiB.
const (
	defaultMemoryMB = 1024
	minMemoryMB     = 64
	maxVolumeMB     = 1 << 20 // 1 TiB
)

// The places /proc tells this process's cgroups at; tests point them at a
// fake hierarchy.
var (
	procMountinfo = "/proc/self/mountinfo"
	procCgroup    = "/proc/self/cgroup"
	// loopControl is how loop devices are had; a host without them cannot
	// cap volumes.
	loopControl = "/dev/loop-control"
)

// enforceLimits finds the mechanisms behind the limits (cgroups, loop
// devices) and refuses, in one line, a host that lacks one the operator has
// not listed in unenforced_limits. It fills s.cgroups, s.images and
// s.enforced.
func (p *Provider) enforceLimits(ctx context.Context, s *settings) error {
	s.cgroups = detectCgroups(cgroupSources{mountinfo: procMountinfo, self: procCgroup, probe: "probe-" + newID()})
	imagesWhy := ""
	if !s.isRoot {
		imagesWhy = "loop devices need root"
	} else if mkfs, err := findMkfs(); err != nil {
		imagesWhy = err.Error()
	} else if _, err := os.Stat(loopControl); err != nil {
		imagesWhy = "no loop devices (" + err.Error() + ")"
	} else {
		s.mkfs = mkfs
		s.images = true
		// The agent and tools image doubles as the proof that images can
		// be made and mounted here.
		if _, _, err := p.sysMount(ctx, *s); err != nil {
			s.images = false
			imagesWhy = "an ext4 image cannot be mounted here (" + err.Error() + ")"
		}
	}

	have := map[string]bool{
		providers.LimitMemory:         s.cgroups.memory != "",
		providers.LimitProcesses:      s.cgroups.pids != "",
		providers.LimitCPU:            s.cgroups.cpu != "",
		providers.LimitVolumeCapacity: s.images,
		providers.LimitScratch:        true,
	}
	var missing, lacking []string
	for _, l := range UnenforceableLimits {
		if have[l] {
			continue
		}
		lacking = append(lacking, l)
		if !slices.Contains(s.unenforced, l) {
			missing = append(missing, l)
		}
	}
	var why []string
	if slices.ContainsFunc(lacking, func(l string) bool { return l != providers.LimitVolumeCapacity }) {
		why = append(why, "cgroups: "+s.cgroups.why)
	}
	if !have[providers.LimitVolumeCapacity] {
		why = append(why, "volume capacity: "+imagesWhy)
	}
	if len(missing) > 0 {
		quoted := make([]string, len(lacking))
		for i, l := range lacking {
			quoted[i] = strconv.Quote(l)
		}
		return providers.Errorf(providers.FailedPrecondition, "configure",
			"provider.local: cannot enforce %s here (%s); to run without, set provider.local.unenforced_limits = [%s]",
			strings.Join(missing, ", "), strings.Join(why, "; "), strings.Join(quoted, ", "))
	}
	if len(lacking) > 0 {
		p.log.Warn("running with limits unenforced, as unenforced_limits allows", "limits", lacking, "why", strings.Join(why, "; "))
	}
	s.limitsInfo = providers.Limits{Cgroups: s.cgroups.name(), Volumes: "none"}
	if s.images {
		s.limitsInfo.Volumes = "ext4-image"
	}
	for _, l := range []string{providers.LimitMemory, providers.LimitProcesses, providers.LimitCPU, providers.LimitScratch, providers.LimitVolumeCapacity} {
		if have[l] {
			s.limitsInfo.Enforced = append(s.limitsInfo.Enforced, l)
		}
	}
	return nil
}

// sandboxResources checks a request's resources and fills in the defaults.
func sandboxResources(r providers.Resources, defaults providers.SandboxDefaults) (memoryMB int, cpus float64, err error) {
	const op = "create"
	switch {
	case r.MemoryMB < 0:
		return 0, 0, providers.Errorf(providers.InvalidArgument, op, "resources.memory_mb must not be negative")
	case r.MemoryMB > 0 && r.MemoryMB < minMemoryMB:
		return 0, 0, providers.Errorf(providers.InvalidArgument, op, "resources.memory_mb: %d MiB is too little; the local provider needs at least %d", r.MemoryMB, minMemoryMB)
	case r.CPUs < 0:
		return 0, 0, providers.Errorf(providers.InvalidArgument, op, "resources.cpus must not be negative")
	}
	memoryMB = r.MemoryMB
	if memoryMB == 0 {
		memoryMB = defaults.MemoryMB
	}
	if memoryMB == 0 {
		memoryMB = defaultMemoryMB
	}
	return max(memoryMB, minMemoryMB), r.CPUs, nil
}

// oomWatch notes a sandbox's OOM kill count before an exec, to tell after
// it whether the OOM killer ended the command.
type oomWatch struct {
	cg     *sandboxCgroup
	before int64
	ok     bool
}

// watchOOM starts watching sandbox id for an exec; an unknown sandbox
// gets a watch that never fires (the exec then fails anyway).
func (p *Provider) watchOOM(id string) oomWatch {
	s, err := p.ready()
	if err != nil {
		return oomWatch{}
	}
	sb, ok := p.lookup(s, id)
	if !ok {
		return oomWatch{}
	}
	n, ok := sb.rec.Cgroup.oomKills()
	return oomWatch{cg: sb.rec.Cgroup, before: n, ok: ok}
}

// killed reports whether the exec that ended with res was killed for
// memory: the count rose while it ran, and its main process died of
// SIGKILL (or exited 137, as a shell reports a child that did).
func (w oomWatch) killed(res result) bool {
	if !w.ok || res.TimedOut || !(res.Signal == "SIGKILL" || res.ExitCode == 128+9) {
		return false
	}
	n, ok := w.cg.oomKills()
	return ok && n > w.before
}
