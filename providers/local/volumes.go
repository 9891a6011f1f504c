package local

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/sandstep/sandstep/providers"
)

// A volume is state_dir/volumes/<slug>/ holding meta.json and data/, the
// directory sandboxes mount. Its files belong to the uid of the sandbox that
// last mounted it (see start).
type volumeMeta struct {
	Slug      string            `json:"slug"`
	Labels    map[string]string `json:"labels,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
}

func volumeDir(s settings, slug string) string {
	return filepath.Join(s.stateDir, "volumes", slug)
}

func volumeDataDir(s settings, slug string) string {
	return filepath.Join(volumeDir(s, slug), "data")
}

func readVolumeMeta(s settings, slug string) (volumeMeta, error) {
	var m volumeMeta
	b, err := os.ReadFile(filepath.Join(volumeDir(s, slug), "meta.json"))
	if err != nil {
		return m, err
	}
	return m, json.Unmarshal(b, &m)
}

// public describes a volume. CapacityMB stays 0: the local provider does
// not cap a volume's size (the disk under state_dir does).
func (m volumeMeta) public(s settings) providers.Volume {
	return providers.Volume{
		Slug:      m.Slug,
		Labels:    copyMap(m.Labels),
		SizeBytes: treeSize(volumeDataDir(s, m.Slug)),
		CreatedAt: m.CreatedAt,
	}
}

// CreateVolume creates a volume, or returns the one with the same slug.
func (p *Provider) CreateVolume(ctx context.Context, spec providers.VolumeSpec) (providers.Volume, error) {
	const op = "create_volume"
	s, err := p.ready()
	if err != nil {
		return providers.Volume{}, err
	}
	if err := checkSlug(op, "volume", spec.Slug); err != nil {
		return providers.Volume{}, err
	}
	unlock, err := p.lock(s)
	if err != nil {
		return providers.Volume{}, err
	}
	defer unlock()
	if m, err := readVolumeMeta(s, spec.Slug); err == nil {
		return m.public(s), nil
	}
	// Built aside and renamed into place, so a crash never leaves a volume
	// without its meta.
	tmp := filepath.Join(s.stateDir, "volumes", ".new-"+spec.Slug+"-"+newID())
	m := volumeMeta{Slug: spec.Slug, Labels: copyMap(spec.Labels), CreatedAt: time.Now().UTC()}
	err = os.Mkdir(tmp, 0o700)
	if err == nil {
		err = os.Mkdir(filepath.Join(tmp, "data"), 0o755)
	}
	if err == nil {
		err = writeJSONFile(filepath.Join(tmp, "meta.json"), m, 0o600)
	}
	if err == nil {
		// A leftover directory without meta (an interrupted delete) is
		// replaced.
		_ = removeAll(volumeDir(s, spec.Slug))
		err = os.Rename(tmp, volumeDir(s, spec.Slug))
	}
	if err != nil {
		_ = removeAll(tmp)
		return providers.Volume{}, providers.Wrap(providers.Internal, op, err)
	}
	p.log.Info("volume created", "volume", spec.Slug)
	return m.public(s), nil
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
	return m.public(s), nil
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
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		m, err := readVolumeMeta(s, e.Name())
		if err != nil || !hasLabels(m.Labels, labels) {
			continue
		}
		out = append(out, m.public(s))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Slug < out[j].Slug })
	return out, nil
}
