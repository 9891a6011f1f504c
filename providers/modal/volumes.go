package modal

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"path"
	"regexp"
	"strings"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"

	"github.com/sandstep/sandstep/providers"
)

// Volumes are Modal Volumes (contract section 2.6), named after the App
// and the slug ("<app_name>--<slug>"), so that the provider never takes a
// volume of the workspace's that it did not make, and mounted at create
// with background commits, as Modal's clients mount them.
//
// A Modal Volume has a name and nothing else: no labels, no capacity.
// Labels given at CreateVolume are kept by this process (a restarted
// plugin lists the volumes it finds with their slugs, without labels), and
// a volume is not capped: CapacityMB comes back 0, as the interface says
// for an uncapped one. Which running sandbox mounts which volume is on the
// sandbox's own tags, so DeleteVolume refuses a mounted volume whatever
// process made the sandbox.

// slugRE is what a volume slug of the interface may be here.
var slugRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func checkSlug(op, slug string) error {
	if !slugRE.MatchString(slug) {
		return providers.Errorf(providers.InvalidArgument, op, "slug %q must be 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit", slug)
	}
	return nil
}

// mountPathRE keeps mount paths plain, so that the mounts tag
// ("slug:path[:ro]", comma-separated) reads back unambiguously.
var mountPathRE = regexp.MustCompile(`^/[A-Za-z0-9._/-]+$`)

// volumeName is the Modal name of a slug: the App's name, "--", the slug;
// a hash of the slug when that is longer than Modal's 64 characters.
func volumeName(app, slug string) string {
	if name := app + "--" + slug; len(name) <= 64 {
		return name
	}
	sum := sha256.Sum256([]byte(app + "\x00" + slug))
	h := "h-" + hex.EncodeToString(sum[:16])
	return app[:min(len(app), 64-len(h)-2)] + "--" + h
}

// volMeta is what this process knows of a volume beyond Modal's name.
type volMeta struct {
	slug   string
	labels map[string]string
}

func (p *Provider) volumeMeta(name string) (volMeta, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok := p.vols[name]
	return m, ok
}

// lookupVolume resolves a slug to Modal's volume; NotFound when missing.
func (p *Provider) lookupVolume(ctx context.Context, st *state, op, slug string, create bool) (*pb.VolumeGetOrCreateResponse, error) {
	kind := pb.ObjectCreationType_OBJECT_CREATION_TYPE_UNSPECIFIED
	if create {
		kind = pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_IF_MISSING
	}
	resp, err := call(ctx, st.c, op, func(ctx context.Context) (*pb.VolumeGetOrCreateResponse, error) {
		return st.c.cp.VolumeGetOrCreate(ctx, pb.VolumeGetOrCreateRequest_builder{
			DeploymentName: volumeName(st.s.AppName, slug), EnvironmentName: st.s.Environment, ObjectCreationType: kind,
		}.Build())
	})
	if providers.IsNotFound(err) {
		return nil, providers.Errorf(providers.NotFound, op, "volume %q does not exist", slug)
	}
	return resp, err
}

func (p *Provider) volumeFrom(name, slug string, created float64) providers.Volume {
	v := providers.Volume{Slug: slug, Labels: map[string]string{}}
	if m, ok := p.volumeMeta(name); ok {
		v.Labels = maps.Clone(m.labels)
	}
	if created > 0 {
		v.CreatedAt = time.Unix(0, int64(created*1e9)).UTC()
	}
	return v
}

// CreateVolume makes the volume, or returns the one the slug names.
func (p *Provider) CreateVolume(ctx context.Context, spec providers.VolumeSpec) (providers.Volume, error) {
	const op = "create volume"
	st, err := p.settings(op)
	if err != nil {
		return providers.Volume{}, err
	}
	if err := checkSlug(op, spec.Slug); err != nil {
		return providers.Volume{}, err
	}
	resp, err := p.lookupVolume(ctx, st, op, spec.Slug, true)
	if err != nil {
		return providers.Volume{}, err
	}
	name := volumeName(st.s.AppName, spec.Slug)
	p.mu.Lock()
	if _, ok := p.vols[name]; !ok {
		p.vols[name] = volMeta{slug: spec.Slug, labels: maps.Clone(spec.Labels)}
	}
	p.mu.Unlock()
	p.log.Info("volume ready", "slug", spec.Slug, "volume_id", resp.GetVolumeId())
	return p.volumeFrom(name, spec.Slug, resp.GetMetadata().GetCreationInfo().GetCreatedAt()), nil
}

// GetVolume returns the volume; NotFound when Modal has none by its name.
func (p *Provider) GetVolume(ctx context.Context, slug string) (providers.Volume, error) {
	const op = "get volume"
	st, err := p.settings(op)
	if err != nil {
		return providers.Volume{}, err
	}
	if err := checkSlug(op, slug); err != nil {
		return providers.Volume{}, providers.Errorf(providers.NotFound, op, "volume %q does not exist", slug)
	}
	resp, err := p.lookupVolume(ctx, st, op, slug, false)
	if err != nil {
		return providers.Volume{}, err
	}
	return p.volumeFrom(volumeName(st.s.AppName, slug), slug, resp.GetMetadata().GetCreationInfo().GetCreatedAt()), nil
}

