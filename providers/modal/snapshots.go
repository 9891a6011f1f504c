package modal

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/protobuf/proto"

	"github.com/sandstep/sandstep/providers"
)

// Snapshots are Modal's filesystem snapshots: images taken of a running
// sandbox through its command router (TaskSnapshotFilesystem, as the SDK's
// Sandbox.SnapshotFilesystem does), kept without expiry, named with
// ImagePublish ("<app_name>--<slug>:sandstep", the slug hashed past 64
// characters) so that any process finds one by its slug. The snapshot's
// Env is an image layer of ENV commands on top, so that every sandbox
// created from the name has it. EnsureSnapshot builds in a sandbox that
// carries no labels of the caller's (the reaper takes no builder for an
// orphan) and that Modal ends at its timeout if the plugin dies.
//
// Like a volume, a named image has no labels: GetSnapshot returns the
// labels EnsureSnapshot was given in this process, and ListSnapshots is
// not offered (Capabilities.ListSnapshots is false), so the host never
// collects snapshots by label on Modal.

// snapshotTag is the tag of every snapshot name.
const snapshotTag = "sandstep"

func snapshotRef(app, slug string) string { return volumeName(app, slug) + ":" + snapshotTag }

// snapshotBuilds makes concurrent EnsureSnapshot calls of one process for
// one slug build once.
type snapshotBuilds struct {
	mu    sync.Mutex
	slugs map[string]*sync.Mutex
}

