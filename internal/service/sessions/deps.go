package sessions

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/providers"
)

// SnapshotRoot is where the dependencies live in a snapshot: the local
// provider mounts a snapshot's tree there and lets its setup commands
// write it; a Deno snapshot is a whole root file system, so any path does.
const SnapshotRoot = "/opt/sandstep/snapshot"

// startRoot is where dependencies go when the provider has no snapshots
// and every sandbox installs them as it starts: /tmp is writable in every
// sandbox.
const startRoot = "/tmp/sandstep-deps"

// recipe changes whenever the setup commands change, so that a snapshot
// built by older commands is never reused.
const recipe = "sandstep-deps-1"

// SnapshotBuildTimeout bounds one snapshot build.
const SnapshotBuildTimeout = 20 * time.Minute

// Dependency modes, as a session shows them.
const (
	DepsNone     = "none"
	DepsSnapshot = "snapshot"
	// DepsAtStart: the provider has no snapshots; each sandbox installs
	// the dependencies when it starts.
	DepsAtStart = "installed_at_start"
)

// deps is what the configured dependencies turn into.
type deps struct {
	// packages are the specs, sorted: the snapshot is named by them.
	packages   []string
	slug       string
	deployment string
	// buildEnv ([sessions] build_env: a proxy, a CA bundle) is exported to
	// the package managers' commands only, never into a snapshot's or a
	// sandbox's environment; it does not name the snapshot, since it does
	// not change what is installed.
	buildEnv map[string]string
}

// planDeps names the snapshot by the deployment as well as the packages:
// each deployment owns its snapshots (and deletes them when unused) even
// where two share a provider account and the same dependency list.
func planDeps(deployment string, list []config.SessionDependency) deps {
	d := deps{deployment: deployment}
	for _, dep := range list {
		d.packages = append(d.packages, dep.Package)
	}
	slices.Sort(d.packages)
	sum := sha256.Sum256([]byte(recipe + "\n" + deployment + "\n" + strings.Join(d.packages, "\n")))
	d.slug = "deps-" + hex.EncodeToString(sum[:])[:20]
	return d
}

// setup returns the commands that install the packages under root, and
// the environment that finds them there.
func (d deps) setup(root string) ([]string, map[string]string) {
	var npm, pip []string
	for _, p := range d.packages {
		switch {
		case strings.HasPrefix(p, "pip:"):
			pip = append(pip, strings.TrimPrefix(p, "pip:"))
		default:
			npm = append(npm, strings.TrimPrefix(p, "npm:"))
		}
	}
	cmds := []string{"mkdir -p " + shellQuote(root)}
	env := map[string]string{}
	export := ""
	if len(d.buildEnv) > 0 {
		export = "export"
		for _, k := range slices.Sorted(maps.Keys(d.buildEnv)) {
			export += " " + k + "=" + shellQuote(d.buildEnv[k])
		}
		export += " && "
	}
	if len(npm) > 0 {
		dir := root + "/node"
		cmds = append(cmds, export+"mkdir -p "+shellQuote(dir)+" && npm install --prefix "+shellQuote(dir)+
			" --no-audit --no-fund --no-update-notifier --loglevel=error "+shellQuoteAll(npm))
		env["NODE_PATH"] = dir + "/node_modules"
	}
	if len(pip) > 0 {
		dir := root + "/python"
		cmds = append(cmds, export+"python3 -m pip install --no-input --disable-pip-version-check --quiet --target "+
			shellQuote(dir)+" "+shellQuoteAll(pip))
		env["PYTHONPATH"] = dir
	}
	manifest, _ := json.Marshal(map[string]any{"slug": d.slug, "packages": nonNil(d.packages)})
	cmds = append(cmds, "printf '%s\\n' "+shellQuote(string(manifest))+" > "+shellQuote(root+"/sandstep-deps.json"))
	return cmds, env
}

