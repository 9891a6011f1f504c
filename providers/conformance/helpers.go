package conformance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"maps"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandstep/sandstep/providers"
)

// Labels the suite puts on what it creates. The owner is not "sandstep", so
// a deployment's reaper, which matches its own sandboxes against its
// ledger, never mistakes a running conformance sandbox for an orphan.
const (
	ownerValue = "sandstep-conformance"
	labelRun   = "sandstep.conformance.run"
	labelCase  = "sandstep.conformance.case"
	// labelKind tells apart resources of one case in a list filter.
	labelKind = "sandstep.conformance.kind"
)

// workspace is the default working directory of every sandbox (see
// providers.ExecRequest.Cwd).
const workspace = "/workspace"

// fix is what a case works with: its T, the provider, its context and the
// run's environment.
type fix struct {
	t    T
	p    providers.Provider
	e    *env
	ctx  context.Context
	name string
	seq  atomic.Int64
}

func newFix(t T, p providers.Provider) *fix {
	e, name := envOf(t)
	f := &fix{t: t, p: p, e: e, ctx: t.Context(), name: name}
	if e.info.Name == "" {
		// Called outside Run/RunAll: learn the capabilities here.
		info, err := p.Info(f.ctx)
		if err != nil {
			t.Fatalf("Info: %v", err)
		}
		e.info = info
	}
	if e.info.Capabilities.ListByLabels {
		// Registered first so that it runs last: a create that failed on
		// our side but happened on the provider's still gets terminated.
		t.Cleanup(f.sweep)
	}
	return f
}

func (f *fix) caps() providers.Capabilities { return f.e.info.Capabilities }

// labels returns the labels of everything this case creates.
func (f *fix) labels() map[string]string {
	l := maps.Clone(f.e.opts.Labels)
	if l == nil {
		l = map[string]string{}
	}
	l[providers.LabelOwner] = ownerValue
	l[labelRun] = f.e.runID
	l[labelCase] = f.name
	return l
}

// unique returns a name no other case or run uses, for sandbox names and
// volume and snapshot slugs.
func (f *fix) unique(kind string) string {
	return fmt.Sprintf("cf-%s-%s-%s%d", f.e.runID, f.name, kind, f.seq.Add(1))
}

// cleanupCtx is for work done in Cleanup, after the case's own context may
// have ended.
func (f *fix) cleanupCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(f.ctx), f.e.cleanupTimeout)
}

func (f *fix) sweep() {
	ctx, cancel := f.cleanupCtx()
	defer cancel()
	sel := map[string]string{labelRun: f.e.runID, labelCase: f.name}
	sbs, err := f.p.List(ctx, providers.ListFilter{Labels: sel})
	if err != nil {
		f.t.Errorf("cleanup: List: %v", err)
		return
	}
	for _, sb := range sbs {
		f.t.Logf("cleanup: sandbox %s was left alive; terminating it", sb.ID)
		if err := f.p.Terminate(ctx, sb.ID); err != nil {
			f.t.Errorf("cleanup: Terminate(%s): %v", sb.ID, err)
		}
	}
}

// create starts a sandbox that is terminated when the case ends, whatever
// its outcome. The run's labels are added to spec's, and a lifetime is set
// so that even a sandbox the suite fails to terminate goes away by itself.
func (f *fix) create(spec providers.CreateSpec) providers.Sandbox {
	f.t.Helper()
	sb, err := f.tryCreate(spec)
	if err != nil {
		f.t.Fatalf("Create: %v", err)
	}
	return sb
}

func (f *fix) tryCreate(spec providers.CreateSpec) (providers.Sandbox, error) {
	l := f.labels()
	maps.Copy(l, spec.Labels)
	spec.Labels = l
	if spec.Lifetime == 0 {
		spec.Lifetime = 15 * time.Minute
		if m := f.caps().MaxLifetime; m > 0 && m < spec.Lifetime {
			spec.Lifetime = m
		}
	}
	sb, err := f.p.Create(f.ctx, spec)
	if err != nil {
		return sb, err
	}
	f.t.Cleanup(func() { f.terminateNow(sb.ID) })
	return sb, nil
}

