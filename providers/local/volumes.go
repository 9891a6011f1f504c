package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandstep/sandstep/providers"
)

// A volume is state_dir/volumes/<slug>/ holding meta.json and, as root,
// image: an ext4 file system of the volume's capacity in a sparse file,
// which a sandbox mounting the volume loop-mounts (see images.go), so that
// a writer past the capacity gets ENOSPC. Without root (and with
// volume_capacity in unenforced_limits) it holds data/ instead, a
// directory sandboxes bind, whose size nothing caps; a directory volume of
// an earlier version becomes an image the first time a root plugin mounts
// it. Its files belong to the uid of the sandbox that last mounted it (see
// start).
type volumeMeta struct {
	Slug      string            `json:"slug"`
	Labels    map[string]string `json:"labels,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	// Format is formatExt4 for an image volume, "" for a directory.
	Format     string `json:"format,omitempty"`
	CapacityMB int    `json:"capacity_mb,omitempty"`
	// BaseBytes is what the empty file system takes (its metadata), which
	// SizeBytes leaves out.
	BaseBytes int64 `json:"base_bytes,omitempty"`
}

func volumeDir(s settings, slug string) string {
	return filepath.Join(s.stateDir, "volumes", slug)
}

func volumeDataDir(s settings, slug string) string {
	return filepath.Join(volumeDir(s, slug), "data")
}

func volumeImage(s settings, slug string) string {
	return filepath.Join(volumeDir(s, slug), "image")
}

func readVolumeMeta(s settings, slug string) (volumeMeta, error) {
	var m volumeMeta
	b, err := os.ReadFile(filepath.Join(volumeDir(s, slug), "meta.json"))
	if err != nil {
		return m, err
	}
	return m, json.Unmarshal(b, &m)
}

// volumeUsers maps the volumes of live sandboxes to where they are
// mounted, seen through the sandbox's pid 1; "" while it starts.
func (p *Provider) volumeUsers() map[string]string {
	recs, _ := p.scanRecords()
	out := make(map[string]string)
	for _, r := range recs {
		if !r.alive() {
			continue
		}
		for _, m := range r.Mounts {
			out[m.Volume] = ""
			if r.InitPID != 0 {
				out[m.Volume] = fmt.Sprintf("/proc/%d/root%s", r.InitPID, m.Path)
			}
		}
	}
	return out
}

// volumeInfo describes volume m, given the live sandboxes' volumes.
func (m volumeMeta) volumeInfo(s settings, users map[string]string) providers.Volume {
	at, inUse := users[m.Slug]
	return m.public(s, at, inUse)
}

// public describes a volume. SizeBytes of an image volume is the space
// its files and directories take in its file system: counted live through
// the sandbox that mounts it, else from the superblock, which is exact
// once the file system is unmounted.
func (m volumeMeta) public(s settings, mountedAt string, inUse bool) providers.Volume {
	v := providers.Volume{
		Slug:       m.Slug,
		Labels:     copyMap(m.Labels),
		CapacityMB: m.CapacityMB,
		CreatedAt:  m.CreatedAt,
	}
	if m.Format != formatExt4 {
		v.SizeBytes = treeSize(volumeDataDir(s, m.Slug))
		return v
	}
	image := volumeImage(s, m.Slug)
	u, err := readExt4Usage(image)
	if err != nil {
		return v
	}
	var st unix.Statfs_t
	if mountedAt != "" && unix.Statfs(mountedAt, &st) == nil && uint64(st.Bsize) == u.blockSize && st.Blocks <= u.blocks {
		u.free = st.Bfree
	} else if !inUse && waitDetached(context.Background(), image, 2*time.Second) == nil {
		// Unmounted just now (a sandbox that ended): the superblock is
		// written.
		if fresh, err := readExt4Usage(image); err == nil {
			u = fresh
		}
	}
	v.SizeBytes = max(u.usedBytes()-m.BaseBytes, 0)
	return v
}

// CreateVolume creates a volume, or returns the one with the same slug.
// As root it is an image of spec.CapacityMB (volume_capacity_mb when 0, at
// least MinVolumeCapacityMB).
func (p *Provider) CreateVolume(ctx context.Context, spec providers.VolumeSpec) (providers.Volume, error) {
	const op = "create_volume"
	s, err := p.ready()
	if err != nil {
		return providers.Volume{}, err
	}
	if err := checkSlug(op, "volume", spec.Slug); err != nil {
		return providers.Volume{}, err
	}
	capMB := spec.CapacityMB
	switch {
	case capMB < 0 || capMB > maxVolumeMB:
		return providers.Volume{}, providers.Errorf(providers.InvalidArgument, op, "capacity_mb must be from 0 (the default, %d) to %d, not %d", s.volumeCapacityMB, maxVolumeMB, capMB)
	case capMB == 0:
		capMB = s.volumeCapacityMB
	}
	capMB = max(capMB, MinVolumeCapacityMB)
	existing := func() (providers.Volume, bool) {
		m, err := readVolumeMeta(s, spec.Slug)
		if err != nil {
			return providers.Volume{}, false
		}
		return m.volumeInfo(s, p.volumeUsers()), true
	}
	if v, ok := existing(); ok {
		return v, nil
	}

	// Built aside, outside the lock (mkfs takes a few milliseconds), and
	// renamed into place, so a crash never leaves a volume without its
	// meta.
	tmp := filepath.Join(s.stateDir, "volumes", ".new-"+spec.Slug+"-"+newID())
	defer removeAll(tmp)
	m := volumeMeta{Slug: spec.Slug, Labels: copyMap(spec.Labels), CreatedAt: time.Now().UTC()}
	err = os.Mkdir(tmp, 0o700)
	if err == nil && s.images {
		m.Format, m.CapacityMB = formatExt4, capMB
		if err = makeImage(ctx, s.mkfs, filepath.Join(tmp, "image"), int64(capMB), "", true); err == nil {
			var u ext4Usage
			u, err = readExt4Usage(filepath.Join(tmp, "image"))
			m.BaseBytes = u.usedBytes()
		}
	} else if err == nil {
		err = os.Mkdir(filepath.Join(tmp, "data"), 0o755)
	}
	if err == nil {
		err = writeJSONFile(filepath.Join(tmp, "meta.json"), m, 0o600)
	}
	if err != nil {
		return providers.Volume{}, providers.Wrap(providers.Internal, op, err)
	}
	unlock, err := p.lock(s)
	if err != nil {
		return providers.Volume{}, err
	}
	if v, ok := existing(); ok {
		unlock()
		return v, nil
	}
	// A leftover directory without meta (an interrupted delete) is
	// replaced.
	_ = removeAll(volumeDir(s, spec.Slug))
	err = os.Rename(tmp, volumeDir(s, spec.Slug))
	unlock()
	if err != nil {
		return providers.Volume{}, providers.Wrap(providers.Internal, op, err)
	}
	p.log.Info("volume created", "volume", spec.Slug, "capacity_mb", m.CapacityMB)
	return m.public(s, "", false), nil
}

// stageVolume readies volume m for the sandbox starting with uid and
// returns the path bwrap binds it from. The caller holds the volume: no
// other live sandbox mounts it.
func (p *Provider) stageVolume(ctx context.Context, s settings, st *stager, m providers.Mount, name string, uid int) (string, error) {
	const op = "create"
	meta, err := readVolumeMeta(s, m.Volume)
	if err != nil {
		return "", providers.Errorf(providers.NotFound, op, "volume %q not found", m.Volume)
	}
	if !s.images {
		if meta.Format == formatExt4 {
			return "", providers.Errorf(providers.FailedPrecondition, op, "volume %q is an ext4 image, which only a plugin running as root can mount", m.Volume)
		}
		// Volume files must belong to the sandbox's uid to be writable.
		// This walks the whole volume: one lstat per file, a chown only
		// for files that changed hands, i.e. after a different sandbox
		// used it.
		if err := chownTree(volumeDataDir(s, m.Volume), uid); err != nil {
			return "", providers.Wrap(providers.Internal, op, fmt.Errorf("volume %s: %w", m.Volume, err))
		}
		return st.path(volumeDataDir(s, m.Volume), name), nil
	}
	if meta.Format != formatExt4 {
		if err := p.migrateVolume(ctx, s, meta); err != nil {
			return "", providers.Wrap(providers.Internal, op, fmt.Errorf("volume %s: turning its directory into an image: %w", m.Volume, err))
		}
		if meta, err = readVolumeMeta(s, m.Volume); err != nil {
			return "", providers.Wrap(providers.Internal, op, err)
		}
	}
	image := volumeImage(s, m.Volume)
	if err := waitDetached(ctx, image, imageReleaseWait); err != nil {
		return "", providers.Errorf(providers.Unavailable, op, "volume %q is still held by a sandbox that ended: %v", m.Volume, err)
	}
	// Mounted writable even for a read-only mount, whose bind bwrap makes
	// read-only: the files are given to the sandbox's uid first.
	staged, root, err := st.image(image, name, false)
	if err != nil {
		return "", providers.Wrap(providers.Internal, op, fmt.Errorf("volume %s: %w", m.Volume, err))
	}
	defer root.close()
	freed, err := prepareRoot(root.path(), uid)
	if err != nil {
		return "", providers.Wrap(providers.Internal, op, fmt.Errorf("volume %s: %w", m.Volume, err))
	}
	if freed > 0 {
		// The metadata of the empty file system, which SizeBytes leaves
		// out, was counted with lost+found.
		meta.BaseBytes -= freed
		if err := writeJSONFile(filepath.Join(volumeDir(s, m.Volume), "meta.json"), meta, 0o600); err != nil {
			return "", providers.Wrap(providers.Internal, op, err)
		}
	}
	if err := chownTree(root.path(), uid); err != nil {
		return "", providers.Wrap(providers.Internal, op, fmt.Errorf("volume %s: %w", m.Volume, err))
	}
	return staged, nil
}

// migrateVolume turns a directory volume into an image holding its files,
// of volume_capacity_mb or, when they need more, of their size with room
// to spare. The directory goes once the meta names the image.
func (p *Provider) migrateVolume(ctx context.Context, s settings, m volumeMeta) error {
	data := volumeDataDir(s, m.Slug)
	content, files, err := dirBytes(data)
	if err != nil {
		return err
	}
	capMB := max(int64(s.volumeCapacityMB), imageSizeFor(content, files)*2)
	// What the metadata of an empty file system of that size takes.
	empty := volumeImage(s, m.Slug) + ".tmp-" + newID()
	defer os.Remove(empty)
	if err := makeImage(ctx, s.mkfs, empty, capMB, "", true); err != nil {
		return err
	}
	base, err := readExt4Usage(empty)
	if err != nil {
		return err
	}
	part := volumeImage(s, m.Slug) + ".tmp-" + newID()
	if err := makeImage(ctx, s.mkfs, part, capMB, data, true); err != nil {
		os.Remove(part)
		return err
	}
	if err := os.Rename(part, volumeImage(s, m.Slug)); err != nil {
		os.Remove(part)
		return err
	}
	m.Format, m.CapacityMB, m.BaseBytes = formatExt4, int(capMB), base.usedBytes()
	if err := writeJSONFile(filepath.Join(volumeDir(s, m.Slug), "meta.json"), m, 0o600); err != nil {
		return err
	}
	p.log.Info("directory volume turned into an image", "volume", m.Slug, "capacity_mb", capMB, "bytes", content)
	return removeAll(data)
}

// GetVolume returns a volume by slug.
func (p *Provider) GetVolume(ctx context.Context, slug string) (providers.Volume, error) {
	const op = "get_volume"
	s, err := p.ready()
	if err != nil {
		return providers.Volume{}, err
	}
	if err := checkSlug(op, "volume", slug); err != nil {
		return providers.Volume{}, err
	}
	m, err := readVolumeMeta(s, slug)
	if err != nil {
		return providers.Volume{}, providers.Errorf(providers.NotFound, op, "volume %q not found", slug)
	}
	return m.volumeInfo(s, p.volumeUsers()), nil
}

// DeleteVolume deletes a volume no live sandbox mounts. Idempotent.
func (p *Provider) DeleteVolume(ctx context.Context, slug string) error {
	const op = "delete_volume"
	s, err := p.ready()
	if err != nil {
		return err
	}
	if err := checkSlug(op, "volume", slug); err != nil {
		return err
	}
	unlock, err := p.lock(s)
	if err != nil {
		return err
	}
	if _, err := os.Stat(volumeDir(s, slug)); errors.Is(err, os.ErrNotExist) {
		unlock()
		return nil
	}
	if id := p.userOf(func(r sandboxRecord) bool {
		for _, m := range r.Mounts {
			if m.Volume == slug {
				return true
			}
		}
		return false
	}); id != "" {
		unlock()
		return providers.Errorf(providers.FailedPrecondition, op, "volume %q is mounted by live sandbox %s", slug, id)
	}
	// Renamed under the lock, removed outside it: the slug is free at once
	// and a large volume does not hold up other calls.
	trash := filepath.Join(s.stateDir, "volumes", ".trash-"+slug+"-"+newID())
	err = os.Rename(volumeDir(s, slug), trash)
	unlock()
	if err != nil {
		return providers.Wrap(providers.Internal, op, err)
	}
	if err := removeAll(trash); err != nil {
		return providers.Wrap(providers.Internal, op, err)
	}
	p.log.Info("volume deleted", "volume", slug)
	return nil
}

// userOf returns the id of a live (or starting) sandbox matching f, or "".
func (p *Provider) userOf(f func(sandboxRecord) bool) string {
	recs, _ := p.scanRecords()
	for _, r := range recs {
		if f(r) && r.alive() {
			return r.ID
		}
	}
	return ""
}

// ListVolumes returns the volumes carrying all of the given labels.
func (p *Provider) ListVolumes(ctx context.Context, labels map[string]string) ([]providers.Volume, error) {
	s, err := p.ready()
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(filepath.Join(s.stateDir, "volumes"))
	if err != nil {
		return nil, providers.Wrap(providers.Internal, "list_volumes", err)
	}
	var out []providers.Volume
	users := p.volumeUsers()
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		m, err := readVolumeMeta(s, e.Name())
		if err != nil || !hasLabels(m.Labels, labels) {
			continue
		}
		out = append(out, m.volumeInfo(s, users))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Slug < out[j].Slug })
	return out, nil
}