func (d deps) snapshotSpec() providers.SnapshotSpec {
	cmds, env := d.setup(SnapshotRoot)
	return providers.SnapshotSpec{
		Slug:  d.slug,
		Setup: cmds,
		Env:   env,
		// Not the owner label: a provider that labelled its builder
		// sandbox with it would show the reaper a sandbox no ledger knows.
		Labels:  snapshotLabels(d.deployment),
		Timeout: SnapshotBuildTimeout,
	}
}

// LabelSnapshot marks what a snapshot holds; its value for dependency
// snapshots is SnapshotKindDependencies.
const (
	LabelSnapshot            = "sandstep.snapshot"
	SnapshotKindDependencies = "session-dependencies"
)

// snapshotLabels select this deployment's dependency snapshots.
func snapshotLabels(deployment string) map[string]string {
	return map[string]string{LabelSnapshot: SnapshotKindDependencies, providers.LabelDeployment: deployment}
}

// snapshotFlight is one build that concurrent first runs wait for.
type snapshotFlight struct {
	done chan struct{}
	err  error
}

// EnsureSnapshot makes sure the dependency snapshot exists, building it if
// needed. Concurrent callers in this process wait for one build; the
// provider makes builds from several processes build once. The build goes
// on when a caller gives up waiting. A failed build is remembered for
// [sessions] snapshot_retry_after: callers meanwhile get its error at once.
// Without snapshot support it does nothing: sandboxes install the
// dependencies as they start.
func (s *Service) EnsureSnapshot(ctx context.Context) error {
	f, err := s.startSnapshot(ctx)
	if f == nil || err != nil {
		return err
	}
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return &Error{Kind: KindUnavailable, Message: "the dependency snapshot is still being built; retry shortly", Err: ctx.Err()}
	}
}

// StartSnapshot begins building the dependency snapshot, if it is not
// there, without waiting for it: the first runs wait instead. A failed
// build is logged, and runs report it.
func (s *Service) StartSnapshot(ctx context.Context) error {
	_, err := s.startSnapshot(ctx)
	if KindOf(err) == KindUnavailable && s.snapshotFailed() {
		return nil // remembered: the runs say it
	}
	return err
}

// startSnapshot returns the build in flight, starting one if needed, or
// nil when the snapshot is known to exist or not needed; or the failure of
// a recent build.
func (s *Service) startSnapshot(ctx context.Context) (*snapshotFlight, error) {
	if !s.cfg.Enabled {
		return nil, ErrDisabled
	}
	caps, err := s.capabilities(ctx)
	if err != nil || !caps.Snapshots {
		return nil, err
	}
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	if s.snapReady {
		return nil, nil
	}
	if s.snapFlight != nil {
		return s.snapFlight, nil
	}
	if f := s.snapFailure; f != nil {
		if now, until := time.Now(), f.at.Add(s.cfg.SnapshotRetryAfter.D()); now.Before(until) {
			return nil, f.again(now, until)
		}
		s.snapFailure = nil
	}
	f := &snapshotFlight{done: make(chan struct{})}
	s.snapFlight = f
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		bctx, cancel := context.WithTimeout(s.base, SnapshotBuildTimeout+time.Minute)
		err := s.buildSnapshot(bctx)
		cancel()
		s.snapMu.Lock()
		s.snapFlight = nil
		s.snapReady = err == nil
		f.err = err
		var failed *snapshotFailure
		if errors.As(err, &failed) {
			f.err = failed.again(failed.at, failed.at.Add(s.cfg.SnapshotRetryAfter.D()))
			if s.base.Err() == nil { // a build cut by shutdown is no verdict
				s.snapFailure = failed
			}
		}
		s.snapMu.Unlock()
		close(f.done)
	}()
	return f, nil
}

func (s *Service) snapshotFailed() bool {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	return s.snapFailure != nil
}

// snapshotFailure is a build the provider ran and that failed: what the
// client is told (the build's last lines of output) and when it happened.
type snapshotFailure struct {
	at      time.Time
	message string
	err     error
}

func (f *snapshotFailure) Error() string { return f.message }
func (f *snapshotFailure) Unwrap() error { return f.err }

