package local

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Every sandbox gets control groups of its own, which cap its memory (swap
// included), its tasks and its CPU. They are made below the cgroup the
// plugin runs in, never at the top of a hierarchy it does not own: on
// cgroup v2 in the nearest cgroup that already hands memory and pids down to
// its children (a delegated subtree), on cgroup v1 in each controller's own
// hierarchy. Their paths go into the sandbox's record, so that any plugin
// process on the state_dir can read their counters and remove them.

// agentTasks is how many tasks beyond max_processes a sandbox's group
// admits: the agent and the exec supervisors are Go programs with threads
// of their own, and must not fail to make one when the sandbox's commands
// have used up the limit. The commands themselves stop at max_processes
// (RLIMIT_NPROC counts every task of the sandbox's uid).
const agentTasks = 64

// cgroupHost is the cgroup mechanism found at Configure: where sandbox
// groups are made, per controller. On v2 the three are one directory.
type cgroupHost struct {
	version int // 2, 1, or 0 for none
	// Parent directories of the sandbox groups; "" = controller missing.
	memory, pids, cpu string
	// swap says whether swap can be capped along with memory (v1
	// memory.memsw.*, v2 memory.swap.max).
	swap bool
	// cloneInto says whether a process can be started inside a v2 group
	// (clone3 with CLONE_INTO_CGROUP), which the agent's exec groups need
	// there (see openExecDir).
	cloneInto bool
	// why says what is missing when a controller is.
	why string
}

func (h cgroupHost) name() string {
	switch h.version {
	case 2:
		return "v2"
	case 1:
		return "v1"
	}
	return "none"
}

// sandboxCgroup is a sandbox's groups, as its record keeps them.
type sandboxCgroup struct {
	Version int    `json:"version"`
	Memory  string `json:"memory,omitempty"`
	Pids    string `json:"pids,omitempty"`
	CPU     string `json:"cpu,omitempty"`
}

// cgroupLimits are what a sandbox's groups enforce.
type cgroupLimits struct {
	memoryBytes int64
	tasks       int
	cpus        float64 // 0 = a fair share, no quota
}

// groupFor names the groups of sandbox id (they are made by create).
func (h cgroupHost) groupFor(id string) *sandboxCgroup {
	if h.version == 0 {
		return nil
	}
	name := "sandstep-" + id
	cg := &sandboxCgroup{Version: h.version}
	if h.memory != "" {
		cg.Memory = filepath.Join(h.memory, name)
	}
	if h.pids != "" {
		cg.Pids = filepath.Join(h.pids, name)
	}
	if h.cpu != "" {
		cg.CPU = filepath.Join(h.cpu, name)
	}
	return cg
}

// cpuPeriod is the CFS period a CPU quota is expressed in, in µs.
const cpuPeriod = 100_000

// create makes the groups and sets their limits.
func (h cgroupHost) create(cg *sandboxCgroup, l cgroupLimits) error {
	if cg == nil {
		return nil
	}
	var files [][2]string // path, value, in order
	set := func(dir, file, value string) {
		if dir != "" { // a controller unenforced here
			files = append(files, [2]string{filepath.Join(dir, file), value})
		}
	}
	mem := strconv.FormatInt(l.memoryBytes, 10)
	tasks := strconv.Itoa(l.tasks)
	switch cg.Version {
	case 2:
		set(cg.Memory, "memory.max", mem)
		if h.swap {
			set(cg.Memory, "memory.swap.max", "0")
		}
		set(cg.Pids, "pids.max", tasks)
		if l.cpus > 0 {
			set(cg.CPU, "cpu.max", fmt.Sprintf("%d %d", int64(math.Ceil(l.cpus*cpuPeriod)), cpuPeriod))
			set(cg.CPU, "cpu.weight", strconv.Itoa(min(max(int(l.cpus*100), 1), 10000)))
		}
	case 1:
		set(cg.Memory, "memory.limit_in_bytes", mem)
		if h.swap {
			// memsw counts memory plus swap: equal to the memory limit, it
			// leaves no swap.
			set(cg.Memory, "memory.memsw.limit_in_bytes", mem)
		} else {
			set(cg.Memory, "memory.swappiness", "0")
		}
		set(cg.Pids, "pids.max", tasks)
		if l.cpus > 0 {
			set(cg.CPU, "cpu.cfs_period_us", strconv.Itoa(cpuPeriod))
			set(cg.CPU, "cpu.cfs_quota_us", strconv.FormatInt(int64(math.Ceil(l.cpus*cpuPeriod)), 10))
			set(cg.CPU, "cpu.shares", strconv.Itoa(max(int(l.cpus*1024), 2)))
		}
	}
	for _, dir := range cg.dirs() {
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
	}
	for _, f := range files {
		if err := writeCgroupFile(f[0], f[1]); err != nil {
			return err
		}
	}
	return nil
}

// dirs lists the group's directories, each once.
func (cg *sandboxCgroup) dirs() []string {
	var out []string
	for _, d := range []string{cg.Memory, cg.Pids, cg.CPU} {
		if d != "" && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// attach moves processes into the groups. It must happen before the
// sandbox runs anything of its own: children inherit their parent's groups.
func (cg *sandboxCgroup) attach(pids ...int) error {
	if cg == nil {
		return nil
	}
	for _, dir := range cg.dirs() {
		for _, pid := range pids {
			if err := writeCgroupFile(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
				return err
			}
		}
	}
	return nil
}

// remove deletes the groups; their processes must be gone. The last of a
// sandbox's processes may still be on its way out: a busy group is tried
// again for a moment.
func (cg *sandboxCgroup) remove() error {
	if cg == nil {
		return nil
	}
	var errs []error
	for _, dir := range cg.dirs() {
		// The agent's exec groups first (see direct.go).
		if entries, err := os.ReadDir(dir); err == nil {
			for _, e := range entries {
				if e.IsDir() {
					if err := rmdirCgroup(filepath.Join(dir, e.Name())); err != nil {
						errs = append(errs, err)
					}
				}
			}
		}
		if err := rmdirCgroup(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// rmdirCgroup removes a group, trying a busy one again for a moment.
func rmdirCgroup(dir string) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if errors.Is(err, unix.EBUSY) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		return fmt.Errorf("removing cgroup %s: %w", dir, err)
	}
}

// execDir is the group the agent makes its exec groups in: one hierarchy
// is enough to tell an exec's processes apart, and pids is the cheapest.
func (cg *sandboxCgroup) execDir() string {
	if cg == nil {
		return ""
	}
	for _, d := range []string{cg.Pids, cg.Memory, cg.CPU} {
		if d != "" {
			return d
		}
	}
	return ""
}

// openExecDir hands the sandbox's uid what the agent needs to make exec
// groups below dir (the directory; on v2 the cgroup.procs that moving a
// process between two of them is checked against; on v1 the tasks file its
// forking thread returns through, see direct.go) and opens it for the
// agent. The limits' files stay root's, so the sandbox cannot raise them,
// nor can it enable controllers for its groups. The sandbox has no cgroup
// file system of its own; only the agent holds the descriptor.
func (cg *sandboxCgroup) openExecDir(uid int, chown bool) (*os.File, error) {
	dir := cg.execDir()
	if dir == "" {
		return nil, nil
	}
	if chown {
		own := []string{dir, filepath.Join(dir, "cgroup.procs")}
		if cg.Version == 1 {
			own = append(own, filepath.Join(dir, "tasks"))
		}
		for _, p := range own {
			if err := os.Chown(p, uid, uid); err != nil {
				return nil, fmt.Errorf("handing %s to the sandbox: %w", p, err)
			}
		}
	}
	return os.Open(dir)
}

// oomKills returns how many processes of the group the OOM killer has
// ended so far; ok is false when the count cannot be read.
func (cg *sandboxCgroup) oomKills() (n int64, ok bool) {
	if cg == nil || cg.Memory == "" {
		return 0, false
	}
	file := "memory.events"
	if cg.Version == 1 {
		file = "memory.oom_control"
	}
	return cgroupStat(filepath.Join(cg.Memory, file), "oom_kill")
}

// cgroupStat reads the value of key from a flat keyed cgroup file
// ("key value" lines).
func cgroupStat(path, key string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && k == key {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

func writeCgroupFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", path, err)
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cgroup %s = %s: %w", path, value, err)
	}
	return nil
}

// shieldFromOOM keeps the OOM killer off a sandbox's own machinery (bwrap
// and the agent, its pid 1) where the plugin may: killing the agent would
// end the sandbox instead of the command that used the memory. It needs
// CAP_SYS_RESOURCE, which a container or VM may withhold even from root;
// without it the agent is still spared, as every command asks to be
// killed first (see oomFirst). The -1000 goes through the legacy oom_adj
// file on purpose: written by a privileged process, oom_score_adj would
// also lower the floor the agent's descendants may set themselves to, and
// commands must not make themselves unkillable. Writing 0 first pins that
// floor at 0.
func shieldFromOOM(pids ...int) error {
	if os.Geteuid() != 0 {
		return nil
	}
	for _, pid := range pids {
		dir := "/proc/" + strconv.Itoa(pid)
		err := os.WriteFile(dir+"/oom_score_adj", []byte("0"), 0)
		if err == nil {
			err = os.WriteFile(dir+"/oom_adj", []byte("-17"), 0)
		}
		if errors.Is(err, os.ErrPermission) {
			return nil // no CAP_SYS_RESOURCE
		}
		if err != nil {
			return fmt.Errorf("oom_score_adj of %d: %w", pid, err)
		}
	}
	return nil
}

// The cgroup files of /proc that detection reads; tests point them at a
// fake hierarchy.
type cgroupSources struct {
	mountinfo, self string
	// probe names the throw-away group made to test that a place is
	// writable.
	probe string
}

// detectCgroups finds where this process may make sandbox groups: cgroup
// v2 when a delegated subtree gives memory and pids, else the v1
// controllers that are mounted and writable.
func detectCgroups(src cgroupSources) cgroupHost {
	mi, err1 := os.ReadFile(src.mountinfo)
	self, err2 := os.ReadFile(src.self)
	if err := errors.Join(err1, err2); err != nil {
		return cgroupHost{why: fmt.Sprintf("cannot read the process's cgroups: %v", err)}
	}
	mounts := parseMountinfo(mi)
	paths := parseProcCgroup(self)
	h2, why2 := detectV2(mounts, paths, src.probe)
	if h2.version == 2 {
		return h2
	}
	// v1 may be partial (memory without pids, say): what it lacks is told
	// along with why v2 was not taken.
	h1, why1 := detectV1(mounts, paths, src.probe)
	h1.why = strings.Join(slices.DeleteFunc([]string{why2, why1}, func(s string) bool { return s == "" }), "; ")
	return h1
}

type mountEntry struct {
	root, point, fstype, super string
}

// parseMountinfo reads /proc/self/mountinfo lines: id parent major:minor
// root point options [optional...] - fstype source super.
func parseMountinfo(b []byte) []mountEntry {
	var out []mountEntry
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := slices.Index(f, "-")
		if sep < 6 || len(f) < sep+4 {
			continue
		}
		out = append(out, mountEntry{root: unescapeMount(f[3]), point: unescapeMount(f[4]), fstype: f[sep+1], super: f[sep+3]})
	}
	return out
}

// unescapeMount undoes the octal escapes (\040 for a space) of mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// parseProcCgroup maps each controller of /proc/self/cgroup to the
// process's path in its hierarchy; "" is the v2 hierarchy.
func parseProcCgroup(b []byte) map[string]string {
	out := make(map[string]string)
	for line := range strings.Lines(string(b)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out
}

// hostDir turns a path in a hierarchy into a directory under the mount
// point; the mount may show only part of the hierarchy (its root), as in a
// cgroup namespace.
func hostDir(m mountEntry, path string) (string, bool) {
	rel := path
	if m.root != "/" {
		var ok bool
		if rel, ok = strings.CutPrefix(path, m.root); !ok || (rel != "" && rel[0] != '/') {
			return "", false
		}
	}
	return filepath.Join(m.point, rel), true
}

func detectV2(mounts []mountEntry, paths map[string]string, probe string) (cgroupHost, string) {
	dir, sub, why := findV2Parent(mounts, paths)
	if dir == "" {
		return cgroupHost{}, why
	}
	h := cgroupHost{version: 2, memory: dir, pids: dir}
	if slices.Contains(sub, "cpu") {
		h.cpu = dir
	}
	var err error
	if h.swap, h.cloneInto, err = h.probe(probe); err != nil {
		return cgroupHost{}, fmt.Sprintf("cgroup v2 at %s delegates memory and pids but is not writable here (%v)", dir, err)
	}
	return h, ""
}

// findV2Parent looks up from the plugin's own cgroup for the nearest one
// that hands memory and pids to its children: sandbox groups go there, next
// to the branch the plugin is in. The plugin's own cgroup holds processes,
// which keeps it from handing controllers down; only the hierarchy's root
// is exempt from that rule, and is asked to when it does not yet.
func findV2Parent(mounts []mountEntry, paths map[string]string) (dir string, sub []string, why string) {
	own, ok := paths[""]
	if !ok {
		return "", nil, "no cgroup v2 hierarchy"
	}
	var m *mountEntry
	for i := range mounts {
		if mounts[i].fstype == "cgroup2" {
			m = &mounts[i]
			break
		}
	}
	if m == nil {
		return "", nil, "cgroup v2 is not mounted"
	}
	start, ok := hostDir(*m, own)
	if !ok {
		return "", nil, "the process's cgroup v2 is outside the mounted hierarchy"
	}
	for d := start; ; d = filepath.Dir(d) {
		sub := cgroupFields(filepath.Join(d, "cgroup.subtree_control"))
		if !hasAll(sub, "memory", "pids") && d == m.point {
			ctrl := cgroupFields(filepath.Join(d, "cgroup.controllers"))
			if hasAll(ctrl, "memory", "pids") {
				enable := "+memory +pids"
				if slices.Contains(ctrl, "cpu") {
					enable += " +cpu"
				}
				if writeCgroupFile(filepath.Join(d, "cgroup.subtree_control"), enable) == nil {
					sub = cgroupFields(filepath.Join(d, "cgroup.subtree_control"))
				}
			}
		}
		if hasAll(sub, "memory", "pids") {
			return d, sub, ""
		}
		if d == m.point || d == "/" || d == "." {
			return "", nil, fmt.Sprintf("no cgroup v2 at or above %s hands memory and pids down", start)
		}
	}
}

func detectV1(mounts []mountEntry, paths map[string]string, probe string) (cgroupHost, string) {
	h := cgroupHost{version: 1}
	var missing []string
	find := func(ctrl string) (string, string) {
		own, ok := paths[ctrl]
		if !ok {
			return "", ctrl + " is not in /proc/self/cgroup"
		}
		for _, m := range mounts {
			if m.fstype != "cgroup" || !slices.Contains(strings.Split(m.super, ","), ctrl) {
				continue
			}
			if dir, ok := hostDir(m, own); ok {
				return dir, ""
			}
		}
		return "", ctrl + " is not mounted"
	}
	for _, c := range []struct {
		name string
		dst  *string
		file string
	}{{"memory", &h.memory, "memory.limit_in_bytes"}, {"pids", &h.pids, "pids.max"}, {"cpu", &h.cpu, "cpu.shares"}} {
		dir, why := find(c.name)
		if dir == "" {
			missing = append(missing, why)
			continue
		}
		if err := probeV1(dir, probe, c.file); err != nil {
			missing = append(missing, fmt.Sprintf("%s at %s is not writable (%v)", c.name, dir, err))
			continue
		}
		*c.dst = dir
	}
	if h.memory != "" {
		_, err := os.Stat(filepath.Join(h.memory, "memory.memsw.limit_in_bytes"))
		h.swap = err == nil
	}
	if h.memory == "" && h.pids == "" && h.cpu == "" {
		h.version = 0
	}
	if len(missing) > 0 {
		return h, "cgroup v1: " + strings.Join(missing, ", ")
	}
	return h, ""
}

// probe makes and removes a group with limits, to prove the place works,
// and says whether swap can be capped there.
func (h cgroupHost) probe(name string) (swap, cloneInto bool, err error) {
	cg := h.groupFor(name)
	err = h.create(cg, cgroupLimits{memoryBytes: 64 << 20, tasks: 16})
	if err == nil {
		_, serr := os.Stat(filepath.Join(cg.Memory, "memory.swap.max"))
		swap = serr == nil
		cloneInto = startsInside(cg.Pids)
	}
	if rerr := cg.remove(); err == nil {
		err = rerr
	}
	return swap, cloneInto, err
}

// startsInside reports whether a process can be started inside the v2
// group dir.
func startsInside(dir string) bool {
	d, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer d.Close()
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(d.Fd())}
	return cmd.Run() == nil
}

func probeV1(dir, name, file string) error {
	g := filepath.Join(dir, "sandstep-"+name)
	if err := os.Mkdir(g, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	defer unix.Rmdir(g)
	_, err := os.Stat(filepath.Join(g, file))
	return err
}

// cgroupFields reads a space-separated cgroup file; missing reads empty.
func cgroupFields(path string) []string {
	b, _ := os.ReadFile(path)
	return strings.Fields(string(b))
}

func hasAll(have []string, want ...string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// errStillInside is bornInto's failure to take the calling thread back
// out of a sandbox's groups: the thread must not run anything else.
var errStillInside = errors.New("the thread that started the sandbox is still in its cgroups")

// bornInto runs start, which forks, with the calling OS thread (locked to
// its goroutine) inside the sandbox's v1 groups, and takes the thread back
// to the groups it came from after. The child is born inside, which costs
// a few writes; moving a process in after it started takes the kernel's
// cgroup_threadgroup_rwsem for writing, which waits for an RCU grace
// period: 1 to 9 ms per sandbox on this project's development machine,
// more under load. A thread moving itself through the tasks file ("0" is
// the writer) takes no such lock. The groups are made below the plugin's
// own (see detectV1), so their parents are where the thread returns.
func (cg *sandboxCgroup) bornInto(start func() error) error {
	if cg == nil || cg.Version != 1 {
		return start()
	}
	dirs := cg.dirs()
	var err error
	joined := 0
	for _, dir := range dirs {
		if err = writeCgroupFile(filepath.Join(dir, "tasks"), "0"); err != nil {
			break
		}
		joined++
	}
	if err == nil {
		err = start()
	}
	for _, dir := range dirs[:joined] {
		home := filepath.Dir(dir)
		if lerr := writeCgroupFile(filepath.Join(home, "tasks"), "0"); lerr != nil {
			return errors.Join(err, fmt.Errorf("%w: %w", errStillInside, lerr))
		}
		if rerr := reclaimThreads(dir, home); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	return err
}

// reclaimThreads moves back to home any thread of this process left in
// the group dir. The Go runtime may start a thread from the one that had
// joined the group (a new thread inherits its creator's groups): left
// there, a plugin thread would count against the sandbox and keep its
// groups from being removed. It takes the slow path of a move, but only
// when there is such a thread; a check reads one small tasks file.
func reclaimThreads(dir, home string) error {
	b, err := os.ReadFile(filepath.Join(dir, "tasks"))
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", dir, err)
	}
	for _, tid := range strings.Fields(string(b)) {
		if _, err := os.Stat("/proc/self/task/" + tid); err != nil {
			continue // not ours (bwrap), or gone
		}
		if err := writeCgroupFile(filepath.Join(home, "tasks"), tid); err != nil {
			return fmt.Errorf("taking a thread of the plugin out of %s: %w", dir, err)
		}
	}
	return nil
}

// confine puts a starting sandbox (bwrap and the agent, its pid 1) into
// its groups, unless it was born inside them, and out of the OOM killer's
// reach.
func confine(cg *sandboxCgroup, bornInside bool, bwrapPID, initPID int) error {
	if !bornInside {
		if err := cg.attach(bwrapPID, initPID); err != nil {
			return fmt.Errorf("moving the sandbox into its cgroups: %w", err)
		}
	}
	return shieldFromOOM(bwrapPID, initPID)
}
