package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sandstep/sandstep/providers"
)

// LabelSnapshotBuild marks the builder sandbox of a snapshot; its value is
// the slug.
const LabelSnapshotBuild = "sandstep.snapshot-build"

// A snapshot is a tree, which sandboxes mount read-only at SnapshotPath,
// and its meta, state_dir/snapshots/<slug>.json, which names the tree. As
// root the tree is an ext4 image, state_dir/snapshots/trees/<slug>@<id>.img
// of snapshot_size_mb that the build writes into and that the plugin
// mounts once for all sandboxes (see images.go); without root it is a
// directory, state_dir/snapshots/trees/<slug>@<id>/. The meta is written
// (atomically) only once the tree is complete, so a snapshot exists whole
// or not at all. Deleting removes the meta at once and the tree when no
// live sandbox mounts it any more (collectTrees): sandboxes booted from a
// deleted snapshot keep running with its contents.
type snapshotMeta struct {
	Slug      string            `json:"slug"`
	ID        string            `json:"id"`
	Labels    map[string]string `json:"labels,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	SizeBytes int64             `json:"size_bytes"`
	CreatedAt time.Time         `json:"created_at"`
	// Format is formatExt4 for an image tree, "" for a directory.
	Format string `json:"format,omitempty"`
}

// formatExt4 marks volumes and snapshots kept as ext4 images.
const formatExt4 = "ext4"

func snapshotMetaPath(s settings, slug string) string {
	return filepath.Join(s.stateDir, "snapshots", slug+".json")
}

func snapshotTreeDir(s settings, slug, id string) string {
	return filepath.Join(s.stateDir, "snapshots", "trees", slug+"@"+id)
}

func snapshotImagePath(s settings, slug, id string) string {
	return snapshotTreeDir(s, slug, id) + ".img"
}

func snapshotLockPath(s settings, slug string) string {
	return filepath.Join(s.stateDir, "locks", "snapshot-"+slug+".lock")
}

func readSnapshotMeta(s settings, slug string) (snapshotMeta, error) {
	var m snapshotMeta
	b, err := os.ReadFile(snapshotMetaPath(s, slug))
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
	lock, err := lockFile(ctx, snapshotLockPath(s, spec.Slug))
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

	id := strings.TrimPrefix(newID(), "sbx-")
	tree := snapshotTreeDir(s, spec.Slug, id)
	format := ""
	if s.images {
		tree, format = snapshotImagePath(s, spec.Slug, id), formatExt4
	}
	published := false
	defer func() {
		if !published {
			_ = removeAll(tree)
		}
	}()
	if s.images {
		err = makeImage(ctx, s.mkfs, tree, int64(s.snapshotSizeMB), "", false)
	} else {
		err = os.Mkdir(tree, 0o755)
	}
	if err != nil {
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
			hint := ""
			if s.images && strings.Contains(out.String(), "No space left on device") {
				hint = fmt.Sprintf(" (a snapshot holds at most snapshot_size_mb = %d MiB)", s.snapshotSizeMB)
			}
			return providers.Snapshot{}, providers.Errorf(providers.FailedPrecondition, op, "snapshot %s: setup command %d (%q) exited with %d%s; output ends with:\n%s", spec.Slug, i+1, cmd, res.ExitCode, hint, out)
		}
	}
	terminate()

	var size int64
	seal := func(root string) error {
		if err := sealTree(root, s.isRoot); err != nil {
			return err
		}
		size = treeSize(root)
		return nil
	}
	if s.images {
		// Sealed through a mount of its own once the builder's is gone,
		// and published only when that is gone too, so that sandboxes'
		// read-only mounts are the image's only ones.
		err = p.withImage(ctx, s.stage, tree, seal)
	} else {
		err = seal(tree)
	}
	if err != nil {
		return providers.Snapshot{}, providers.Wrap(providers.Internal, op, fmt.Errorf("snapshot %s: %w", spec.Slug, err))
	}
	m := snapshotMeta{
		Slug:      spec.Slug,
		ID:        id,
		Labels:    copyMap(spec.Labels),
		Env:       copyMap(spec.Env),
		SizeBytes: size,
		CreatedAt: time.Now().UTC(),
		Format:    format,
	}
	if err := writeJSONFile(snapshotMetaPath(s, spec.Slug), m, 0o600); err != nil {
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

// ListSnapshots returns the snapshots whose labels include labels, by slug.
// Only published snapshots (their meta written) are listed: one being built
// is not a snapshot yet.
func (p *Provider) ListSnapshots(ctx context.Context, labels map[string]string) ([]providers.Snapshot, error) {
	s, err := p.ready()
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(filepath.Join(s.stateDir, "snapshots"))
	if err != nil {
		return nil, providers.Wrap(providers.Internal, "list_snapshots", err)
	}
	var out []providers.Snapshot
	for _, e := range entries {
		slug, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || e.IsDir() || strings.HasPrefix(slug, ".") {
			continue
		}
		m, err := readSnapshotMeta(s, slug)
		if err != nil || !hasLabels(m.Labels, labels) {
			continue
		}
		out = append(out, m.public())
	}
	slices.SortFunc(out, func(a, b providers.Snapshot) int { return strings.Compare(a.Slug, b.Slug) })
	return out, nil
}

// DeleteSnapshot deletes a snapshot. Idempotent. Sandboxes booted from it
// keep running and keep its files; its tree goes when the last of them does.
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
	err = os.Remove(snapshotMetaPath(s, slug))
	unlock()
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return providers.Wrap(providers.Internal, op, err)
	}
	if err == nil {
		p.log.Info("snapshot deleted", "snapshot", slug)
	}
	p.collectTrees(s)
	return nil
}

// collectTrees removes the snapshot trees that no snapshot names and no
// live sandbox mounts, except those being built right now (their slug's
// lock is held).
func (p *Provider) collectTrees(s settings) {
	unlock, err := p.lock(s)
	if err != nil {
		return
	}
	defer unlock()
	dir := filepath.Join(s.stateDir, "snapshots", "trees")
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		return
	}
	inUse := make(map[string]bool)
	metas, _ := os.ReadDir(filepath.Join(s.stateDir, "snapshots"))
	for _, e := range metas {
		if slug, ok := strings.CutSuffix(e.Name(), ".json"); ok {
			if m, err := readSnapshotMeta(s, slug); err == nil {
				inUse[slug+"@"+m.ID] = true
			}
		}
	}
	recs, _ := p.scanRecords()
	for _, r := range recs {
		if r.alive() {
			inUse[r.Snapshot+"@"+r.SnapshotID] = true
			inUse[strings.TrimSuffix(filepath.Base(r.BuildDir), ".img")] = true
		}
	}
	for _, e := range entries {
		// A tree is a directory or an image; a build's image is there
		// from the start, and its slug's lock is held meanwhile.
		key, isImage := strings.CutSuffix(e.Name(), ".img")
		if inUse[key] {
			continue
		}
		slug, _, ok := strings.Cut(key, "@")
		if !ok {
			continue
		}
		lock, free := tryLockFile(snapshotLockPath(s, slug))
		if !free {
			continue
		}
		// A build that finished after the metas were read above has
		// published this tree and let go of its lock: ask again, now
		// that no build of the slug can be running.
		if m, err := readSnapshotMeta(s, slug); err == nil && slug+"@"+m.ID == key {
			lock.Close()
			continue
		}
		if isImage {
			p.dropSharedImage(s.stage, filepath.Join(dir, e.Name()))
		}
		if err := removeAll(filepath.Join(dir, e.Name())); err != nil {
			p.log.Warn("removing an unused snapshot tree", "tree", e.Name(), "err", err)
		}
		lock.Close()
	}
}

// cleanLeftovers removes what interrupted operations of an earlier plugin
// process left: volumes caught between rename and removal, half-built or
// orphaned snapshot trees, temporary files of atomic writes.
func (p *Provider) cleanLeftovers(s settings) {
	unlock, err := p.lock(s)
	if err != nil {
		return
	}
	for _, dir := range []string{"volumes", "snapshots", "sandboxes", "images"} {
		dir = filepath.Join(s.stateDir, dir)
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			name := e.Name()
			if strings.HasPrefix(name, ".trash-") || strings.HasPrefix(name, ".new-") || strings.HasPrefix(name, ".build-") || strings.Contains(name, ".tmp-sbx-") {
				_ = removeAll(filepath.Join(dir, name))
			}
		}
	}
	unlock()
	p.collectTrees(s)
}

// stageBuild readies a builder sandbox's snapshot tree for writing by uid.
func (p *Provider) stageBuild(s settings, st *stager, rec sandboxRecord) (string, error) {
	if !strings.HasSuffix(rec.BuildDir, ".img") {
		if err := os.Lchown(rec.BuildDir, rec.UID, rec.UID); err != nil {
			return "", err
		}
		return st.path(rec.BuildDir, "snapshot"), nil
	}
	staged, root, err := st.image(rec.BuildDir, "snapshot", false)
	if err != nil {
		return "", err
	}
	defer root.close()
	_, err = prepareRoot(root.path(), rec.UID)
	return staged, err
}

// stageSnapshot returns where bwrap binds the sandbox's snapshot from: an
// image is mounted once for every sandbox of this plugin process.
func (p *Provider) stageSnapshot(s settings, st *stager, rec sandboxRecord) (string, error) {
	const op = "create"
	image := snapshotImagePath(s, rec.Snapshot, rec.SnapshotID)
	if _, err := os.Stat(image); err != nil {
		return st.path(snapshotTreeDir(s, rec.Snapshot, rec.SnapshotID), "snapshot"), nil
	}
	if s.stage == nil {
		return "", providers.Errorf(providers.FailedPrecondition, op, "snapshot %q is an ext4 image, which only a plugin running as root can mount", rec.Snapshot)
	}
	dir, err := p.sharedImage(s.stage, image)
	if err != nil {
		return "", providers.Wrap(providers.Internal, op, fmt.Errorf("snapshot %s: %w", rec.Snapshot, err))
	}
	return dir, nil
}

// retireDirectorySnapshots forgets the snapshots an earlier plugin (or one
// without root) built as directories: as root snapshots are images, and
// the next EnsureSnapshot of the slug builds one. Snapshots are caches of
// their setup commands, so nothing is lost; sandboxes running on an old
// tree keep it until they end (collectTrees).
func (p *Provider) retireDirectorySnapshots(s settings) {
	unlock, err := p.lock(s)
	if err != nil {
		return
	}
	defer unlock()
	metas, _ := os.ReadDir(filepath.Join(s.stateDir, "snapshots"))
	for _, e := range metas {
		slug, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		if m, err := readSnapshotMeta(s, slug); err == nil && m.Format != formatExt4 {
			if err := os.Remove(snapshotMetaPath(s, slug)); err == nil {
				p.log.Info("snapshot built as a directory retired; it is built again as an image when next ensured", "snapshot", slug)
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
