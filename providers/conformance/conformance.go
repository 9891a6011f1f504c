package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"path"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstep/sandstep/providers"
)

// T is what a case reports to. *testing.T satisfies it, and so does the
// runner RunAll uses outside of go test. As with *testing.T, Fatalf and
// Skipf end the calling goroutine, so cases call them only from the
// goroutine that runs the case; helpers they start use Errorf.
type T interface {
	Helper()
	Name() string
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
	Cleanup(func())
	// Context is cancelled when the case's time is up. Cleanup functions
	// must not rely on it: go test cancels it before they run.
	Context() context.Context
}

// Case is one conformance check.
type Case struct {
	Name string
	// Requires says whether the provider can run the case at all, from the
	// capabilities it claims; nil means every provider must pass it.
	Requires func(providers.Capabilities) bool
	// Heavy cases move tens of megabytes or start many sandboxes at once.
	// Options.Short skips them, and they never run beside other cases.
	Heavy bool
	// NeedsHost cases reach the servers of Options.Fixture on this
	// machine's loopback; they run only with a Fixture.
	NeedsHost bool
	// Core cases check the protocol itself (lifecycle, names, labels,
	// codes, refusals, the file and volume APIs) and ask nothing of a
	// sandbox but that `true` exits 0; Options.Core runs only them, which
	// is what an in-memory provider or one under construction can pass.
	Core bool
	Run  func(t T, p providers.Provider)
}

// Options tune a run. The zero value runs every case with default timeouts.
type Options struct {
	// RunID tells this run's sandboxes, volumes and snapshots apart from
	// those of any other run against the same provider: it is part of every
	// name and slug and of the labels. "" picks a random one.
	RunID string
	// Labels are added to every sandbox and volume the suite creates, for
	// providers or accounts that require some.
	Labels map[string]string
	// TimeoutScale multiplies every timeout of the suite; slow remote
	// backends want more than 1. <= 0 means 1.
	TimeoutScale float64
	// CaseTimeout bounds one case before scaling; 0 means 3 minutes.
	CaseTimeout time.Duration
	// Only and Skip filter cases by name; entries are path.Match patterns
	// ("exec-*"). An empty Only selects every case.
	Only []string
	Skip []string
	// Short skips the heavy cases.
	Short bool
	// Core runs only the core cases (Case.Core).
	Core bool
	// Fixture, for providers whose sandboxes run on this machine, is what
	// the network cases reach: the harness lists Fixture.Listed in the
	// provider's allow_private before configuring it (see StartFixture).
	// Without it those cases are skipped, since from a remote sandbox a
	// refused connection proves nothing.
	Fixture *Fixture
	// FixtureDNS says the provider resolves names with Fixture.DNS, so
	// that the cases also try names, wildcards and ports.
	FixtureDNS bool
	// SnapshotDir is where snapshot setup commands put files so that
	// sandboxes booted from the snapshot see them: a path the provider
	// keeps in its snapshots. "" means DefaultSnapshotDir.
	SnapshotDir string
	// Parallel is how many cases RunAll runs at once; <= 1 runs them one by
	// one. Heavy cases always run alone. Run leaves this to go test's
	// -parallel flag.
	Parallel int
	// Verbose makes RunAll print the log lines of passing cases too.
	Verbose bool
}

// DefaultSnapshotDir is Options.SnapshotDir when unset: where the local
// provider mounts a snapshot's tree.
const DefaultSnapshotDir = "/opt/sandstep/snapshot"

// Status is a case's outcome.
type Status string

const (
	Pass Status = "PASS"
	Fail Status = "FAIL"
	Skip Status = "SKIP"
)

// Result is the outcome of one case in RunAll.
type Result struct {
	Name     string
	Status   Status
	Duration time.Duration
	// Messages are the case's errors, its skip reason and its log lines,
	// in order.
	Messages []string
}

// Summary is what RunAll returns.
type Summary struct {
	Passed, Failed, Skipped int
	Results                 []Result
}

// OK reports whether no case failed.
func (s Summary) OK() bool { return s.Failed == 0 }

// Run runs the suite as subtests of t: one per case, then a leak check.
// Light cases run in parallel (bounded by go test's -parallel); heavy ones
// run one at a time first.
func Run(t *testing.T, p providers.Provider, opts Options) {
	t.Helper()
	info, err := p.Info(t.Context())
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	e := newEnv(opts, info)
	t.Logf("conformance run %s against %s %s", e.runID, info.Name, info.Version)
	t.Run("cases", func(t *testing.T) {
		for _, c := range Cases() {
			t.Run(c.Name, func(t *testing.T) {
				if !e.selected(c.Name) {
					t.Skip("filtered out by Options.Only/Skip")
				}
				if reason := e.skipReason(c); reason != "" {
					t.Skip(reason)
				}
				if !c.Heavy {
					t.Parallel()
				}
				ctx, cancel := context.WithTimeout(t.Context(), e.caseTimeout)
				defer cancel()
				c.Run(&caseT{T: t, ctx: ctx, env: e, name: c.Name}, p)
			})
		}
	})
	t.Run("no-leaks", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), e.scale(time.Minute))
		defer cancel()
		for _, msg := range e.leaks(ctx, p) {
			t.Error(msg)
		}
	})
}

