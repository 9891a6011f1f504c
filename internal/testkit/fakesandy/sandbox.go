package fakesandy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandstep/sandstep/internal/testkit/bwrapbox"
)

// sandbox is one fake sandbox. Fields after the first group are guarded by
// Server.mu.
type sandbox struct {
	id          string
	dir         string // holds workspace/, tmp/ and home/
	marker      string // NAME=value in the environment of each of its processes
	createdAt   time.Time
	timeoutAt   time.Time
	priority    int
	preemptable bool
	flavor      string
	upstream    string
	warmupFails int
	teardown    sync.Once
	expiry      *time.Timer

	execs       int
	terminating bool // terminated: only GET still finds it, until teardown ends
}

// markerName is the environment variable that names a process's sandbox.
const markerName = "SANDY_FAKE_SANDBOX"

// mounts are the sandbox's own directories and where commands see them.
var mounts = []struct{ at, sub string }{
	{"/workspace", "workspace"},
	{"/tmp", "tmp"},
	{"/root", "home"},
}

var priorityNames = []string{"CRITICAL", "HIGH", "NORMAL", "LOW"}

// mountArgs binds a sandbox's directories and sets the working directory.
func mountArgs(dir, cwd string) []string {
	var args []string
	for _, m := range mounts {
		args = append(args, "--bind", filepath.Join(dir, m.sub), m.at)
	}
	return append(args, "--chdir", cwd)
}

func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request) {
	fields, err := decodeBody(r)
	if err != nil {
		badBody(w, err)
		return
	}
	priority, preemptable, flavor, upstream, ttl := 2, false, "", "", 0
	if !field(w, fields, "priority", &priority, "Input should be a valid integer") ||
		!field(w, fields, "preemptable", &preemptable, "Input should be a valid boolean") ||
		!field(w, fields, "flavor", &flavor, "Input should be a valid string") ||
		!field(w, fields, "upstream", &upstream, "Input should be a valid string") ||
		!field(w, fields, "ttl_seconds", &ttl, "Input should be a valid integer") {
		return
	}
	if priority < 0 || priority > 3 {
		validationError(w, "priority", "Input should be 0, 1, 2 or 3", priority)
		return
	}
	lifetime := s.opts.DefaultTTL
	if ttl > 0 {
		lifetime = time.Duration(ttl) * time.Second
	}

	s.mu.Lock()
	live := 0
	for _, sb := range s.sandboxes {
		if !sb.terminating {
			live++
		}
	}
	if s.opts.MaxSandboxes > 0 && live >= s.opts.MaxSandboxes {
		s.mu.Unlock()
		writeDetail(w, http.StatusTooManyRequests, "Cannot create sandbox: capacity reached")
		return
	}
	id := randomHex(6)
	for s.sandboxes[id] != nil {
		id = randomHex(6)
	}
	now := time.Now().UTC().Truncate(time.Second)
	sb := &sandbox{
		id:          id,
		dir:         filepath.Join(s.dir, id),
		marker:      markerName + "=" + s.instance + "-" + id,
		createdAt:   now,
		timeoutAt:   now.Add(lifetime),
		priority:    priority,
		preemptable: preemptable,
		flavor:      flavor,
		upstream:    upstream,
		warmupFails: s.faults.WarmupExecFailures,
	}
	s.sandboxes[id] = sb
	s.mu.Unlock()

	for _, m := range mounts {
		if err := os.MkdirAll(filepath.Join(sb.dir, m.sub), 0o755); err != nil {
			s.destroy(sb)
			writeDetail(w, http.StatusInternalServerError, "creating the sandbox failed: "+err.Error())
			return
		}
	}
	s.mu.Lock()
	if s.sandboxes[id] == sb {
		sb.expiry = time.AfterFunc(time.Until(sb.timeoutAt), func() {
			if s.begin() {
				defer s.end()
				s.destroy(sb)
			}
		})
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, s.describe(sb, false))
}

func (s *Server) describe(sb *sandbox, withStatus bool) map[string]any {
	m := map[string]any{
		"sandboxId": sb.id,
		"url":       "https://" + sb.id + s.opts.HostSuffix,
		"createdAt": sb.createdAt.Format(time.RFC3339),
		"timeoutAt": sb.timeoutAt.Format(time.RFC3339),
		"upstream":  sb.upstream,
	}
	if sb.flavor != "" {
		m["flavor"] = sb.flavor
	}
	if withStatus {
		m["status"] = "running"
	}
	return m
}

