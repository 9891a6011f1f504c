package fakemodal

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// volume is one Modal Volume: a directory of the fake's, bound into the
// sandboxes that mount it. Writes are visible at once, as Modal's
// background commits make them to later sandboxes.
type volume struct {
	id, env, name string
	dir           string
	createdAt     time.Time
}

// mount is one of a sandbox's volume mounts.
type mount struct {
	dir, path string
	readOnly  bool
}

// VolumeGetOrCreate looks a volume up by name in an environment, creating
// it when the creation type says so (Modal's object semantics: UNSPECIFIED
// is a lookup, NOT_FOUND when missing).
func (s *Server) VolumeGetOrCreate(_ context.Context, req *pb.VolumeGetOrCreateRequest) (*pb.VolumeGetOrCreateResponse, error) {
	name := req.GetDeploymentName()
	if !objectName.MatchString(name) || objectIDShape.MatchString(name) {
		return nil, status.Errorf(codes.InvalidArgument, "Invalid Volume name: '%s'. Names may contain only alphanumeric characters, dashes, periods, and underscores, must be shorter than 64 characters, and cannot conflict with App ID strings.", name)
	}
	key := req.GetEnvironmentName() + "/" + name
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.volumes[key]
	switch req.GetObjectCreationType() {
	case pb.ObjectCreationType_OBJECT_CREATION_TYPE_UNSPECIFIED:
		if !ok {
			return nil, status.Errorf(codes.NotFound, "Volume '%s' not found", name)
		}
	case pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_FAIL_IF_EXISTS:
		if ok {
			return nil, status.Errorf(codes.AlreadyExists, "Volume '%s' already exists", name)
		}
	case pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_IF_MISSING:
	default:
		return nil, status.Errorf(codes.InvalidArgument, "object creation type %s is not supported for volumes here", req.GetObjectCreationType())
	}
	if !ok {
		id := "vo-" + randomID(22)
		v = &volume{id: id, env: req.GetEnvironmentName(), name: name, dir: filepath.Join(s.dir, "volumes", id), createdAt: time.Now()}
		if err := os.MkdirAll(v.dir, 0o755); err != nil {
			return nil, status.Errorf(codes.Internal, "creating the volume failed: %v", err)
		}
		s.volumes[key] = v
	}
	return pb.VolumeGetOrCreateResponse_builder{
		VolumeId: v.id,
		Version:  pb.VolumeFsVersion_VOLUME_FS_VERSION_V2,
		Metadata: v.metadata(),
	}.Build(), nil
}

func (v *volume) metadata() *pb.VolumeMetadata {
	return pb.VolumeMetadata_builder{
		Version:      pb.VolumeFsVersion_VOLUME_FS_VERSION_V2,
		Name:         v.name,
		CreationInfo: pb.CreationInfo_builder{CreatedAt: unixSeconds(v.createdAt), CreatedBy: "fakemodal"}.Build(),
	}.Build()
}

// volumeByID returns a volume; s.mu is held.
func (s *Server) volumeByID(id string) *volume {
	for _, v := range s.volumes {
		if v.id == id {
			return v
		}
	}
	return nil
}

// VolumeDelete deletes a volume and its files. Sandboxes that mount it
// keep what they have open; new ones cannot mount it.
func (s *Server) VolumeDelete(_ context.Context, req *pb.VolumeDeleteRequest) (*emptypb.Empty, error) {
	s.mu.Lock()
	v := s.volumeByID(req.GetVolumeId())
	if v == nil {
		s.mu.Unlock()
		return nil, status.Errorf(codes.NotFound, "Volume %s not found", req.GetVolumeId())
	}
	delete(s.volumes, v.env+"/"+v.name)
	s.mu.Unlock()
	_ = os.RemoveAll(v.dir)
	return &emptypb.Empty{}, nil
}

// VolumeList pages through an environment's volumes, newest first, by
// created_before.
func (s *Server) VolumeList(_ context.Context, req *pb.VolumeListRequest) (*pb.VolumeListResponse, error) {
	limit := int(req.GetPagination().GetMaxObjects())
	if limit <= 0 {
		limit = 100
	}
	if limit > 100 {
		return nil, status.Error(codes.InvalidArgument, "max_objects must be at most 100")
	}
	before := req.GetPagination().GetCreatedBefore()
	s.mu.Lock()
	var hits []*volume
	for _, v := range s.volumes {
		if v.env == req.GetEnvironmentName() && (before <= 0 || unixSeconds(v.createdAt) < before) {
			hits = append(hits, v)
		}
	}
	s.mu.Unlock()
	sort.Slice(hits, func(i, j int) bool { return hits[i].createdAt.After(hits[j].createdAt) })
	hits = hits[:min(len(hits), limit)]
	items := make([]*pb.VolumeListItem, 0, len(hits))
	for _, v := range hits {
		items = append(items, pb.VolumeListItem_builder{Label: v.name, VolumeId: v.id, CreatedAt: unixSeconds(v.createdAt), Metadata: v.metadata()}.Build())
	}
	return pb.VolumeListResponse_builder{Items: items, EnvironmentName: req.GetEnvironmentName()}.Build(), nil
}

// Volumes returns the names of the volumes in an environment, sorted.
func (s *Server) Volumes(env string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for _, v := range s.volumes {
		if v.env == env {
			names = append(names, v.name)
		}
	}
	slices.Sort(names)
	return names
}

// mountsOf resolves a sandbox definition's volume mounts; s.mu is held.
func (s *Server) mountsOf(def *pb.Sandbox) ([]mount, error) {
	var out []mount
	for _, m := range def.GetVolumeMounts() {
		v := s.volumeByID(m.GetVolumeId())
		if v == nil {
			return nil, status.Errorf(codes.NotFound, "Volume %s not found", m.GetVolumeId())
		}
		p := m.GetMountPath()
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" {
			return nil, status.Errorf(codes.InvalidArgument, "volume mount path %q must be an absolute path other than /", p)
		}
		dir := v.dir
		if sub := m.GetSubPath(); sub != "" {
			dir = filepath.Join(v.dir, filepath.Clean("/"+sub))
		}
		out = append(out, mount{dir: dir, path: p, readOnly: m.GetReadOnly()})
	}
	return out, nil
}
