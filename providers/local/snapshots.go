package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandstep/sandstep/providers"
)

// LabelSnapshotBuild marks the builder sandbox of a snapshot; its value is
// the slug.
const LabelSnapshotBuild = "sandstep.snapshot-build"

// A snapshot is state_dir/snapshots/<slug>/ holding meta.json and tree/,
// which sandboxes mount read-only at SnapshotPath. It is built in
// snapshots/.build-<slug>-<id>/ and renamed into place when complete, so it
// exists whole or not at all.
type snapshotMeta struct {
	Slug      string            `json:"slug"`
	Labels    map[string]string `json:"labels,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	SizeBytes int64             `json:"size_bytes"`
	CreatedAt time.Time         `json:"created_at"`
}

func snapshotDir(s settings, slug string) string {
	return filepath.Join(s.stateDir, "snapshots", slug)
}

func snapshotTreeDir(s settings, slug string) string {
	return filepath.Join(snapshotDir(s, slug), "tree")
}

func readSnapshotMeta(s settings, slug string) (snapshotMeta, error) {
	var m snapshotMeta
	b, err := os.ReadFile(filepath.Join(snapshotDir(s, slug), "meta.json"))
	if err != nil {
		return m, err
	}
	return m, json.Unmarshal(b, &m)
}

func (m snapshotMeta) public() providers.Snapshot {
	return providers.Snapshot{Slug: m.Slug, Labels: copyMap(m.Labels), SizeBytes: m.SizeBytes, CreatedAt: m.CreatedAt}
}

// flight is one in-process build that concurrent callers for the same slug
// wait for.
type flight struct {
	done chan struct{}
	snap providers.Snapshot
	err  error
}

// EnsureSnapshot builds the snapshot unless it exists. Concurrent calls
// build once: in this process they wait for one build, across processes
// the build holds an flock on the slug's lock file.
func (p *Provider) EnsureSnapshot(ctx context.Context, spec providers.SnapshotSpec) (providers.Snapshot, error) {
	const op = "ensure_snapshot"
	s, err := p.ready()
	if err != nil {
		return providers.Snapshot{}, err
	}
	if err := checkSlug(op, "snapshot", spec.Slug); err != nil {
		return providers.Snapshot{}, err
	}
	for k, v := range spec.Env {
		if err := checkEnv(k, v); err != nil {
			return providers.Snapshot{}, err
		}
	}
	for {
		if m, err := readSnapshotMeta(s, spec.Slug); err == nil {
			return m.public(), nil
		}
		p.flightMu.Lock()
		f, following := p.flights[spec.Slug]
		if !following {
			f = &flight{done: make(chan struct{})}
			p.flights[spec.Slug] = f
		}
		p.flightMu.Unlock()

		if !following {
			f.snap, f.err = p.build(ctx, s, spec)
			p.flightMu.Lock()
			delete(p.flights, spec.Slug)
			p.flightMu.Unlock()
			close(f.done)
			return f.snap, f.err
		}
		select {
		case <-f.done:
		case <-ctx.Done():
			return providers.Snapshot{}, providers.Wrap(providers.DeadlineExceeded, op, ctx.Err())
		}
		// A build abandoned by its own caller is this caller's to redo.
		if f.err != nil && providers.CodeOf(f.err) == providers.DeadlineExceeded && ctx.Err() == nil {
			continue
		}
		return f.snap, f.err
	}
}

// build runs spec.Setup in a builder sandbox with network access, whose
// snapshot directory is writable, and publishes the result.
func (p *Provider) build(ctx context.Context, s settings, spec providers.SnapshotSpec) (providers.Snapshot, error) {
	const op = "ensure_snapshot"
	lock, err := lockFile(ctx, filepath.Join(s.stateDir, "locks", "snapshot-"+spec.Slug+".lock"))
	if err != nil {
		if ctx.Err() != nil {
			return providers.Snapshot{}, providers.Wrap(providers.DeadlineExceeded, op, err)
		}
		return providers.Snapshot{}, providers.Wrap(providers.Internal, op, err)
	}
	defer lock.Close()
	if m, err := readSnapshotMeta(s, spec.Slug); err == nil {
		return m.public(), nil // another process built it while we waited
	}

	timeout := spec.Timeout
	if timeout <= 0 {
		timeout = defaultSnapshotTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	deadline, _ := ctx.Deadline()

	buildDir := filepath.Join(s.stateDir, "snapshots", ".build-"+spec.Slug+"-"+newID())
	tree := filepath.Join(buildDir, "tree")
	published := false
	defer func() {
		if !published {
			_ = removeAll(buildDir)
		}
	}()
	if err := os.Mkdir(buildDir, 0o700); err != nil {
		return providers.Snapshot{}, providers.Wrap(providers.Internal, op, err)
	}
	if err := os.Mkdir(tree, 0o755); err != nil {
		return providers.Snapshot{}, providers.Wrap(providers.Internal, op, err)
	}

	log := p.log.With("snapshot", spec.Slug)
	log.Info("building snapshot", "commands", len(spec.Setup))
	start := time.Now()
	rec, err := p.create(ctx, providers.CreateSpec{
		Labels:   map[string]string{LabelSnapshotBuild: spec.Slug},
		Network:  providers.NetworkPolicy{Mode: providers.NetworkAll},
		Lifetime: time.Until(deadline) + time.Minute,
	}, tree, spec.Env)
	if err != nil {
		return providers.Snapshot{}, err
	}
	terminated := false
	terminate := func() {
		if !terminated {
			terminated = true
			if err := p.Terminate(context.Background(), rec.ID); err != nil {
				log.Warn("terminating the builder sandbox", "sandbox_id", rec.ID, "err", err)
			}
		}
	}
	defer terminate()

	for i, cmd := range spec.Setup {
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return providers.Snapshot{}, providers.Errorf(providers.DeadlineExceeded, op, "snapshot %s: build timed out after %s before setup command %d", spec.Slug, timeout, i+1)
		}
		out := &tailBuffer{max: 2 << 10}
		res, err := p.Exec(ctx, rec.ID, providers.ExecRequest{Shell: cmd, Stdout: out, Stderr: out, Timeout: remaining})
		if err != nil {
			return providers.Snapshot{}, fmt.Errorf("snapshot %s: setup command %d: %w", spec.Slug, i+1, err)
		}
		if res.TimedOut {
			return providers.Snapshot{}, providers.Errorf(providers.DeadlineExceeded, op, "snapshot %s: setup command %d timed out after %s; output ends with:\n%s", spec.Slug, i+1, timeout, out)
		}
		if res.ExitCode != 0 {
			return providers.Snapshot{}, providers.Errorf(providers.FailedPrecondition, op, "snapshot %s: setup command %d (%q) exited with %d; output ends with:\n%s", spec.Slug, i+1, cmd, res.ExitCode, out)
		}
	}
	terminate()

	if err := sealTree(tree, s.isRoot); err != nil {
		return providers.Snapshot{}, providers.Wrap(providers.Internal, op, fmt.Errorf("snapshot %s: %w", spec.Slug, err))
	}
	m := snapshotMeta{
		Slug:      spec.Slug,
		Labels:    copyMap(spec.Labels),
		Env:       copyMap(spec.Env),
		SizeBytes: treeSize(tree),
		CreatedAt: time.Now().UTC(),
	}
	if err := writeJSONFile(filepath.Join(buildDir, "meta.json"), m, 0o600); err != nil {
		return providers.Snapshot{}, providers.Wrap(providers.Internal, op, err)
	}
	_ = removeAll(snapshotDir(s, spec.Slug)) // a directory left without meta by an interrupted delete
	if err := os.Rename(buildDir, snapshotDir(s, spec.Slug)); err != nil {
		return providers.Snapshot{}, providers.Wrap(providers.Internal, op, err)
	}
	published = true
	p.builds.Add(1)
	log.Info("snapshot built", "size_bytes", m.SizeBytes, "took", time.Since(start))
	return m.public(), nil
}

// sealTree makes a built tree readable by every sandbox and writable by
// none: the builder's uid is handed to later sandboxes, so as root the
// files go to root; read and search bits are added, group and other write
// and set-id bits removed.
func sealTree(root string, isRoot bool) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if isRoot {
			if err := os.Lchown(path, 0, 0); err != nil {
				return err
			}
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		mode := fi.Mode().Perm() | 0o444
		if d.IsDir() || mode&0o111 != 0 {
			mode |= 0o111
		}
		mode &^= 0o022
		if d.IsDir() {
			// Keep the owner's write bit: removing the tree needs it when
			// the plugin is not root.
			mode |= 0o200
		}
		return os.Chmod(path, mode)
	})
}

// GetSnapshot returns a snapshot by slug.
func (p *Provider) GetSnapshot(ctx context.Context, slug string) (providers.Snapshot, error) {
	const op = "get_snapshot"
	s, err := p.ready()
	if err != nil {
		return providers.Snapshot{}, err
	}
	if err := checkSlug(op, "snapshot", slug); err != nil {
		return providers.Snapshot{}, err
	}
	m, err := readSnapshotMeta(s, slug)
	if err != nil {
		return providers.Snapshot{}, providers.Errorf(providers.NotFound, op, "snapshot %q not found", slug)
	}
	return m.public(), nil
}

// DeleteSnapshot deletes a snapshot no live sandbox uses. Idempotent. A
// snapshot in use is refused with FailedPrecondition, as a mounted volume
// is: removing it would pull files from under running sandboxes.
func (p *Provider) DeleteSnapshot(ctx context.Context, slug string) error {
	const op = "delete_snapshot"
	s, err := p.ready()
	if err != nil {
		return err
	}
	if err := checkSlug(op, "snapshot", slug); err != nil {
		return err
	}
	unlock, err := p.lock(s)
	if err != nil {
		return err
	}
	if _, err := os.Stat(snapshotDir(s, slug)); errors.Is(err, os.ErrNotExist) {
		unlock()
		return nil
	}
	if id := p.userOf(func(r sandboxRecord) bool { return r.Snapshot == slug }); id != "" {
		unlock()
		return providers.Errorf(providers.FailedPrecondition, op, "snapshot %q is used by live sandbox %s", slug, id)
	}
	trash := filepath.Join(s.stateDir, "snapshots", ".trash-"+slug+"-"+newID())
	err = os.Rename(snapshotDir(s, slug), trash)
	unlock()
	if err != nil {
		return providers.Wrap(providers.Internal, op, err)
	}
	if err := removeAll(trash); err != nil {
		return providers.Wrap(providers.Internal, op, err)
	}
	p.log.Info("snapshot deleted", "snapshot", slug)
	return nil
}

// cleanLeftovers removes what interrupted operations of an earlier plugin
// process left: half-built snapshots (unless a build still holds the
// slug's lock), and volumes or snapshots caught between rename and removal.
func (p *Provider) cleanLeftovers(s settings) {
	unlock, err := p.lock(s)
	if err != nil {
		return
	}
	defer unlock()
	for _, kind := range []string{"volumes", "snapshots"} {
		dir := filepath.Join(s.stateDir, kind)
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			name := e.Name()
			switch {
			case strings.HasPrefix(name, ".trash-"), strings.HasPrefix(name, ".new-"):
				_ = removeAll(filepath.Join(dir, name))
			case strings.HasPrefix(name, ".build-"):
				rest := strings.TrimPrefix(name, ".build-")
				i := strings.LastIndex(rest, "-sbx-")
				if i < 0 {
					continue
				}
				lock, ok := tryLockFile(filepath.Join(s.stateDir, "locks", "snapshot-"+rest[:i]+".lock"))
				if !ok {
					continue // being built right now
				}
				_ = removeAll(filepath.Join(dir, name))
				lock.Close()
			}
		}
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return strings.TrimSpace(string(t.b)) }