// find returns a sandbox calls can reach; a terminated one only for GET,
// while its teardown lasts.
func (s *Server) find(id string, evenTerminated bool) *sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.sandboxes[id]
	if sb == nil || (sb.terminating && !evenTerminated) {
		return nil
	}
	return sb
}

func notFound(w http.ResponseWriter) { writeDetail(w, http.StatusNotFound, "Sandbox not found") }

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	sb := s.find(r.PathValue("id"), true)
	if sb == nil {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, s.describe(sb, true))
}

func (s *Server) handleTerminate(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	sb := s.sandboxes[r.PathValue("id")]
	if sb == nil {
		s.mu.Unlock()
		notFound(w)
		return
	}
	first := !sb.terminating
	sb.terminating = true
	delay := s.faults.TeardownDelay.D()
	s.mu.Unlock()
	if first {
		s.tearDown(sb)
		if delay > 0 {
			time.AfterFunc(delay, func() { s.forget(sb) })
		} else {
			s.forget(sb)
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "terminated"})
}

// destroy makes a sandbox vanish at once (expiry, preemption, Close).
func (s *Server) destroy(sb *sandbox) {
	s.mu.Lock()
	sb.terminating = true
	s.mu.Unlock()
	s.forget(sb)
	s.tearDown(sb)
}

func (s *Server) forget(sb *sandbox) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sandboxes[sb.id] == sb {
		delete(s.sandboxes, sb.id)
	}
}

// tearDown kills the sandbox's processes before it returns and removes its
// directory in the background.
func (s *Server) tearDown(sb *sandbox) {
	sb.teardown.Do(func() {
		s.mu.Lock()
		if sb.expiry != nil {
			sb.expiry.Stop()
		}
		s.mu.Unlock()
		bwrapbox.KillMarked(sb.marker)
		s.mu.Lock()
		s.busy++
		s.mu.Unlock()
		go func() {
			defer s.end()
			_ = os.RemoveAll(sb.dir)
		}()
	})
}

// maxOutput caps what one exec keeps of each stream.
const maxOutput = 64 << 20

type cappedBuffer struct{ bytes.Buffer }

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := maxOutput - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

var warmupMessages = []string{"vsock handshake failed", "agent not ready"}

func (s *Server) handleExec(w http.ResponseWriter, r *http.Request) {
	sb := s.find(r.PathValue("id"), false)
	if sb == nil {
		notFound(w)
		return
	}
	fields, err := decodeBody(r)
	if err != nil {
		badBody(w, err)
		return
	}
	var (
		command   *string
		cwd       string
		env       map[string]string
		timeoutMs *int64
	)
	if !field(w, fields, "command", &command, "Input should be a valid string") ||
		!field(w, fields, "cwd", &cwd, "Input should be a valid string") ||
		!field(w, fields, "env", &env, "Input should be a valid dictionary of strings") ||
		!field(w, fields, "timeoutMs", &timeoutMs, "Input should be a valid integer") {
		return
	}
	if command == nil {
		validationError(w, "command", "Field required", nil)
		return
	}
	s.mu.Lock()
	sb.execs++
	n := sb.execs
	s.mu.Unlock()
	if n <= sb.warmupFails {
		writeJSON(w, http.StatusOK, map[string]any{"stdout": "", "stderr": warmupMessages[(n-1)%len(warmupMessages)], "exitCode": 1})
		return
	}
	timeout := s.opts.MissingTimeout
	if timeoutMs != nil {
		timeout = time.Duration(*timeoutMs) * time.Millisecond
	}
	switch {
	case cwd == "":
		cwd = "/workspace"
	case !path.IsAbs(cwd):
		cwd = path.Join("/workspace", cwd)
	}
	stdout, stderr, code := s.run(r.Context(), sb, *command, cwd, env, timeout)
	writeJSON(w, http.StatusOK, map[string]any{"stdout": stdout, "stderr": stderr, "exitCode": code})
}