func (f *fix) terminateNow(id string) {
	ctx, cancel := f.cleanupCtx()
	defer cancel()
	if err := f.p.Terminate(ctx, id); err != nil {
		f.t.Errorf("cleanup: Terminate(%s): %v", id, err)
	}
}

// sandbox starts a plain sandbox.
func (f *fix) sandbox() providers.Sandbox {
	f.t.Helper()
	return f.create(providers.CreateSpec{})
}

// volume creates a volume that is deleted when the case ends. Create the
// volume before the sandboxes that mount it, so that they are terminated
// first.
func (f *fix) volume() providers.Volume {
	f.t.Helper()
	slug := f.unique("v")
	v, err := f.p.CreateVolume(f.ctx, providers.VolumeSpec{Slug: slug, Labels: f.labels()})
	if err != nil {
		f.t.Fatalf("CreateVolume(%s): %v", slug, err)
	}
	f.t.Cleanup(func() {
		ctx, cancel := f.cleanupCtx()
		defer cancel()
		if err := f.p.DeleteVolume(ctx, slug); err != nil {
			f.t.Errorf("cleanup: DeleteVolume(%s): %v", slug, err)
		}
	})
	return v
}

// deleteSnapshotLater deletes a snapshot when the case ends, built or not.
func (f *fix) deleteSnapshotLater(slug string) {
	f.t.Cleanup(func() {
		ctx, cancel := f.cleanupCtx()
		defer cancel()
		if err := f.p.DeleteSnapshot(ctx, slug); err != nil {
			f.t.Errorf("cleanup: DeleteSnapshot(%s): %v", slug, err)
		}
	})
}

// execResult is a finished command with its output.
type execResult struct {
	providers.ExecResult
	Stdout, Stderr string
}

// exec runs req and returns its result; a transport or sandbox error is
// fatal. Output goes to buffers unless req sets its own writers. A request
// without a timeout gets one so that a hung command cannot hang the case.
func (f *fix) exec(id string, req providers.ExecRequest) execResult {
	f.t.Helper()
	r, err := f.tryExec(id, req)
	if err != nil {
		f.t.Fatalf("Exec(%s): %v", describe(req), err)
	}
	return r
}

func (f *fix) tryExec(id string, req providers.ExecRequest) (execResult, error) {
	var stdout, stderr bytes.Buffer
	if req.Stdout == nil {
		req.Stdout = &stdout
	}
	if req.Stderr == nil {
		req.Stderr = &stderr
	}
	if req.Timeout == 0 {
		req.Timeout = f.e.scale(time.Minute)
	}
	res, err := f.p.Exec(f.ctx, id, req)
	return execResult{ExecResult: res, Stdout: stdout.String(), Stderr: stderr.String()}, err
}

// sh runs a shell script that must exit 0 and returns its stdout.
func (f *fix) sh(id, script string) string {
	f.t.Helper()
	r := f.exec(id, providers.ExecRequest{Shell: script})
	if r.ExitCode != 0 || r.TimedOut {
		f.t.Fatalf("%s: exit %d (timed out %v, signal %q); stderr: %s", describe(providers.ExecRequest{Shell: script}), r.ExitCode, r.TimedOut, r.Signal, clip(r.Stderr))
	}
	return r.Stdout
}

// put writes a file through the provider's file API or, for a provider
// without one, through exec as the host would.
func (f *fix) put(id, path string, mode uint32, r io.Reader) error {
	if f.caps().FileAPI {
		return f.p.WriteFile(f.ctx, id, providers.WriteFileRequest{Path: path, Mode: mode, Content: r})
	}
	if mode == 0 {
		mode = 0o644
	}
	res, err := f.tryExec(id, providers.ExecRequest{
		Shell: `mkdir -p -- "$(dirname -- "$P")" && cat > "$P" && chmod "$M" "$P"`,
		Env:   map[string]string{"P": path, "M": strconv.FormatUint(uint64(mode), 8)},
		Stdin: r,
	})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("writing %s through exec: exit %d: %s", path, res.ExitCode, clip(res.Stderr))
	}
	return err
}