// RunAll runs the suite outside of go test, for the command line. It writes
// "conformance run ID against NAME VERSION", then, as each case ends, a
// line "PASS|FAIL|SKIP name (duration)" followed, indented, by its messages
// when it failed or was skipped (always with Options.Verbose). Each case
// runs in its own goroutine, bounded by its timeout. A final "no-leaks"
// entry checks that nothing the run created is left. Cases filtered out by
// Only/Skip are not reported at all.
func RunAll(ctx context.Context, p providers.Provider, opts Options, w io.Writer) Summary {
	var (
		sum Summary
		mu  sync.Mutex
	)
	report := func(r Result) {
		mu.Lock()
		defer mu.Unlock()
		switch r.Status {
		case Pass:
			sum.Passed++
		case Fail:
			sum.Failed++
		case Skip:
			sum.Skipped++
		}
		sum.Results = append(sum.Results, r)
		fmt.Fprintf(w, "%s %s (%s)\n", r.Status, r.Name, r.Duration.Round(time.Millisecond))
		if r.Status != Pass || opts.Verbose {
			for _, m := range r.Messages {
				fmt.Fprintf(w, "    %s\n", strings.ReplaceAll(m, "\n", "\n    "))
			}
		}
	}

	info, err := p.Info(ctx)
	if err != nil {
		report(Result{Name: "info", Status: Fail, Messages: []string{fmt.Sprintf("Info: %v", err)}})
		return sum
	}
	e := newEnv(opts, info)
	fmt.Fprintf(w, "conformance run %s against %s %s\n", e.runID, info.Name, info.Version)

	parallel := max(opts.Parallel, 1)
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for _, c := range Cases() {
		if !e.selected(c.Name) {
			continue
		}
		if reason := e.skipReason(c); reason != "" {
			report(Result{Name: c.Name, Status: Skip, Messages: []string{reason}})
			continue
		}
		// A heavy case takes every slot, so it runs alone.
		slots := 1
		if c.Heavy {
			slots = parallel
		}
		for range slots {
			sem <- struct{}{}
		}
		wg.Go(func() {
			defer func() {
				for range slots {
					<-sem
				}
			}()
			report(e.runCase(ctx, c, p))
		})
	}
	wg.Wait()

	start := time.Now()
	lctx, cancel := context.WithTimeout(ctx, e.scale(time.Minute))
	defer cancel()
	r := Result{Name: "no-leaks", Status: Pass, Messages: e.leaks(lctx, p)}
	if len(r.Messages) > 0 {
		r.Status = Fail
	}
	r.Duration = time.Since(start)
	report(r)
	return sum
}

// runCase runs one case in its own goroutine so that Fatalf and Skipf can
// end it with runtime.Goexit, as they do under go test.
func (e *env) runCase(ctx context.Context, c Case, p providers.Provider) Result {
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, e.caseTimeout)
	defer cancel()
	rt := &runT{name: c.Name, ctx: cctx}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer rt.runCleanups()
		defer func() {
			if r := recover(); r != nil {
				rt.record(Fail, fmt.Sprintf("panic: %v\n%s", r, debug.Stack()))
			}
		}()
		c.Run(&caseT{T: rt, ctx: cctx, env: e, name: c.Name}, p)
	}()
	// Past its deadline a case still gets time for its cleanups, which use
	// their own contexts; one that hangs beyond that is reported and left.
	hang := time.NewTimer(e.caseTimeout + e.cleanupTimeout)
	defer hang.Stop()
	select {
	case <-done:
	case <-hang.C:
		rt.record(Fail, fmt.Sprintf("case did not end within %s (plus %s for cleanups)", e.caseTimeout, e.cleanupTimeout))
	case <-ctx.Done():
		rt.record(Fail, fmt.Sprintf("run cancelled: %v", ctx.Err()))
	}
	return rt.result(time.Since(start))
}

// runT is the T of RunAll.
type runT struct {
	name string
	ctx  context.Context

	mu       sync.Mutex
	status   Status
	msgs     []string
	cleanups []func()
}

func (r *runT) Helper()                  {}
func (r *runT) Name() string             { return r.name }
func (r *runT) Context() context.Context { return r.ctx }

func (r *runT) Logf(format string, args ...any) { r.record("", fmt.Sprintf(format, args...)) }

func (r *runT) Errorf(format string, args ...any) { r.record(Fail, fmt.Sprintf(format, args...)) }