// run runs command in the sandbox and returns its output as text (invalid
// UTF-8 turns into U+FFFD when encoded, as with a text API) and its exit
// code: 128+n when the shell was killed by signal n, negative when the
// process itself was, 124 after the timeout.
func (s *Server) run(ctx context.Context, sb *sandbox, command, cwd string, env map[string]string, timeout time.Duration) (string, string, int) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	args := append(slices.Clone(s.rootArgs), mountArgs(sb.dir, cwd)...)
	args = append(args, "--", "/bin/sh", "-c", command)
	cmd := exec.CommandContext(ctx, s.bwrap, args...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8"}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	cmd.Env = append(cmd.Env, sb.marker)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A background process that keeps the output pipes open does not hold
	// the answer back for long.
	cmd.WaitDelay = 500 * time.Millisecond
	var stdout, stderr cappedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		if stderr.Len() > 0 && !bytes.HasSuffix(stderr.Bytes(), []byte("\n")) {
			stderr.WriteString("\n")
		}
		fmt.Fprintf(&stderr, "Command timed out after %s", timeout)
		code = 124
	case cmd.ProcessState != nil:
		ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
		code = ws.ExitStatus()
		if ws.Signaled() {
			code = -int(ws.Signal())
		}
	case err != nil:
		fmt.Fprintf(&stderr, "exec failed: %v", err)
		code = -1
	}
	return stdout.String(), stderr.String(), code
}

func (s *Server) handleResources(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	live := 0
	breakdown := map[string]int{}
	for _, sb := range s.sandboxes {
		if !sb.terminating {
			live++
			breakdown[priorityNames[sb.priority]]++
		}
	}
	s.mu.Unlock()
	can := s.opts.MaxSandboxes == 0 || live < s.opts.MaxSandboxes
	var reject any
	if !can {
		reject = "capacity reached"
	}
	limits := map[string]any{}
	if s.opts.MaxSandboxes > 0 {
		limits["maxSandboxes"] = s.opts.MaxSandboxes
	}
	out := map[string]any{
		"canCreateSandbox":  can,
		"rejectReason":      reject,
		"limits":            limits,
		"priorityBreakdown": breakdown,
		"cpuCount":          runtime.NumCPU(),
		"cpu_percent":       0.0,
	}
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) == nil {
		unit := uint64(si.Unit)
		total, free := si.Totalram*unit, si.Freeram*unit
		out["memoryTotalBytes"] = total
		out["memoryAvailableBytes"] = free
		out["memoryUsedBytes"] = total - free
		out["memory_percent"] = 100 * float64(total-free) / float64(max(total, 1))
		const scale = 1 << 16 // load averages are fixed point
		out["load1"] = float64(si.Loads[0]) / scale
		out["load5"] = float64(si.Loads[1]) / scale
		out["load15"] = float64(si.Loads[2]) / scale
	}
	var st syscall.Statfs_t
	if syscall.Statfs(s.dir, &st) == nil {
		bs := uint64(st.Bsize)
		total, free := st.Blocks*bs, st.Bavail*bs
		out["diskTotalBytes"] = total
		out["diskFreeBytes"] = free
		out["diskUsedBytes"] = total - free
		out["diskUsedRatio"] = float64(total-free) / float64(max(total, 1))
	}
	writeJSON(w, http.StatusOK, out)
}

// handleStats answers with Sandy's snake_case stats, for the sandboxes
// named in ids or every live one.
func (s *Server) handleStats(w http.ResponseWriter, r *http.Request) {
	var want []string
	if ids := r.URL.Query().Get("ids"); ids != "" {
		want = strings.Split(ids, ",")
	}
	s.mu.Lock()
	var sbs []*sandbox
	for id, sb := range s.sandboxes {
		if !sb.terminating && (want == nil || slices.Contains(want, id)) {
			sbs = append(sbs, sb)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(sbs, func(a, b *sandbox) int { return strings.Compare(a.id, b.id) })
	out := make([]map[string]any, 0, len(sbs))
	for _, sb := range sbs {
		var disk int64
		_ = filepath.WalkDir(sb.dir, func(_ string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if info, err := d.Info(); err == nil {
					disk += info.Size()
				}
			}
			return nil
		})
		out = append(out, map[string]any{
			"sandbox_id":         sb.id,
			"container_id":       nil,
			"cpu_ratio":          0.0,
			"cpu_cores_used":     0.0,
			"cpu_cores_total":    runtime.NumCPU(),
			"memory_usage_bytes": 0,
			"memory_limit_bytes": 0,
			"memory_ratio":       0.0,
			"disk_bytes":         disk,
			"updated_at":         time.Now().UTC().Format(time.RFC3339),
		})
	}
	writeJSON(w, http.StatusOK, out)
}
