package fakedeno

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// volume is a Deno volume: a directory holding the writable parts of a root
// (when bootable) or data.
type volume struct {
	id, slug, region string
	capacity         int64
	bootable         bool
	base             *ref // the snapshot it was made from
	dir              string
	attachedTo       string // sandbox id, while one runs with it
	createdAt        time.Time
}

type snapshot struct {
	id, slug, region string
	volume           ref
	dir              string
	size             int64
	createdAt        time.Time
}

type ref struct {
	ID   string `json:"id"`
	Slug string `json:"slug"`
}

// Console is the console REST plane (console.deno.com).
func (s *Server) Console() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v2/volumes", s.createVolume)
	mux.HandleFunc("GET /api/v2/volumes", s.listVolumes)
	mux.HandleFunc("GET /api/v2/volumes/{id}", s.getVolume)
	mux.HandleFunc("DELETE /api/v2/volumes/{id}", s.deleteVolume)
	mux.HandleFunc("POST /api/v2/volumes/{id}/snapshot", s.snapshotVolume)
	mux.HandleFunc("GET /api/v2/snapshots", s.listSnapshots)
	mux.HandleFunc("GET /api/v2/snapshots/{id}", s.getSnapshot)
	mux.HandleFunc("DELETE /api/v2/snapshots/{id}", s.deleteSnapshot)
	mux.HandleFunc("GET /api/v2/sandboxes", s.listSandboxes)
	return s.logged(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.authorize(w, r) {
			return
		}
		mux.ServeHTTP(w, r)
	}))
}

// slugRE is the SDK's slug rule: 2-32 of [a-z0-9-], no leading or trailing
// dash; "--" at positions 3-4 is refused separately.
var slugRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,30}[a-z0-9]$`)

func checkSlug(slug string) error {
	if !slugRE.MatchString(slug) || (len(slug) >= 4 && slug[2:4] == "--") {
		return fmt.Errorf("slug %q must be 2 to 32 characters of a-z, 0-9 and -, neither starting nor ending with - and without -- at positions 3-4", slug)
	}
	return nil
}

const (
	minCapacity = 300_000_000
	maxCapacity = 20_000_000_000
)

// parseCapacity reads bytes, or a number with GB/MB/kB (decimal) or
// GiB/MiB/KiB (binary) units.
func parseCapacity(raw json.RawMessage) (int64, error) {
	var n float64
	if err := json.Unmarshal(raw, &n); err == nil {
		return int64(n), nil
	}
	var str string
	if err := json.Unmarshal(raw, &str); err != nil {
		return 0, fmt.Errorf("capacity must be a number of bytes or a string such as \"1GB\"")
	}
	units := []struct {
		suffix string
		mult   float64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"kB", 1e3}, {"B", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(str, u.suffix); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
			if err != nil || v < 0 {
				break
			}
			return int64(v * u.mult), nil
		}
	}
	if v, err := strconv.ParseInt(str, 10, 64); err == nil {
		return v, nil
	}
	return 0, fmt.Errorf("capacity %q is not a size such as \"1GB\" or \"512MiB\"", str)
}

// findVolume finds a volume by id or slug; s.mu is held.
func (s *Server) findVolume(key string) *volume {
	for _, v := range s.volumes {
		if v.id == key || v.slug == key {
			return v
		}
	}
	return nil
}

func (s *Server) findSnapshot(key string) *snapshot {
	for _, sn := range s.snapshots {
		if sn.id == key || sn.slug == key {
			return sn
		}
	}
	return nil
}

// slugTaken: volumes and snapshots share one namespace; s.mu is held.
func (s *Server) slugTaken(slug string) bool {
	return s.findVolume(slug) != nil || s.findSnapshot(slug) != nil
}

func (v *volume) json() map[string]any {
	size := dirSize(v.dir)
	var base any
	if v.base != nil {
		base = *v.base
	}
	return map[string]any{
		"id": v.id, "slug": v.slug, "region": v.region, "capacity": v.capacity,
		"estimated_allocated_size": size, "estimated_flattened_size": size,
		"is_bootable": v.bootable, "base_snapshot": base,
	}
}

func (sn *snapshot) json() map[string]any {
	return map[string]any{
		"id": sn.id, "slug": sn.slug, "region": sn.region,
		"allocated_size": sn.size, "flattened_size": sn.size,
		"is_bootable": true, "volume": sn.volume,
	}
}

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request) {
	// The SDK posts its whole options object: unknown keys are ignored.
	var in struct {
		Slug     string          `json:"slug"`
		Region   string          `json:"region"`
		Capacity json.RawMessage `json:"capacity"`
		From     string          `json:"from"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		apiError(w, http.StatusBadRequest, "INVALID_BODY", "the body is not a JSON object: %v", err)
		return
	}
	if err := checkSlug(in.Slug); err != nil {
		apiError(w, http.StatusBadRequest, "INVALID_SLUG", "%v", err)
		return
	}
	switch in.Region {
	case "ord":
	case "":
		apiError(w, http.StatusBadRequest, "INVALID_REGION", "region is required")
		return
	case "ams":
		apiError(w, http.StatusServiceUnavailable, "REGION_UNAVAILABLE", "volumes are not available in region ams yet")
		return
	default:
		apiError(w, http.StatusBadRequest, "INVALID_REGION", "unknown region %q", in.Region)
		return
	}
	capacity, err := parseCapacity(in.Capacity)
	if err != nil {
		apiError(w, http.StatusBadRequest, "INVALID_CAPACITY", "%v", err)
		return
	}
	if capacity < minCapacity || capacity > maxCapacity {
		apiError(w, http.StatusBadRequest, "INVALID_CAPACITY", "capacity must be from 300MB to 20GB, not %d bytes", capacity)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.slugTaken(in.Slug) {
		apiError(w, http.StatusConflict, "SLUG_ALREADY_EXISTS", "the slug %q is taken by a volume or snapshot", in.Slug)
		return
	}
	v := &volume{id: newID("vol"), slug: in.Slug, region: in.Region, capacity: capacity, createdAt: time.Now()}
	v.dir = filepath.Join(s.dir, "volumes", v.id)
	switch {
	case in.From == "builtin:debian-13":
		v.bootable = true
		err = newLayer(v.dir)
	case in.From != "":
		sn := s.findSnapshot(in.From)
		if sn == nil {
			apiError(w, http.StatusNotFound, "SNAPSHOT_NOT_FOUND", "no snapshot %q", in.From)
			return
		}
		v.bootable, v.base = true, &ref{ID: sn.id, Slug: sn.slug}
		err = copyTree(sn.dir, v.dir)
	default:
		err = os.MkdirAll(v.dir, 0o755)
	}
	if err != nil {
		apiError(w, http.StatusInternalServerError, "INTERNAL", "%v", err)
		return
	}
	s.volumes[v.id] = v
	writeJSON(w, http.StatusOK, v.json())
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.findVolume(r.PathValue("id"))
	if v == nil {
		apiError(w, http.StatusNotFound, "VOLUME_NOT_FOUND", "no volume %q", r.PathValue("id"))
		return
	}
	writeJSON(w, http.StatusOK, v.json())
}

