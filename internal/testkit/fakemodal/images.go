package fakemodal

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

// image is one image. Registry images are recorded, not built: a sandbox
// of one sees the host's root. A filesystem snapshot is an image whose
// files are the writable folders of the sandbox it was taken of (/opt,
// /root, /tmp and /workspace here), which sandboxes created from it (or
// from an image built on it) start with. ENV commands of a Dockerfile
// layer set the environment of the image's sandboxes.
type image struct {
	id    string
	from  string            // first Dockerfile command, for a registry image
	env   map[string]string // ENV of its layers
	files string            // the snapshot's folders; "" for a registry image
}

// named is a published image name.
type named struct {
	imageID, revision string
	created, updated  time.Time
}

// snapshotDirs are the sandbox's own folders a snapshot keeps.
var snapshotDirs = []string{"opt", "root", "tmp", "workspace"}

// envLine is a Dockerfile ENV command of one variable, its value quoted as
// a Go (or JSON) string or bare.
var envLine = regexp.MustCompile(`^ENV\s+([A-Za-z_][A-Za-z0-9_]*)[= ](.*)$`)

// ImageGetOrCreate records the image; the same definition gets the same id
// (Modal caches builds). An image on a base image (base_images, "FROM
// base") inherits its files and environment.
func (s *Server) ImageGetOrCreate(_ context.Context, req *pb.ImageGetOrCreateRequest) (*pb.ImageGetOrCreateResponse, error) {
	cmds := req.GetImage().GetDockerfileCommands()
	if len(cmds) == 0 {
		return nil, status.Error(codes.InvalidArgument, "image has no Dockerfile commands")
	}
	img := &image{from: cmds[0], env: map[string]string{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, base := range req.GetImage().GetBaseImages() {
		b := s.images[base.GetImageId()]
		if b == nil {
			return nil, status.Errorf(codes.NotFound, "Image %s not found", base.GetImageId())
		}
		if cmds[0] != "FROM "+base.GetDockerTag() {
			return nil, status.Errorf(codes.InvalidArgument, "the first Dockerfile command must be FROM %s", base.GetDockerTag())
		}
		img.from, img.files = b.from, b.files
		maps.Copy(img.env, b.env)
	}
	for _, c := range cmds[1:] {
		m := envLine.FindStringSubmatch(strings.TrimSpace(c))
		if m == nil {
			continue // RUN and the rest: the fake builds nothing
		}
		v := strings.TrimSpace(m[2])
		if u, err := strconv.Unquote(v); err == nil {
			v = u
		}
		img.env[m[1]] = v
	}
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(req.GetImage())
	img.id = "im-" + hashID(b)
	if old := s.images[img.id]; old == nil {
		s.images[img.id] = img
	}
	return pb.ImageGetOrCreateResponse_builder{
		ImageId: img.id,
		Result:  pb.GenericResult_builder{Status: pb.GenericResult_GENERIC_STATUS_SUCCESS}.Build(),
	}.Build(), nil
}

// imageRef checks a named image reference ("name[:tag]", no namespace
// here) and returns it with its tag.
func imageRef(ref string) (string, error) {
	name, tag, ok := strings.Cut(ref, ":")
	if !ok {
		tag = "latest"
	}
	if !objectName.MatchString(name) || strings.HasPrefix(name, "im-") || !objectName.MatchString(tag) || strings.Contains(name, "/") {
		return "", status.Errorf(codes.InvalidArgument, "Invalid Image name %q", ref)
	}
	return name + ":" + tag, nil
}

// ImagePublish names an image (or points the name at another one).
func (s *Server) ImagePublish(_ context.Context, req *pb.ImagePublishRequest) (*pb.ImagePublishResponse, error) {
	ref, err := imageRef(req.GetTag())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.images[req.GetImageId()] == nil {
		return nil, status.Errorf(codes.NotFound, "Image %s not found", req.GetImageId())
	}
	key := req.GetEnvironmentName() + "/" + ref
	now := time.Now()
	n := s.published[key]
	if n == nil {
		n = &named{created: now}
		s.published[key] = n
	}
	n.imageID, n.revision, n.updated = req.GetImageId(), "ir-"+randomID(22), now
	return pb.ImagePublishResponse_builder{ImageId: n.imageID, RevisionId: n.revision}.Build(), nil
}

// ImageGetByTag resolves a published name.
func (s *Server) ImageGetByTag(_ context.Context, req *pb.ImageGetByTagRequest) (*pb.ImageGetByTagResponse, error) {
	ref, err := imageRef(req.GetTag())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.published[req.GetEnvironmentName()+"/"+ref]
	if n == nil {
		return nil, status.Errorf(codes.NotFound, "Image '%s' not found", ref)
	}
	return pb.ImageGetByTagResponse_builder{ImageId: n.imageID}.Build(), nil
}

// ImageNameDelete removes a name; the image stays for the sandboxes that
// use it. Its reference may start with the environment ("env/name:tag").
func (s *Server) ImageNameDelete(_ context.Context, req *pb.ImageNameDeleteRequest) (*emptypb.Empty, error) {
	env, rest, ok := strings.Cut(req.GetTag(), "/")
	if !ok {
		env, rest = "", req.GetTag()
	}
	ref, err := imageRef(rest)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.published[env+"/"+ref] == nil {
		return nil, status.Errorf(codes.NotFound, "Image '%s' not found", ref)
	}
	delete(s.published, env+"/"+ref)
	return &emptypb.Empty{}, nil
}

// ImageListTags lists an environment's published names by prefix, in one
// page of at most max_objects (100).
func (s *Server) ImageListTags(_ context.Context, req *pb.ImageListTagsRequest) (*pb.ImageListTagsResponse, error) {
	limit := int(req.GetMaxObjects())
	if limit == 0 {
		limit = 100
	}
	if limit > 100 {
		return nil, status.Error(codes.InvalidArgument, "max_objects must be at most 100")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	prefix := req.GetEnvironmentName() + "/"
	var keys []string
	for k, n := range s.published {
		if strings.HasPrefix(k, prefix+req.GetTagPrefix()) && (req.GetImageId() == "" || n.imageID == req.GetImageId()) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	start := 0
	if t := req.GetPageToken(); t != "" {
		start, _ = strconv.Atoi(t)
	}
	out := pb.ImageListTagsResponse_builder{EnvironmentName: req.GetEnvironmentName()}
	for i := start; i < len(keys) && i < start+limit; i++ {
		n := s.published[keys[i]]
		out.Items = append(out.Items, pb.ImageListTagsItem_builder{
			Tag: strings.TrimPrefix(keys[i], prefix), ImageId: n.imageID, RevisionId: n.revision,
			CreatedAt: unixSeconds(n.created), UpdatedAt: unixSeconds(n.updated),
		}.Build())
	}
	if start+limit < len(keys) {
		out.NextPageToken = strconv.Itoa(start + limit)
	}
	return out.Build(), nil
}

// TaskSnapshotFilesystem takes a filesystem snapshot of a running sandbox
// as a new image; snapshot_id makes a repeated request answer the same
// image.
func (r *routerServer) TaskSnapshotFilesystem(_ context.Context, req *pb.TaskSnapshotFilesystemRequest) (*pb.TaskSnapshotFilesystemResponse, error) {
	s := r.s
	if !req.HasTtlSeconds() || (req.GetTtlSeconds() <= 0 && req.GetTtlSeconds() != -1) {
		return nil, status.Error(codes.InvalidArgument, "ttl_seconds must be set: positive, or -1 for no expiry")
	}
	if req.GetSnapshotId() == "" {
		return nil, status.Error(codes.InvalidArgument, "snapshot_id is required")
	}
	sb, err := r.task(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if id, ok := s.snapshots[req.GetSnapshotId()]; ok {
		s.mu.Unlock()
		return pb.TaskSnapshotFilesystemResponse_builder{ImageId: id}.Build(), nil
	}
	base := s.images[sb.imageID]
	s.mu.Unlock()
	id := "im-" + randomID(22)
	dir := filepath.Join(s.dir, "images", id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, status.Errorf(codes.Internal, "snapshot: %v", err)
	}
	for _, sub := range snapshotDirs {
		if err := copyTree(filepath.Join(sb.dir, sub), filepath.Join(dir, sub)); err != nil {
			_ = os.RemoveAll(dir)
			return nil, status.Errorf(codes.Internal, "snapshot: %v", err)
		}
	}
	img := &image{id: id, env: map[string]string{}, files: dir}
	if base != nil {
		img.from = base.from
		maps.Copy(img.env, base.env)
	}
	s.mu.Lock()
	s.images[id] = img
	s.snapshots[req.GetSnapshotId()] = id
	s.mu.Unlock()
	s.log.Info("filesystem snapshot taken", "sandbox_id", sb.id, "image_id", id)
	return pb.TaskSnapshotFilesystemResponse_builder{ImageId: id}.Build(), nil
}

// copyTree copies a folder with its modes, links and times.
func copyTree(from, to string) error {
	if _, err := os.Stat(from); os.IsNotExist(err) {
		return os.MkdirAll(to, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	if out, err := exec.Command("cp", "-a", "--", from, to).CombinedOutput(); err != nil {
		return fmt.Errorf("cp -a %s: %v: %s", from, err, strings.TrimSpace(string(out)))
	}
	return nil
}