// again is the failure as a run sees it at now, until is when the next
// run builds again.
func (f *snapshotFailure) again(now, until time.Time) *Error {
	msg := f.message
	left := until.Sub(now)
	if left > 0 {
		msg += fmt.Sprintf("\n(the build failed at %s; runs until %s get this answer without building again: fix the cause and restart the server to build sooner)",
			f.at.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339))
	}
	return &Error{Kind: KindUnavailable, Message: msg, Err: f.err, RetryAfter: left}
}

// buildOutputLines is how many of the provider's last lines of a failed
// build reach the client.
const buildOutputLines = 30

func (s *Service) buildSnapshot(ctx context.Context) error {
	snap, err := s.prov.GetSnapshot(ctx, s.deps.slug)
	if err == nil {
		return s.recordSnapshot(ctx, snap, false)
	}
	if !providers.IsNotFound(err) {
		return &Error{Kind: KindUnavailable, Message: "the sandbox provider does not answer", Err: s.hide(err)}
	}
	s.snapshotBuilds.Add(1)
	s.log.Info("building the dependency snapshot", "snapshot", s.deps.slug, "packages", len(s.deps.packages))
	start := time.Now()
	snap, err = s.prov.EnsureSnapshot(ctx, s.deps.snapshotSpec())
	if err != nil {
		shown := s.buildRedact.Error(err)
		s.log.Error("dependency snapshot build failed", "snapshot", s.deps.slug, "err", shown)
		if ctx.Err() != nil {
			return &Error{Kind: KindUnavailable, Message: fmt.Sprintf("the dependency snapshot %s could not be built in time", s.deps.slug), Err: s.hideBuild(err)}
		}
		return &snapshotFailure{
			at:      time.Now(),
			message: fmt.Sprintf("the dependency snapshot %s could not be built:\n%s", s.deps.slug, lastLines(shown, buildOutputLines)),
			err:     s.hideBuild(err),
		}
	}
	s.log.Info("dependency snapshot built", "snapshot", s.deps.slug, "took", time.Since(start))
	return s.recordSnapshot(ctx, snap, true)
}

// recordSnapshot notes the dependency snapshot in the store where the
// provider cannot list snapshots by label, so that CollectSnapshots finds
// it once a later configuration replaced it. It is written before any
// sandbox boots from the snapshot: none can be missed. built: this
// process built it (again), rather than found it.
func (s *Service) recordSnapshot(ctx context.Context, snap providers.Snapshot, built bool) error {
	caps, err := s.capabilities(ctx)
	if err != nil {
		return &Error{Kind: KindUnavailable, Message: "the sandbox provider does not answer", Err: s.hide(err)}
	}
	if caps.ListSnapshots {
		return nil
	}
	at := snap.CreatedAt
	if at.IsZero() {
		at = time.Now()
	}
	if err := s.st.RecordSnapshot(ctx, s.deployment, s.deps.slug, at, built); err != nil {
		return &Error{Kind: KindUnavailable, Message: "the dependency snapshot could not be recorded", Err: err}
	}
	return nil
}

// lastLines keeps the last n lines of s, at most MaxErrorBytes/2 bytes of
// them, saying what was cut.
func lastLines(s string, n int) string {
	s = strings.TrimRight(s, "\n")
	lines := strings.Split(s, "\n")
	cut := ""
	if len(lines) > n {
		cut = fmt.Sprintf("[%d earlier lines left out]\n", len(lines)-n)
		lines = lines[len(lines)-n:]
	}
	out := strings.Join(lines, "\n")
	if limit := MaxErrorBytes / 2; len(out) > limit {
		start := len(out) - limit
		for start < len(out) && !utf8.RuneStart(out[start]) {
			start++
		}
		out, cut = out[start:], "[…]"
	}
	return cut + out
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func shellQuoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = shellQuote(s)
	}
	return strings.Join(q, " ")
}

func nonNil[T any](v []T) []T {
	if v == nil {
		return []T{}
	}
	return v
}