func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	v := s.findVolume(r.PathValue("id"))
	if v == nil {
		s.mu.Unlock()
		apiError(w, http.StatusNotFound, "VOLUME_NOT_FOUND", "no volume %q", r.PathValue("id"))
		return
	}
	// [INF] in the contract: the codes are unknown, the refusals are not.
	if by := v.attachedTo; by != "" {
		s.mu.Unlock()
		apiError(w, http.StatusConflict, "VOLUME_IN_USE", "volume %q is attached to sandbox %s", v.slug, by)
		return
	}
	for _, sn := range s.snapshots {
		if sn.volume.ID == v.id {
			s.mu.Unlock()
			apiError(w, http.StatusConflict, "VOLUME_HAS_SNAPSHOTS", "volume %q has snapshot %q: delete the snapshots first", v.slug, sn.slug)
			return
		}
	}
	// The slug is free and GET answers 404 at once; the storage goes later.
	delete(s.volumes, v.id)
	s.mu.Unlock()
	_ = os.RemoveAll(v.dir)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) snapshotVolume(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Slug string `json:"slug"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		apiError(w, http.StatusBadRequest, "INVALID_BODY", "the body is not a JSON object: %v", err)
		return
	}
	if err := checkSlug(in.Slug); err != nil {
		apiError(w, http.StatusBadRequest, "INVALID_SLUG", "%v", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.findVolume(r.PathValue("id"))
	switch {
	case v == nil:
		apiError(w, http.StatusNotFound, "VOLUME_NOT_FOUND", "no volume %q", r.PathValue("id"))
		return
	case v.attachedTo != "":
		apiError(w, http.StatusConflict, "VOLUME_IN_USE", "volume %q is attached to sandbox %s: a volume is snapshotted detached", v.slug, v.attachedTo)
		return
	case s.slugTaken(in.Slug):
		apiError(w, http.StatusConflict, "SLUG_ALREADY_EXISTS", "the slug %q is taken by a volume or snapshot", in.Slug)
		return
	}
	sn := &snapshot{id: newID("snp"), slug: in.Slug, region: v.region, volume: ref{ID: v.id, Slug: v.slug}, createdAt: time.Now()}
	sn.dir = filepath.Join(s.dir, "snapshots", sn.id)
	if err := copyTree(v.dir, sn.dir); err != nil {
		apiError(w, http.StatusInternalServerError, "INTERNAL", "%v", err)
		return
	}
	sn.size = dirSize(sn.dir)
	s.snapshots[sn.id] = sn
	writeJSON(w, http.StatusOK, sn.json())
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sn := s.findSnapshot(r.PathValue("id"))
	if sn == nil {
		apiError(w, http.StatusNotFound, "SNAPSHOT_NOT_FOUND", "no snapshot %q", r.PathValue("id"))
		return
	}
	writeJSON(w, http.StatusOK, sn.json())
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	sn := s.findSnapshot(r.PathValue("id"))
	if sn == nil {
		s.mu.Unlock()
		apiError(w, http.StatusNotFound, "SNAPSHOT_NOT_FOUND", "no snapshot %q", r.PathValue("id"))
		return
	}
	// Sandboxes booted from it keep their copy; volumes made from it
	// theirs. The contract names no refusal here.
	delete(s.snapshots, sn.id)
	s.mu.Unlock()
	_ = os.RemoveAll(sn.dir)
	w.WriteHeader(http.StatusNoContent)
}

// paginate answers one page of items (sorted by key) as a bare JSON array,
// with the next page in a Link header.
func paginate[T any](w http.ResponseWriter, r *http.Request, items []T, key func(T) string, render func(T) map[string]any) {
	q := r.URL.Query()
	limit := 30
	if l, err := strconv.Atoi(q.Get("limit")); err == nil && l > 0 && l <= 100 {
		limit = l
	}
	slices.SortFunc(items, func(a, b T) int { return strings.Compare(key(a), key(b)) })
	search, cursor := q.Get("search"), q.Get("cursor")
	page := []map[string]any{}
	var last string
	more := false
	for _, it := range items {
		k := key(it)
		if (cursor != "" && k <= cursor) || (search != "" && !strings.Contains(k, search)) {
			continue
		}
		if len(page) == limit {
			more = true
			break
		}
		page = append(page, render(it))
		last = k
	}
	if more {
		next := *r.URL
		nq := next.Query()
		nq.Set("cursor", last)
		next.RawQuery = nq.Encode()
		next.Scheme, next.Host = "http", r.Host
		w.Header().Set("Link", fmt.Sprintf("<%s>; rel=\"next\"", next.String()))
	}
	writeJSON(w, http.StatusOK, page)
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []*volume
	for _, v := range s.volumes {
		all = append(all, v)
	}
	paginate(w, r, all, func(v *volume) string { return v.slug }, (*volume).json)
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []*snapshot
	for _, sn := range s.snapshots {
		all = append(all, sn)
	}
	paginate(w, r, all, func(sn *snapshot) string { return sn.slug }, (*snapshot).json)
}

// listSandboxes answers the JS SDK's unpaginated list: camelCase, stopped
// sandboxes included, filtered by labels[key]=value.
func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) {
	want := map[string]string{}
	for k, vs := range r.URL.Query() {
		if name, ok := strings.CutPrefix(k, "labels["); ok && strings.HasSuffix(name, "]") {
			want[strings.TrimSuffix(name, "]")] = vs[0]
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []map[string]any{}
	for _, sb := range s.sandboxes {
		match := true
		for k, v := range want {
			if sb.labels[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		status, stopped := "running", any(nil)
		if sb.stopped {
			status, stopped = "stopped", sb.stoppedAt.UTC().Format(time.RFC3339Nano)
		}
		labels := sb.labels
		if labels == nil {
			labels = map[string]string{}
		}
		out = append(out, map[string]any{
			"id": sb.id, "createdAt": sb.createdAt.UTC().Format(time.RFC3339Nano), "stoppedAt": stopped,
			"region": "ord", "status": status, "labels": labels,
		})
	}
	slices.SortFunc(out, func(a, b map[string]any) int { return strings.Compare(a["id"].(string), b["id"].(string)) })
	writeJSON(w, http.StatusOK, out)
}

// layerDirs are the writable directories of a root, inside the sandbox and
// in the layer's directory.
var layerDirs = []struct{ at, sub string }{
	{"/home/app", "home"},
	{"/opt", "opt"},
	{"/tmp", "tmp"},
	{"/workspace", "workspace"},
}

// newLayer makes an empty root layer: the base image's writable parts.
func newLayer(dir string) error {
	for _, d := range layerDirs {
		if err := os.MkdirAll(filepath.Join(dir, d.sub), 0o755); err != nil {
			return err
		}
	}
	return os.Chmod(filepath.Join(dir, "tmp"), 0o1777)
}

// copyTree copies a directory tree as it is, permissions and links kept.
func copyTree(from, to string) error {
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	if out, err := exec.Command("cp", "-a", from, to).CombinedOutput(); err != nil {
		return fmt.Errorf("copying %s: %v: %s", from, err, out)
	}
	return nil
}

func dirSize(dir string) int64 {
	var n int64
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}