// DeleteVolume deletes the volume unless a running sandbox mounts it
// (FailedPrecondition); one that does not exist is deleted already.
func (p *Provider) DeleteVolume(ctx context.Context, slug string) error {
	const op = "delete volume"
	st, err := p.settings(op)
	if err != nil {
		return err
	}
	if checkSlug(op, slug) != nil {
		return nil // no volume was ever made under it
	}
	resp, err := p.lookupVolume(ctx, st, op, slug, false)
	if providers.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	users, err := p.List(ctx, providers.ListFilter{})
	if err != nil {
		return err
	}
	for _, sb := range users {
		for _, m := range sb.Mounts {
			if m.Volume == slug && sb.State == providers.StateRunning {
				return providers.Errorf(providers.FailedPrecondition, op, "volume %q is mounted by running sandbox %s", slug, sb.ID)
			}
		}
	}
	_, err = call(ctx, st.c, op, func(ctx context.Context) (*struct{}, error) {
		_, err := st.c.cp.VolumeDelete(ctx, pb.VolumeDeleteRequest_builder{VolumeId: resp.GetVolumeId()}.Build())
		return nil, err
	})
	if err != nil && !providers.IsNotFound(err) {
		return err
	}
	p.mu.Lock()
	delete(p.vols, volumeName(st.s.AppName, slug))
	p.mu.Unlock()
	p.log.Info("volume deleted", "slug", slug, "volume_id", resp.GetVolumeId())
	return nil
}

// ListVolumes returns the App's volumes carrying every label given.
func (p *Provider) ListVolumes(ctx context.Context, labels map[string]string) ([]providers.Volume, error) {
	const op = "list volumes"
	st, err := p.settings(op)
	if err != nil {
		return nil, err
	}
	prefix := st.s.AppName + "--"
	var (
		out    []providers.Volume
		before float64
	)
	for range 1000 {
		resp, err := call(ctx, st.c, op, func(ctx context.Context) (*pb.VolumeListResponse, error) {
			return st.c.cp.VolumeList(ctx, pb.VolumeListRequest_builder{
				EnvironmentName: st.s.Environment,
				Pagination:      pb.ListPagination_builder{MaxObjects: 100, CreatedBefore: before}.Build(),
			}.Build())
		})
		if err != nil {
			return nil, err
		}
		for _, item := range resp.GetItems() {
			before = item.GetCreatedAt()
			name := item.GetLabel()
			slug, ours := strings.CutPrefix(name, prefix)
			if m, ok := p.volumeMeta(name); ok {
				slug, ours = m.slug, true
			}
			if !ours {
				continue
			}
			v := p.volumeFrom(name, slug, item.GetCreatedAt())
			if matches(v.Labels, labels) {
				out = append(out, v)
			}
		}
		if len(resp.GetItems()) < 100 {
			break
		}
	}
	return out, nil
}

func matches(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// checkMounts refuses bad mounts before any call; the default path is
// /workspace.
func checkMounts(op string, mounts []providers.Mount) ([]providers.Mount, error) {
	out := make([]providers.Mount, 0, len(mounts))
	seen := map[string]bool{}
	for _, m := range mounts {
		if m.Path == "" {
			m.Path = "/workspace"
		}
		if err := checkSlug(op, m.Volume); err != nil {
			return nil, err
		}
		if !mountPathRE.MatchString(m.Path) || path.Clean(m.Path) != m.Path {
			return nil, providers.Errorf(providers.InvalidArgument, op, "mount path %q must be a clean absolute path of letters, digits, '.', '_', '-' and '/'", m.Path)
		}
		if seen[m.Path] {
			return nil, providers.Errorf(providers.InvalidArgument, op, "two volumes are mounted at %s", m.Path)
		}
		seen[m.Path] = true
		out = append(out, m)
	}
	return out, nil
}

// volumeMounts resolves the mounts to Modal's volume ids.
func (p *Provider) volumeMounts(ctx context.Context, st *state, op string, mounts []providers.Mount) ([]*pb.VolumeMount, error) {
	var out []*pb.VolumeMount
	for _, m := range mounts {
		v, err := p.lookupVolume(ctx, st, op, m.Volume, false)
		if err != nil {
			return nil, err
		}
		out = append(out, pb.VolumeMount_builder{
			VolumeId: v.GetVolumeId(), MountPath: m.Path, AllowBackgroundCommits: true, ReadOnly: m.ReadOnly,
		}.Build())
	}
	return out, nil
}

// mountsTag and parseMounts carry a sandbox's mounts on its tags.
func mountsTag(mounts []providers.Mount) string {
	parts := make([]string, len(mounts))
	for i, m := range mounts {
		parts[i] = m.Volume + ":" + m.Path
		if m.ReadOnly {
			parts[i] += ":ro"
		}
	}
	return strings.Join(parts, ",")
}

func parseMounts(tag string) []providers.Mount {
	var out []providers.Mount
	for part := range strings.SplitSeq(tag, ",") {
		f := strings.Split(part, ":")
		if len(f) < 2 || f[0] == "" {
			continue
		}
		out = append(out, providers.Mount{Volume: f[0], Path: f[1], ReadOnly: len(f) > 2 && f[2] == "ro"})
	}
	return out
}