func (r *runT) Fatalf(format string, args ...any) {
	r.record(Fail, fmt.Sprintf(format, args...))
	runtime.Goexit()
}

func (r *runT) Skipf(format string, args ...any) {
	r.record(Skip, fmt.Sprintf(format, args...))
	runtime.Goexit()
}

func (r *runT) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

// record adds a message and raises the status: a failure is never
// overturned by a later skip.
func (r *runT) record(s Status, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, msg)
	if s == Fail || (s == Skip && r.status != Fail) {
		r.status = s
	}
}

// runCleanups runs the cleanups last-in first-out, each in its own
// goroutine so that a Fatalf in one does not stop the others.
func (r *runT) runCleanups() {
	for {
		r.mu.Lock()
		n := len(r.cleanups)
		if n == 0 {
			r.mu.Unlock()
			return
		}
		f := r.cleanups[n-1]
		r.cleanups = r.cleanups[:n-1]
		r.mu.Unlock()
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer func() {
				if v := recover(); v != nil {
					r.record(Fail, fmt.Sprintf("panic in cleanup: %v\n%s", v, debug.Stack()))
				}
			}()
			f()
		}()
		<-done
	}
}

func (r *runT) result(d time.Duration) Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.status
	if s == "" {
		s = Pass
	}
	return Result{Name: r.name, Status: s, Duration: d, Messages: append([]string(nil), r.msgs...)}
}

// caseT carries the run's environment to the case along with the T it
// reports to, and bounds the case's context.
type caseT struct {
	T
	ctx  context.Context
	env  *env
	name string
}

func (c *caseT) Context() context.Context { return c.ctx }

// env is what one run shares among its cases.
type env struct {
	opts           Options
	info           providers.Info
	runID          string
	scaleBy        float64
	caseTimeout    time.Duration
	cleanupTimeout time.Duration
}

func newEnv(opts Options, info providers.Info) *env {
	e := &env{opts: opts, info: info, runID: opts.RunID, scaleBy: opts.TimeoutScale}
	if e.runID == "" {
		e.runID = randomID()
	}
	if e.scaleBy <= 0 {
		e.scaleBy = 1
	}
	ct := opts.CaseTimeout
	if ct <= 0 {
		ct = 3 * time.Minute
	}
	e.caseTimeout = e.scale(ct)
	e.cleanupTimeout = e.scale(time.Minute)
	return e
}

// envOf returns the run environment of t. A case called directly with a
// plain *testing.T gets a default one, so Cases stay usable on their own.
func envOf(t T) (*env, string) {
	if c, ok := t.(*caseT); ok {
		return c.env, c.name
	}
	return newEnv(Options{}, providers.Info{}), path.Base(t.Name())
}

func (e *env) scale(d time.Duration) time.Duration {
	return time.Duration(float64(d) * e.scaleBy)
}

func (e *env) selected(name string) bool {
	match := func(pats []string) bool {
		for _, p := range pats {
			if ok, _ := path.Match(p, name); ok {
				return true
			}
		}
		return false
	}
	return (len(e.opts.Only) == 0 || match(e.opts.Only)) && !match(e.opts.Skip)
}

func (e *env) skipReason(c Case) string {
	switch {
	case c.Requires != nil && !c.Requires(e.info.Capabilities):
		return "the provider does not claim the capability this case needs"
	case c.Heavy && e.opts.Short:
		return "heavy case skipped in short mode"
	case !c.Core && e.opts.Core:
		return "not a core case (Options.Core)"
	case c.NeedsHost && e.opts.Fixture == nil:
		return "needs sandboxes on this machine and a fixture in their allow_private (Options.Fixture)"
	}
	return ""
}

// leaks lists what carries this run's label after every case has cleaned
// up. Snapshots cannot be listed; each case deletes its own.
func (e *env) leaks(ctx context.Context, p providers.Provider) []string {
	var msgs []string
	sel := map[string]string{labelRun: e.runID}
	if e.info.Capabilities.ListByLabels {
		sbs, err := p.List(ctx, providers.ListFilter{Labels: sel})
		if err != nil {
			msgs = append(msgs, fmt.Sprintf("List(run %s): %v", e.runID, err))
		}
		for _, sb := range sbs {
			msgs = append(msgs, fmt.Sprintf("sandbox %s (case %q) is still alive", sb.ID, sb.Labels[labelCase]))
		}
	}
	if e.info.Capabilities.Volumes {
		vols, err := p.ListVolumes(ctx, sel)
		if err != nil {
			msgs = append(msgs, fmt.Sprintf("ListVolumes(run %s): %v", e.runID, err))
		}
		for _, v := range vols {
			msgs = append(msgs, fmt.Sprintf("volume %s (case %q) still exists", v.Slug, v.Labels[labelCase]))
		}
	}
	return msgs
}

func randomID() string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