// get reads a file through the provider's file API or through exec.
func (f *fix) get(id string, req providers.ReadFileRequest, w io.Writer) (int64, error) {
	if f.caps().FileAPI {
		return f.p.ReadFile(f.ctx, id, req, w)
	}
	script := `[ -f "$P" ] || { echo "no file $P" >&2; exit 44; }; tail -c +$((O + 1)) -- "$P"`
	if req.Limit > 0 {
		script += ` | head -c "$L"`
	}
	cw := &countWriter{w: w}
	res, err := f.tryExec(id, providers.ExecRequest{
		Shell:  script,
		Env:    map[string]string{"P": req.Path, "O": strconv.FormatInt(req.Offset, 10), "L": strconv.FormatInt(req.Limit, 10)},
		Stdout: cw,
	})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("reading %s through exec: exit %d: %s", req.Path, res.ExitCode, clip(res.Stderr))
	}
	return cw.n, err
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

func (f *fix) writeFile(id, path string, content []byte) {
	f.t.Helper()
	if err := f.put(id, path, 0, bytes.NewReader(content)); err != nil {
		f.t.Fatalf("WriteFile(%s): %v", path, err)
	}
}

func (f *fix) readFile(id string, req providers.ReadFileRequest) []byte {
	f.t.Helper()
	var b bytes.Buffer
	n, err := f.get(id, req, &b)
	if err != nil {
		f.t.Fatalf("ReadFile(%s, offset %d, limit %d): %v", req.Path, req.Offset, req.Limit, err)
	}
	if n != int64(b.Len()) {
		f.t.Errorf("ReadFile(%s) returned n=%d but wrote %d bytes", req.Path, n, b.Len())
	}
	return b.Bytes()
}

// wantCode checks that err carries code.
func (f *fix) wantCode(what string, err error, code providers.Code) {
	f.t.Helper()
	if err == nil {
		f.t.Errorf("%s: succeeded, want a %s error", what, code)
		return
	}
	if got := providers.CodeOf(err); got != code {
		f.t.Errorf("%s: error code %s, want %s (error: %v)", what, got, code, err)
	}
}

func describe(req providers.ExecRequest) string {
	if req.Shell != "" {
		return fmt.Sprintf("sh -c %q", clip(req.Shell))
	}
	return fmt.Sprintf("%q", req.Argv)
}

// clip shortens s for a message.
func clip(s string) string {
	const n = 300
	if len(s) <= n {
		return s
	}
	return s[:n] + fmt.Sprintf("... (%d bytes)", len(s))
}

// payload returns a deterministic reader of n pseudo-random bytes and the
// SHA-256 they hash to, computed as the bytes are read.
type payload struct {
	r    io.Reader
	hash hash.Hash
}

func newPayload(seed uint64, n int64) *payload {
	var key [32]byte
	key[0] = byte(seed)
	key[1] = byte(seed >> 8)
	h := sha256.New()
	src := rand.NewChaCha8(key)
	return &payload{r: io.TeeReader(io.LimitReader(src, n), h), hash: h}
}

func (p *payload) Read(b []byte) (int, error) { return p.r.Read(b) }

func (p *payload) sum() [32]byte { return [32]byte(p.hash.Sum(nil)) }

// hashWriter counts and hashes what is written to it.
type hashWriter struct {
	h hash.Hash
	n int64
}

func newHashWriter() *hashWriter { return &hashWriter{h: sha256.New()} }

func (w *hashWriter) Write(b []byte) (int, error) {
	w.n += int64(len(b))
	return w.h.Write(b)
}

func (w *hashWriter) sum() [32]byte { return [32]byte(w.h.Sum(nil)) }

// eventLog records the order in which things happened, across goroutines.
type eventLog struct {
	mu  sync.Mutex
	evs []string
}

func (l *eventLog) add(ev string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs = append(l.evs, ev)
}

func (l *eventLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.evs, " -> ")
}