func (b *snapshotBuilds) lock(slug string) func() {
	b.mu.Lock()
	if b.slugs == nil {
		b.slugs = map[string]*sync.Mutex{}
	}
	m := b.slugs[slug]
	if m == nil {
		m = &sync.Mutex{}
		b.slugs[slug] = m
	}
	b.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// snapshotImage resolves a slug to its image; NotFound when unnamed.
func (p *Provider) snapshotImage(ctx context.Context, st *state, op, slug string) (string, error) {
	resp, err := call(ctx, st.c, op, func(ctx context.Context) (*pb.ImageGetByTagResponse, error) {
		return st.c.cp.ImageGetByTag(ctx, pb.ImageGetByTagRequest_builder{Tag: snapshotRef(st.s.AppName, slug), EnvironmentName: st.s.Environment}.Build())
	})
	if providers.IsNotFound(err) {
		return "", providers.Errorf(providers.NotFound, op, "snapshot %q does not exist", slug)
	}
	if err != nil {
		return "", err
	}
	return resp.GetImageId(), nil
}

// getSnapshot returns the snapshot the slug names; NotFound when none.
func (p *Provider) getSnapshot(ctx context.Context, st *state, op, slug string) (providers.Snapshot, error) {
	ref := snapshotRef(st.s.AppName, slug)
	resp, err := call(ctx, st.c, op, func(ctx context.Context) (*pb.ImageListTagsResponse, error) {
		return st.c.cp.ImageListTags(ctx, pb.ImageListTagsRequest_builder{EnvironmentName: st.s.Environment, TagPrefix: ref, MaxObjects: 100}.Build())
	})
	if err != nil {
		return providers.Snapshot{}, err
	}
	for _, item := range resp.GetItems() {
		if item.GetTag() != ref {
			continue
		}
		snap := providers.Snapshot{Slug: slug, Labels: map[string]string{}, CreatedAt: time.Unix(0, int64(item.GetCreatedAt()*1e9)).UTC()}
		p.mu.Lock()
		if l, ok := p.snaps[slug]; ok {
			snap.Labels = maps.Clone(l)
		}
		p.mu.Unlock()
		return snap, nil
	}
	return providers.Snapshot{}, providers.Errorf(providers.NotFound, op, "snapshot %q does not exist", slug)
}

// GetSnapshot returns a snapshot by slug.
func (p *Provider) GetSnapshot(ctx context.Context, slug string) (providers.Snapshot, error) {
	const op = "get snapshot"
	st, err := p.settings(op)
	if err != nil {
		return providers.Snapshot{}, err
	}
	if checkSlug(op, slug) != nil {
		return providers.Snapshot{}, providers.Errorf(providers.NotFound, op, "snapshot %q does not exist", slug)
	}
	return p.getSnapshot(ctx, st, op, slug)
}

// DeleteSnapshot removes the snapshot's name. Sandboxes created from it
// keep running with its files; new ones cannot be created from it.
func (p *Provider) DeleteSnapshot(ctx context.Context, slug string) error {
	const op = "delete snapshot"
	st, err := p.settings(op)
	if err != nil {
		return err
	}
	if checkSlug(op, slug) != nil {
		return nil
	}
	ref := snapshotRef(st.s.AppName, slug)
	if st.s.Environment != "" {
		ref = st.s.Environment + "/" + ref
	}
	_, err = call(ctx, st.c, op, func(ctx context.Context) (*struct{}, error) {
		_, err := st.c.cp.ImageNameDelete(ctx, pb.ImageNameDeleteRequest_builder{Tag: ref}.Build())
		return nil, err
	})
	if err != nil && !providers.IsNotFound(err) {
		return err
	}
	p.mu.Lock()
	delete(p.snaps, slug)
	p.mu.Unlock()
	p.log.Info("snapshot deleted", "slug", slug)
	return nil
}

// ListSnapshots is not offered: named images carry no labels to list by.
func (p *Provider) ListSnapshots(context.Context, map[string]string) ([]providers.Snapshot, error) {
	return nil, providers.Errorf(providers.Unsupported, "list snapshots", "Modal's named images carry no labels: the modal provider cannot list snapshots by label")
}

// EnsureSnapshot builds the snapshot unless its name exists: a builder
// sandbox with network runs the setup, its filesystem is snapshotted, the
// Env layer goes on top, and the result is named.
func (p *Provider) EnsureSnapshot(ctx context.Context, spec providers.SnapshotSpec) (providers.Snapshot, error) {
	const op = "ensure snapshot"
	st, err := p.settings(op)
	if err != nil {
		return providers.Snapshot{}, err
	}
	if err := checkSlug(op, spec.Slug); err != nil {
		return providers.Snapshot{}, err
	}
	for k := range spec.Env {
		if err := checkEnvName(k); err != nil {
			return providers.Snapshot{}, providers.Wrap(providers.InvalidArgument, op, err)
		}
	}
	defer p.builds.lock(spec.Slug)()
	snap, err := p.getSnapshot(ctx, st, op, spec.Slug)
	if err == nil {
		p.rememberSnapshot(spec.Slug, spec.Labels)
		snap.Labels = maps.Clone(spec.Labels)
		return snap, nil
	}
	if !providers.IsNotFound(err) {
		return providers.Snapshot{}, err
	}
	started := time.Now()
	if err := p.buildSnapshot(ctx, st, op, spec); err != nil {
		p.log.Warn("snapshot build failed", "slug", spec.Slug, "code", providers.CodeOf(err).String(), "ms", time.Since(started).Milliseconds())
		return providers.Snapshot{}, err
	}
	p.rememberSnapshot(spec.Slug, spec.Labels)
	p.log.Info("snapshot built", "slug", spec.Slug, "ms", time.Since(started).Milliseconds())
	return p.getSnapshot(ctx, st, op, spec.Slug)
}

func (p *Provider) rememberSnapshot(slug string, labels map[string]string) {
	p.mu.Lock()
	p.snaps[slug] = maps.Clone(labels)
	p.mu.Unlock()
}

func (p *Provider) buildSnapshot(ctx context.Context, st *state, op string, spec providers.SnapshotSpec) error {
	timeout := spec.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	builder, _, err := p.create(ctx, st, providers.CreateSpec{
		Labels:   map[string]string{},
		Env:      spec.Env,
		Network:  providers.NetworkPolicy{Mode: providers.NetworkAll},
		Lifetime: timeout + 5*time.Minute,
	}, map[string]string{tagBuilder: spec.Slug})
	if err != nil {
		return err
	}
	defer p.abandon(ctx, st, builder.ID)
	for i, cmd := range spec.Setup {
		out := &tailBuffer{max: 2048}
		r, err := p.exec(ctx, st, op, builder.ID, providers.ExecRequest{Shell: cmd, Stdout: out, Stderr: out, Timeout: timeout})
		if err != nil {
			return err
		}
		if r.ExitCode != 0 || r.TimedOut {
			return providers.Errorf(providers.FailedPrecondition, op, "snapshot %q: setup step %d exited %d: %s", spec.Slug, i+1, r.ExitCode, out.String())
		}
	}
	ttl := int64(-1) // kept until deleted: the name is what expires
	img, err := routed(ctx, p, op, builder.ID, func(ctx context.Context, rc pb.TaskCommandRouterClient, task string) (*pb.TaskSnapshotFilesystemResponse, error) {
		return rc.TaskSnapshotFilesystem(ctx, pb.TaskSnapshotFilesystemRequest_builder{TaskId: task, SnapshotId: randomHex(16), TtlSeconds: proto.Int64(ttl)}.Build())
	})
	if err != nil {
		return err
	}
	imageID := img.GetImageId()
	if imageID == "" {
		return providers.Errorf(providers.Internal, op, "Modal's snapshot answer carries no image id")
	}
	if len(spec.Env) > 0 {
		if imageID, err = p.envLayer(ctx, st, op, imageID, spec.Env); err != nil {
			return err
		}
	}
	_, err = call(ctx, st.c, op, func(ctx context.Context) (*pb.ImagePublishResponse, error) {
		return st.c.cp.ImagePublish(ctx, pb.ImagePublishRequest_builder{ImageId: imageID, Tag: snapshotRef(st.s.AppName, spec.Slug), EnvironmentName: st.s.Environment}.Build())
	})
	return err
}

// envLayer builds an image of ENV commands on base.
func (p *Provider) envLayer(ctx context.Context, st *state, op, base string, env map[string]string) (string, error) {
	appID, _, err := p.ensureApp(ctx, st)
	if err != nil {
		return "", err
	}
	cmds := []string{"FROM base"}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		cmds = append(cmds, "ENV "+k+"="+strconv.Quote(env[k]))
	}
	img, err := call(ctx, st.c, op, func(ctx context.Context) (*pb.ImageGetOrCreateResponse, error) {
		return st.c.cp.ImageGetOrCreate(ctx, pb.ImageGetOrCreateRequest_builder{
			AppId: appID,
			Image: pb.Image_builder{
				BaseImages:         []*pb.BaseImage{pb.BaseImage_builder{ImageId: base, DockerTag: "base"}.Build()},
				DockerfileCommands: cmds,
			}.Build(),
		}.Build())
	})
	if err != nil {
		return "", err
	}
	if err := p.joinImage(ctx, st, img.GetImageId(), img.GetResult()); err != nil {
		return "", err
	}
	return img.GetImageId(), nil
}

// tailBuffer keeps the last max bytes written, for an error message.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, b...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(b), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}
