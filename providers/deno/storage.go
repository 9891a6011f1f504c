package deno

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/sandstep/sandstep/providers"
)

// slugRE is Deno's slug rule, shared by volumes and snapshots.
var slugRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,30}[a-z0-9]$`)

func denoValid(slug string) bool {
	return slugRE.MatchString(slug) && (len(slug) < 4 || slug[2:4] != "--")
}

// sandstepSlugRE is what a slug of the interface may be here: longer or
// other than Deno's, it is carried as a hash.
var sandstepSlugRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func checkSlug(op, slug string) error {
	if !sandstepSlugRE.MatchString(slug) {
		return providers.Errorf(providers.InvalidArgument, op, "slug %q must be 1 to 128 characters of letters, digits, '.', '_' and '-', starting with a letter or digit", slug)
	}
	return nil
}

// denoSlug is the slug Deno knows: the slug itself when Deno takes it (so
// deps-<hash> and ws-<session> read the same in Deno's console), else
// "h-" and a hash of it.
func denoSlug(slug string) string {
	if denoValid(slug) && !strings.HasPrefix(slug, "h-") && !strings.HasPrefix(slug, "sb-") {
		return slug
	}
	sum := sha256.Sum256([]byte(slug))
	return "h-" + hex.EncodeToString(sum[:])[:24]
}

// named is denoSlug for a volume or snapshot this process creates: it
// maps the hash back (for listings) while the volume or snapshot exists.
// Lookups do not add to the map, deletes take from it: a long-lived plugin
// does not grow with every slug it was asked about.
func (p *Provider) named(slug string) string {
	d := denoSlug(slug)
	if d != slug {
		p.mu.Lock()
		p.names[d] = slug
		p.mu.Unlock()
	}
	return d
}

// ourSlug maps a Deno slug back; p.mu is held.
func (p *Provider) ourSlug(d string) string {
	if s, ok := p.names[d]; ok {
		return s
	}
	return d
}

// volumeJSON and snapshotJSON are Deno's objects (snake_case).
type volumeJSON struct {
	ID         string `json:"id"`
	Slug       string `json:"slug"`
	Region     string `json:"region"`
	Capacity   int64  `json:"capacity"`
	Allocated  int64  `json:"estimated_allocated_size"`
	IsBootable bool   `json:"is_bootable"`
}

type snapshotJSON struct {
	ID         string `json:"id"`
	Slug       string `json:"slug"`
	Region     string `json:"region"`
	Allocated  int64  `json:"allocated_size"`
	IsBootable bool   `json:"is_bootable"`
	Volume     struct {
		ID   string `json:"id"`
		Slug string `json:"slug"`
	} `json:"volume"`
}

// buildVolume is the slug of the volume a snapshot is built on: derived
// from the snapshot's, so that every process building it meets the same
// one.
func buildVolume(slug string) string {
	sum := sha256.Sum256([]byte(slug))
	return "sb-" + hex.EncodeToString(sum[:])[:24]
}

// envFile keeps a snapshot's environment inside it; Deno has no place for
// it elsewhere.
const envFile = "/home/app/.sandstep-snapshot.json"

// EnsureSnapshot builds snapshot spec.Slug unless it exists: a bootable
// volume, the setup run in a sandbox booted from it, the sandbox killed,
// the volume snapshotted once detached.
func (p *Provider) EnsureSnapshot(ctx context.Context, spec providers.SnapshotSpec) (providers.Snapshot, error) {
	const op = "ensure_snapshot"
	cfg, err := p.settings(op)
	if err != nil {
		return providers.Snapshot{}, err
	}
	if err := checkSlug(op, spec.Slug); err != nil {
		return providers.Snapshot{}, err
	}
	if snap, err := p.getSnapshot(ctx, cfg, op, spec.Slug); err == nil {
		return snap, nil
	} else if !providers.IsNotFound(err) {
		return providers.Snapshot{}, err
	}
	p.mu.Lock()
	fl := p.building[spec.Slug]
	leader := fl == nil
	if leader {
		fl = &flight{done: make(chan struct{})}
		p.building[spec.Slug] = fl
	}
	p.mu.Unlock()
	if leader {
		go func() {
			// The build goes on when the caller gives up: others wait.
			fl.snap, fl.err = p.build(context.WithoutCancel(ctx), cfg, spec)
			p.mu.Lock()
			delete(p.building, spec.Slug)
			p.mu.Unlock()
			close(fl.done)
		}()
	}
	select {
	case <-fl.done:
		return fl.snap, fl.err
	case <-ctx.Done():
		return providers.Snapshot{}, providers.Wrap(providers.DeadlineExceeded, op, ctx.Err())
	}
}

func (p *Provider) build(ctx context.Context, cfg *configured, spec providers.SnapshotSpec) (providers.Snapshot, error) {
	const op = "ensure_snapshot"
	timeout := spec.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	vol := buildVolume(spec.Slug)
	dslug := p.named(spec.Slug)
	var v volumeJSON
	err := cfg.c.do(ctx, op, http.MethodPost, cfg.c.console, "/api/v2/volumes", map[string]any{
		"slug": vol, "region": cfg.s.Region, "capacity": fmt.Sprintf("%dMB", cfg.s.SnapshotCapacityMB), "from": "builtin:debian-13",
	}, &v)
	if isStatus(err, http.StatusConflict) {
		// Another process builds it: wait for the snapshot, or take the
		// build over if that process is gone.
		p.log.Info("another process builds the snapshot; waiting for it", "slug", spec.Slug, "volume", vol)
		return p.awaitBuild(ctx, cfg, spec, vol)
	}
	if err != nil {
		return providers.Snapshot{}, err
	}
	fail := func(err error) (providers.Snapshot, error) {
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer ccancel()
		p.deleteWhenDetached(cctx, cfg, vol)
		return providers.Snapshot{}, err
	}
	labels := maps.Clone(spec.Labels)
	if len(labels) > 4 {
		return fail(providers.Errorf(providers.InvalidArgument, op, "Deno keeps at most 5 labels on the builder sandbox, one of them the provider's; the spec has %d", len(labels)))
	}
	if labels == nil {
		labels = map[string]string{}
	}
	labels[labelBuild] = vol
	// Session mode, unlike every other sandbox here: the builder dies with
	// this process's socket, so that a build whose process is gone (a
	// crash, a kill -9, a Lambda timing out) frees its volume at once and
	// the next process can take the build over (awaitBuild).
	sc := sandboxConfig{MemoryMB: cfg.s.MemoryMB, Labels: labels, Root: &volumeRef{Volume: vol}, Volumes: []mountRef{}}
	rc, err := p.openCreate(ctx, cfg, sc)
	if err != nil {
		return fail(err)
	}
	setupErr := func() error {
		for i, cmd := range spec.Setup {
			var out tail
			res, err := p.run(ctx, rc, op, []string{"/bin/sh", "-c", cmd}, "/home/app", spec.Env, nil, &out, &out, timeout)
			if err != nil {
				return err
			}
			if res.ExitCode != 0 {
				return providers.Errorf(providers.FailedPrecondition, op, "setup step %d of snapshot %s failed with exit %d: %s", i+1, spec.Slug, res.ExitCode, out.String())
			}
		}
		meta, _ := json.Marshal(map[string]any{"env": spec.Env, "labels": spec.Labels})
		return rc.call(ctx, op, "writeFile", map[string]any{"path": envFile, "content": meta}, nil)
	}()
	rc.close()
	if kerr := p.kill(ctx, cfg, rc.id); kerr != nil && setupErr == nil {
		setupErr = kerr
	}
	if setupErr != nil {
		return fail(setupErr)
	}
	// The volume detaches a moment after the kill: Deno refuses to
	// snapshot it until then.
	var sn snapshotJSON
	for delay := 200 * time.Millisecond; ; delay = min(delay*2, 3*time.Second) {
		err = cfg.c.do(ctx, op, http.MethodPost, cfg.c.console, "/api/v2/volumes/"+url.PathEscape(vol)+"/snapshot", map[string]string{"slug": dslug}, &sn)
		if err == nil || !(isStatus(err, http.StatusConflict) || providers.CodeOf(err) == providers.Unavailable) {
			break
		}
		select {
		case <-ctx.Done():
			return fail(providers.Wrap(providers.DeadlineExceeded, op, fmt.Errorf("the build volume did not detach: %w", err)))
		case <-time.After(delay):
		}
	}
	if err != nil {
		return fail(err)
	}
	p.mu.Lock()
	p.snaps[spec.Slug] = maps.Clone(spec.Labels)
	p.mu.Unlock()
	snap, err := p.awaitSnapshot(ctx, cfg, dslug)
	if err == nil {
		p.log.Info("snapshot built", "slug", spec.Slug, "bytes", snap.SizeBytes)
	}
	return snap, err
}

// labelBuild marks a builder sandbox with its build volume's slug.
const labelBuild = "sandstep.build"

// awaitBuild waits for the snapshot another process builds on volume vol.
// Its builder sandbox lives as long as that process's socket: when none has
// been running for buildStale and still no snapshot exists, the build was
// abandoned, and this process deletes the volume and builds the snapshot
// itself. (A builder between its kill and its snapshot shows no sandbox
// either, for the few seconds Deno takes to detach the volume: buildStale
// is far longer.)
func (p *Provider) awaitBuild(ctx context.Context, cfg *configured, spec providers.SnapshotSpec, vol string) (providers.Snapshot, error) {
	const op = "ensure_snapshot"
	dslug := denoSlug(spec.Slug)
	var idleSince time.Time
	for delay := 200 * time.Millisecond; ; delay = min(delay*2, 3*time.Second) {
		var sn snapshotJSON
		err := cfg.c.do(ctx, op, http.MethodGet, cfg.c.console, "/api/v2/snapshots/"+url.PathEscape(dslug), nil, &sn)
		switch {
		case err == nil && sn.IsBootable:
			snap := p.snapshot(sn)
			snap.Slug = spec.Slug
			return snap, nil
		case err == nil:
			idleSince = time.Time{} // made, not bootable yet
		case !providers.IsNotFound(err):
			return providers.Snapshot{}, err
		default:
			builders, lerr := p.list(ctx, cfg, op, map[string]string{labelBuild: vol})
			switch {
			case lerr != nil || len(builders) > 0:
				idleSince = time.Time{}
			case idleSince.IsZero():
				idleSince = time.Now()
			case time.Since(idleSince) >= p.buildStale:
				p.log.Warn("the process building the snapshot is gone; building it here", "slug", spec.Slug, "volume", vol)
				dctx, cancel := context.WithTimeout(ctx, 2*detachWait)
				p.deleteWhenDetached(dctx, cfg, vol)
				cancel()
				return p.build(ctx, cfg, spec)
			}
		}
		select {
		case <-ctx.Done():
			return providers.Snapshot{}, providers.Wrap(providers.DeadlineExceeded, op, fmt.Errorf("snapshot %s did not become bootable: %w", spec.Slug, ctx.Err()))
		case <-time.After(delay):
		}
	}
}

// awaitSnapshot polls the snapshot this process made until it is bootable.
func (p *Provider) awaitSnapshot(ctx context.Context, cfg *configured, slug string) (providers.Snapshot, error) {
	const op = "ensure_snapshot"
	for delay := 200 * time.Millisecond; ; delay = min(delay*2, 3*time.Second) {
		var sn snapshotJSON
		err := cfg.c.do(ctx, op, http.MethodGet, cfg.c.console, "/api/v2/snapshots/"+url.PathEscape(slug), nil, &sn)
		switch {
		case err == nil && sn.IsBootable:
			return p.snapshot(sn), nil
		case err != nil:
			return providers.Snapshot{}, err
		}
		select {
		case <-ctx.Done():
			return providers.Snapshot{}, providers.Wrap(providers.DeadlineExceeded, op, fmt.Errorf("snapshot %s did not become bootable: %w", slug, ctx.Err()))
		case <-time.After(delay):
		}
	}
}

// deleteWhenDetached deletes a volume, waiting out its attachment to a
// sandbox that was just killed.
func (p *Provider) deleteWhenDetached(ctx context.Context, cfg *configured, slug string) {
	for delay := 200 * time.Millisecond; ; delay = min(delay*2, 3*time.Second) {
		err := cfg.c.do(ctx, "delete_volume", http.MethodDelete, cfg.c.console, "/api/v2/volumes/"+url.PathEscape(slug), nil, nil)
		if err == nil || providers.IsNotFound(err) {
			return
		}
		if !isStatus(err, http.StatusConflict) {
			p.log.Warn("deleting a build volume failed", "volume", slug, "error", err)
			return
		}
		select {
		case <-ctx.Done():
			p.log.Warn("a build volume stayed attached; delete it by hand", "volume", slug)
			return
		case <-time.After(delay):
		}
	}
}

func (p *Provider) snapshot(sn snapshotJSON) providers.Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	slug := p.ourSlug(sn.Slug)
	return providers.Snapshot{Slug: slug, Labels: maps.Clone(p.snaps[slug]), SizeBytes: sn.Allocated}
}

func (p *Provider) getSnapshot(ctx context.Context, cfg *configured, op, slug string) (providers.Snapshot, error) {
	var sn snapshotJSON
	if err := cfg.c.do(ctx, op, http.MethodGet, cfg.c.console, "/api/v2/snapshots/"+url.PathEscape(denoSlug(slug)), nil, &sn); err != nil {
		return providers.Snapshot{}, err
	}
	snap := p.snapshot(sn)
	snap.Slug = slug
	return snap, nil
}

// GetSnapshot returns a snapshot by slug.
func (p *Provider) GetSnapshot(ctx context.Context, slug string) (providers.Snapshot, error) {
	const op = "get_snapshot"
	cfg, err := p.settings(op)
	if err != nil {
		return providers.Snapshot{}, err
	}
	if err := checkSlug(op, slug); err != nil {
		return providers.Snapshot{}, providers.Errorf(providers.NotFound, op, "no snapshot %q", slug)
	}
	return p.getSnapshot(ctx, cfg, op, slug)
}

// checkSnapshot says NotFound when there is no such snapshot.
func (p *Provider) checkSnapshot(ctx context.Context, cfg *configured, slug string) error {
	if checkSlug("create", slug) != nil {
		return providers.Errorf(providers.NotFound, "create", "no snapshot %q", slug)
	}
	_, err := p.getSnapshot(ctx, cfg, "create", slug)
	return err
}

// DeleteSnapshot deletes the snapshot, then the volume it was built on.
func (p *Provider) DeleteSnapshot(ctx context.Context, slug string) error {
	const op = "delete_snapshot"
	cfg, err := p.settings(op)
	if err != nil {
		return err
	}
	if checkSlug(op, slug) != nil {
		return nil // no such snapshot can exist
	}
	err = cfg.c.do(ctx, op, http.MethodDelete, cfg.c.console, "/api/v2/snapshots/"+url.PathEscape(denoSlug(slug)), nil, nil)
	if err != nil && !providers.IsNotFound(err) {
		return err
	}
	p.mu.Lock()
	delete(p.snaps, slug)
	delete(p.names, denoSlug(slug))
	p.mu.Unlock()
	err = cfg.c.do(ctx, op, http.MethodDelete, cfg.c.console, "/api/v2/volumes/"+url.PathEscape(buildVolume(slug)), nil, nil)
	if err != nil && !providers.IsNotFound(err) {
		return err
	}
	return nil
}

func matches(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// paginate walks a console list: bare arrays, the next page's cursor in
// the Link header.
func paginate(ctx context.Context, cfg *configured, op, path string, page func(json.RawMessage) error) error {
	cursor := ""
	for range 1000 {
		q := url.Values{"limit": {"100"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var raw json.RawMessage
		next, err := cfg.c.doLink(ctx, op, cfg.c.console+path+"?"+q.Encode(), &raw)
		if err != nil {
			return err
		}
		if err := page(raw); err != nil {
			return providers.Wrap(providers.Internal, op, err)
		}
		if next == "" {
			return nil
		}
		cursor = next
	}
	return providers.Errorf(providers.Internal, op, "Deno's list of %s has more than 1000 pages", path)
}

// CreateVolume creates a Deno volume, or returns the existing one of that
// slug.
func (p *Provider) CreateVolume(ctx context.Context, spec providers.VolumeSpec) (providers.Volume, error) {
	const op = "create_volume"
	cfg, err := p.settings(op)
	if err != nil {
		return providers.Volume{}, err
	}
	if err := checkSlug(op, spec.Slug); err != nil {
		return providers.Volume{}, err
	}
	region := spec.Region
	if region == "" {
		region = cfg.s.Region
	}
	capacity := spec.CapacityMB
	if capacity == 0 {
		capacity = cfg.s.VolumeCapacityMB
	}
	if capacity < 300 || capacity > 20000 {
		return providers.Volume{}, providers.Errorf(providers.InvalidArgument, op, "capacity %d MB: Deno's volumes hold 300 to 20000 MB", capacity)
	}
	var v volumeJSON
	err = cfg.c.do(ctx, op, http.MethodPost, cfg.c.console, "/api/v2/volumes", map[string]any{"slug": p.named(spec.Slug), "region": region, "capacity": fmt.Sprintf("%dMB", capacity)}, &v)
	if isStatus(err, http.StatusConflict) {
		got, gerr := p.GetVolume(ctx, spec.Slug)
		if providers.IsNotFound(gerr) {
			return providers.Volume{}, providers.Errorf(providers.AlreadyExists, op, "slug %q is taken by a snapshot (Deno's volumes and snapshots share slugs)", spec.Slug)
		}
		return got, gerr
	}
	if err != nil {
		return providers.Volume{}, err
	}
	p.mu.Lock()
	p.volumes[spec.Slug] = maps.Clone(spec.Labels)
	p.mu.Unlock()
	return p.volume(v), nil
}

func (p *Provider) volume(v volumeJSON) providers.Volume {
	p.mu.Lock()
	defer p.mu.Unlock()
	slug := p.ourSlug(v.Slug)
	return providers.Volume{Slug: slug, Labels: maps.Clone(p.volumes[slug]), CapacityMB: int(v.Capacity / 1_000_000), SizeBytes: v.Allocated}
}

// GetVolume returns a volume by slug.
func (p *Provider) GetVolume(ctx context.Context, slug string) (providers.Volume, error) {
	const op = "get_volume"
	cfg, err := p.settings(op)
	if err != nil {
		return providers.Volume{}, err
	}
	if checkSlug(op, slug) != nil {
		return providers.Volume{}, providers.Errorf(providers.NotFound, op, "no volume %q", slug)
	}
	var v volumeJSON
	if err := cfg.c.do(ctx, op, http.MethodGet, cfg.c.console, "/api/v2/volumes/"+url.PathEscape(denoSlug(slug)), nil, &v); err != nil {
		return providers.Volume{}, err
	}
	vol := p.volume(v)
	vol.Slug = slug
	return vol, nil
}

// DeleteVolume deletes a volume; one attached to a running sandbox is
// FailedPrecondition (Deno's 409).
func (p *Provider) DeleteVolume(ctx context.Context, slug string) error {
	const op = "delete_volume"
	cfg, err := p.settings(op)
	if err != nil {
		return err
	}
	if checkSlug(op, slug) != nil {
		return nil
	}
	for delay := 100 * time.Millisecond; ; delay = min(delay*2, time.Second) {
		err = cfg.c.do(ctx, op, http.MethodDelete, cfg.c.console, "/api/v2/volumes/"+url.PathEscape(denoSlug(slug)), nil, nil)
		if err == nil || providers.IsNotFound(err) {
			break
		}
		// Deno answers 409 for a volume attached to a running sandbox and
		// for one whose sandbox this process just killed: only the second
		// goes by itself, within detachWait.
		p.mu.Lock()
		until, killed := p.detaching[slug]
		p.mu.Unlock()
		if !isStatus(err, http.StatusConflict) || !killed || time.Now().Add(delay).After(until) {
			return err
		}
		select {
		case <-ctx.Done():
			return providers.Wrap(providers.DeadlineExceeded, op, ctx.Err())
		case <-time.After(delay):
		}
	}
	p.mu.Lock()
	delete(p.volumes, slug)
	delete(p.detaching, slug)
	delete(p.names, denoSlug(slug))
	p.mu.Unlock()
	return nil
}

// detachWait is how long after a kill Deno may still hold the sandbox's
// volumes attached: it detaches them asynchronously, "about 5 s" as seen
// by others (shared/contracts/deno-sandbox-api.md, section 3).
const detachWait = 15 * time.Second

// ListVolumes returns the volumes carrying the labels; see ListSnapshots
// on where labels live.
func (p *Provider) ListVolumes(ctx context.Context, labels map[string]string) ([]providers.Volume, error) {
	const op = "list_volumes"
	cfg, err := p.settings(op)
	if err != nil {
		return nil, err
	}
	var out []providers.Volume
	err = paginate(ctx, cfg, op, "/api/v2/volumes", func(raw json.RawMessage) error {
		var page []volumeJSON
		if err := json.Unmarshal(raw, &page); err != nil {
			return err
		}
		for _, v := range page {
			vol := p.volume(v)
			if strings.HasPrefix(v.Slug, "sb-") {
				continue // a snapshot's build volume, not a volume of the interface
			}
			if matches(vol.Labels, labels) {
				out = append(out, vol)
			}
		}
		return nil
	})
	return out, err
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// tail keeps the last 2 KiB written: enough of a failed setup's output
// for an error message.
type tail struct{ b []byte }

func (t *tail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 2048 {
		t.b = t.b[len(t.b)-2048:]
	}
	return len(p), nil
}

func (t *tail) String() string { return strings.TrimSpace(string(t.b)) }
