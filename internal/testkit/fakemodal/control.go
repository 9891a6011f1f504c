package fakemodal

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sandstep/sandstep/internal/testkit/bwrapbox"
)

// sandbox is one fake sandbox. Fields below the first group are guarded by
// Server.mu.
type sandbox struct {
	id, taskID, appID, name, imageID string
	dir                              string
	marker                           string // NAME=value in the environment of each of its processes
	env                              map[string]string
	workdir                          string
	blockNetwork                     bool
	createdAt                        time.Time
	timeout, idle                    time.Duration
	ports                            []uint32
	mounts                           []mount

	tags     map[string]string
	result   *pb.GenericResult // set once finished
	vanished bool              // the container is gone (stale container)
	last     time.Time         // last exec or stdin activity
	procs    map[string]*proc
	running  int // procs not yet exited
	expiry   *time.Timer
}

func (sb *sandbox) finished() bool { return sb.result != nil }

// objectName is Modal's rule for object names (sandbox and app names).
var objectName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
var objectIDShape = regexp.MustCompile(`^[a-z]{2}-[A-Za-z0-9]{22}$`)

func (s *Server) AuthTokenGet(context.Context, *pb.AuthTokenGetRequest) (*pb.AuthTokenGetResponse, error) {
	s.mu.Lock()
	s.tokens++
	s.stats.TokensIssued++
	ttl := s.opts.TokenTTL
	if s.tokens == 1 && s.opts.FirstTokenTTL > 0 {
		ttl = s.opts.FirstTokenTTL
	}
	s.mu.Unlock()
	return pb.AuthTokenGetResponse_builder{Token: s.jwt("auth", "ak", ttl)}.Build(), nil
}

func (s *Server) EnvironmentGetOrCreate(_ context.Context, req *pb.EnvironmentGetOrCreateRequest) (*pb.EnvironmentGetOrCreateResponse, error) {
	name := req.GetDeploymentName()
	if name == "" {
		name = "main"
	}
	return pb.EnvironmentGetOrCreateResponse_builder{
		EnvironmentId: "en-" + name,
		Metadata: pb.EnvironmentMetadata_builder{
			Name:     name,
			Settings: pb.EnvironmentSettings_builder{ImageBuilderVersion: "2025.06"}.Build(),
		}.Build(),
	}.Build(), nil
}

func (s *Server) AppGetOrCreate(_ context.Context, req *pb.AppGetOrCreateRequest) (*pb.AppGetOrCreateResponse, error) {
	name := req.GetAppName()
	if !objectName.MatchString(name) {
		return nil, status.Errorf(codes.InvalidArgument, "Invalid App name %q", name)
	}
	key := req.GetEnvironmentName() + "/" + name
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.apps[key]
	switch req.GetObjectCreationType() {
	case pb.ObjectCreationType_OBJECT_CREATION_TYPE_UNSPECIFIED:
		if !ok {
			return nil, status.Errorf(codes.NotFound, "App '%s' not found", name)
		}
	case pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_FAIL_IF_EXISTS:
		if ok {
			return nil, status.Errorf(codes.AlreadyExists, "App '%s' already exists", name)
		}
	}
	if !ok {
		id = "ap-" + randomID(22)
		s.apps[key] = id
	}
	return pb.AppGetOrCreateResponse_builder{AppId: id}.Build(), nil
}

func (s *Server) ImageJoinStreaming(req *pb.ImageJoinStreamingRequest, stream grpc.ServerStreamingServer[pb.ImageJoinStreamingResponse]) error {
	s.mu.Lock()
	_, ok := s.images[req.GetImageId()]
	s.mu.Unlock()
	if !ok {
		return status.Errorf(codes.NotFound, "Image %s not found", req.GetImageId())
	}
	return stream.Send(pb.ImageJoinStreamingResponse_builder{
		Result: pb.GenericResult_builder{Status: pb.GenericResult_GENERIC_STATUS_SUCCESS}.Build(),
		Eof:    true,
	}.Build())
}

func (s *Server) SandboxCreateV2(ctx context.Context, req *pb.SandboxCreateV2Request) (*pb.SandboxCreateV2Response, error) {
	def := req.GetDefinition()
	s.mu.Lock()
	faults := s.faults
	s.mu.Unlock()
	if faults.SlowCreate > 0 {
		select {
		case <-time.After(faults.SlowCreate):
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	if def == nil {
		return nil, status.Error(codes.InvalidArgument, "missing sandbox definition")
	}
	if def.GetName() != "" && (!objectName.MatchString(def.GetName()) || objectIDShape.MatchString(def.GetName())) {
		return nil, status.Errorf(codes.InvalidArgument, "Invalid Sandbox name %q: names may contain only alphanumeric characters, dashes, periods, and underscores, must be shorter than 64 characters, and cannot conflict with App ID strings", def.GetName())
	}
	if def.GetTimeoutSecs() > 24*3600 {
		return nil, status.Error(codes.InvalidArgument, "timeout must be at most 24 hours")
	}
	if def.GetWorkdir() != "" && !filepath.IsAbs(def.GetWorkdir()) {
		return nil, status.Error(codes.InvalidArgument, "workdir must be an absolute path")
	}
	tags := map[string]string{}
	for _, t := range req.GetTags() {
		tags[t.GetTagName()] = t.GetTagValue()
	}
	env := maps.Clone(def.GetEnvironmentVariables().GetContents())
	if env == nil {
		env = map[string]string{}
	}
	for _, src := range req.GetSecretSources() {
		maps.Copy(env, src.GetEnv().GetContents())
	}

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, status.Error(codes.Unavailable, "server is shutting down")
	}
	if !slices.Contains(slices.Collect(maps.Values(s.apps)), req.GetAppId()) {
		s.mu.Unlock()
		return nil, status.Errorf(codes.NotFound, "App %s not found", req.GetAppId())
	}
	img := s.images[def.GetImageId()]
	if img == nil {
		s.mu.Unlock()
		return nil, status.Errorf(codes.NotFound, "Image %s not found", def.GetImageId())
	}
	// The image's ENV, under the sandbox's own variables.
	for k, v := range img.env {
		if _, ok := env[k]; !ok {
			env[k] = v
		}
	}
	mounts, err := s.mountsOf(def)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	now := time.Now()
	if n := faults.CreatesPerSecond; n > 0 {
		s.creates = slices.DeleteFunc(s.creates, func(t time.Time) bool { return now.Sub(t) >= time.Second })
		if len(s.creates) >= n {
			wait := time.Second - now.Sub(s.creates[0])
			s.stats.RateLimited++
			s.mu.Unlock()
			st, _ := status.New(codes.ResourceExhausted, fmt.Sprintf("Rate limit exceeded: at most %d sandbox creations per second", n)).
				WithDetails(pb.RPCRetryPolicy_builder{RetryAfterSecs: float32(wait.Seconds())}.Build())
			return nil, st.Err()
		}
		s.creates = append(s.creates, now)
	}
	if def.GetName() != "" {
		for _, other := range s.sandboxes {
			if other.appID == req.GetAppId() && other.name == def.GetName() && !other.finished() {
				s.mu.Unlock()
				return nil, status.Errorf(codes.AlreadyExists, "Sandbox with name '%s' already exists in App", def.GetName())
			}
		}
	}
	id := "sb-" + randomID(24) // not V1's 22: clients route it to V2
	sb := &sandbox{
		id: id, taskID: "ta-" + randomID(22), appID: req.GetAppId(), name: def.GetName(), imageID: def.GetImageId(),
		dir:          filepath.Join(s.dir, id),
		marker:       "MODAL_FAKE_SANDBOX=" + s.instance + "-" + id,
		env:          env,
		workdir:      def.GetWorkdir(),
		blockNetwork: def.GetBlockNetwork() || def.GetNetworkAccess().GetNetworkAccessType() == pb.NetworkAccess_BLOCKED,
		createdAt:    now,
		timeout:      time.Duration(def.GetTimeoutSecs()) * time.Second,
		tags:         tags,
		last:         now,
		procs:        map[string]*proc{},
		mounts:       mounts,
	}
	if sb.workdir == "" {
		sb.workdir = "/"
	}
	if sb.timeout == 0 {
		sb.timeout = 300 * time.Second
	}
	if def.HasIdleTimeoutSecs() {
		sb.idle = time.Duration(def.GetIdleTimeoutSecs()) * time.Second
	}
	for _, p := range def.GetOpenPorts().GetPorts() {
		sb.ports = append(sb.ports, p.GetPort())
	}
	s.sandboxes[id] = sb
	s.tasks[sb.taskID] = sb
	s.stats.Creates++
	lose := s.faults.LoseCreateAnswers > 0
	if lose {
		s.faults.LoseCreateAnswers--
		s.stats.LostCreates++
	}
	s.mu.Unlock()

	var dirs []string
	for _, sub := range snapshotDirs {
		if img.files != "" {
			// A snapshot's sandboxes start with its files.
			if err := copyTree(filepath.Join(img.files, sub), filepath.Join(sb.dir, sub)); err != nil {
				s.finish(sb, pb.GenericResult_GENERIC_STATUS_FAILURE, "container failed to start: "+err.Error(), false)
				return nil, status.Errorf(codes.Internal, "creating the sandbox failed: %v", err)
			}
		}
		dirs = append(dirs, filepath.Join(sb.dir, sub))
	}
	for _, m := range sb.mounts {
		dirs = append(dirs, m.dir) // a sub_path is made on first mount
	}
	for _, dir := range dirs {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			s.finish(sb, pb.GenericResult_GENERIC_STATUS_FAILURE, "container failed to start: "+err.Error(), false)
			return nil, status.Errorf(codes.Internal, "creating the sandbox failed: %v", err)
		}
	}
	s.mu.Lock()
	sb.expiry = time.AfterFunc(sb.timeout, func() {
		s.finish(sb, pb.GenericResult_GENERIC_STATUS_TIMEOUT, fmt.Sprintf("Sandbox timed out after %s", sb.timeout), false)
	})
	s.mu.Unlock()
	s.log.Info("sandbox created", "sandbox_id", id, "name", sb.name)
	if d := faults.SlowCreateAnswer; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-s.stop:
			t.Stop()
		}
	}
	if lose {
		return nil, status.Error(codes.Unavailable, "upstream connect error or disconnect/reset before headers (the answer was lost)")
	}
	return pb.SandboxCreateV2Response_builder{
		SandboxId:           id,
		TaskId:              sb.taskID,
		CommandRouterAccess: pb.CommandRouterAccess_builder{Jwt: s.routerJWT(sb), Url: s.routerURL()}.Build(),
	}.Build(), nil
}

func (s *Server) routerURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return "https://" + s.routerAddr
}

func (s *Server) routerJWT(sb *sandbox) string {
	return s.jwt("router", sb.taskID, s.opts.RouterTokenTTL)
}

// lookup returns the sandbox with id; NOT_FOUND for an unknown one.
func (s *Server) lookup(id string) (*sandbox, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.sandboxes[id]
	if sb == nil {
		return nil, status.Errorf(codes.NotFound, "Sandbox %s not found", id)
	}
	return sb, nil
}

func (s *Server) SandboxGetFromNameV2(_ context.Context, req *pb.SandboxGetFromNameRequest) (*pb.SandboxGetFromNameResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	appID := s.apps[req.GetEnvironmentName()+"/"+req.GetAppName()]
	var found *sandbox
	for _, sb := range s.sandboxes {
		if appID == "" || sb.appID != appID || sb.name != req.GetSandboxName() || sb.name == "" {
			continue
		}
		if !sb.finished() {
			found = sb
			break
		}
		if req.GetIncludeTerminated() && (found == nil || sb.createdAt.After(found.createdAt)) {
			found = sb
		}
	}
	if found == nil {
		return nil, status.Errorf(codes.NotFound, "Sandbox with name '%s' not found in App '%s'", req.GetSandboxName(), req.GetAppName())
	}
	return pb.SandboxGetFromNameResponse_builder{SandboxId: found.id}.Build(), nil
}

// SandboxGetFromName is the V1 lookup, which the SDK falls back to when
// V2's misses; the fake's sandboxes are all V2, so it finds the same.
func (s *Server) SandboxGetFromName(ctx context.Context, req *pb.SandboxGetFromNameRequest) (*pb.SandboxGetFromNameResponse, error) {
	return s.SandboxGetFromNameV2(ctx, req)
}

func (s *Server) SandboxGetTaskIdV2(_ context.Context, req *pb.SandboxGetTaskIdRequest) (*pb.SandboxGetTaskIdResponse, error) {
	sb, err := s.lookup(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb.finished() {
		return pb.SandboxGetTaskIdResponse_builder{TaskResult: sb.result}.Build(), nil
	}
	return pb.SandboxGetTaskIdResponse_builder{TaskId: proto.String(sb.taskID)}.Build(), nil
}

func (s *Server) SandboxGetCommandRouterAccess(_ context.Context, req *pb.SandboxGetCommandRouterAccessRequest) (*pb.SandboxGetCommandRouterAccessResponse, error) {
	s.mu.Lock()
	sb := s.sandboxes[req.GetSandboxId()]
	if sb == nil && req.HasTaskId() {
		sb = s.tasks[req.GetTaskId()]
	}
	finished := sb != nil && sb.finished()
	s.mu.Unlock()
	switch {
	case sb == nil:
		return nil, status.Errorf(codes.NotFound, "Sandbox %s not found", req.GetSandboxId())
	case finished:
		return nil, status.Errorf(codes.FailedPrecondition, "Sandbox %s has already finished", sb.id)
	}
	return pb.SandboxGetCommandRouterAccessResponse_builder{Jwt: s.routerJWT(sb), Url: s.routerURL()}.Build(), nil
}

// SandboxWaitV2 answers the result once the sandbox finished, or an empty
// answer when the wait's timeout passes first (Modal's long poll).
func (s *Server) SandboxWaitV2(ctx context.Context, req *pb.SandboxWaitRequest) (*pb.SandboxWaitResponse, error) {
	sb, err := s.lookup(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(time.Duration(float64(req.GetTimeout()) * float64(time.Second)))
	for {
		s.mu.Lock()
		res := sb.result
		s.mu.Unlock()
		if res != nil {
			return pb.SandboxWaitResponse_builder{Result: res}.Build(), nil
		}
		if !time.Now().Before(deadline) {
			return pb.SandboxWaitResponse_builder{}.Build(), nil
		}
		select {
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-time.After(min(50*time.Millisecond, time.Until(deadline))):
		}
	}
}

func (s *Server) SandboxTerminateV2(_ context.Context, req *pb.SandboxTerminateRequest) (*pb.SandboxTerminateResponse, error) {
	sb, err := s.lookup(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	existing := sb.result
	s.mu.Unlock()
	if existing != nil {
		return pb.SandboxTerminateResponse_builder{ExistingResult: existing}.Build(), nil
	}
	s.finish(sb, pb.GenericResult_GENERIC_STATUS_TERMINATED, "Sandbox terminated", false)
	return pb.SandboxTerminateResponse_builder{}.Build(), nil
}

func (s *Server) SandboxTagsGetV2(_ context.Context, req *pb.SandboxTagsGetRequest) (*pb.SandboxTagsGetResponse, error) {
	sb, err := s.lookup(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return pb.SandboxTagsGetResponse_builder{Tags: tagList(sb.tags)}.Build(), nil
}

func tagList(tags map[string]string) []*pb.SandboxTag {
	var out []*pb.SandboxTag
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		out = append(out, pb.SandboxTag_builder{TagName: k, TagValue: tags[k]}.Build())
	}
	return out
}

// listPage is how many sandboxes one SandboxListV2 answer holds at most;
// clients page with before_timestamp.
const listPage = 100

func (s *Server) SandboxListV2(_ context.Context, req *pb.SandboxListRequest) (*pb.SandboxListResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var hits []*sandbox
	for _, sb := range s.sandboxes {
		if req.GetAppId() != "" && sb.appID != req.GetAppId() {
			continue
		}
		if sb.finished() && !req.GetIncludeFinished() {
			continue
		}
		if b := req.GetBeforeTimestamp(); b > 0 && unixSeconds(sb.createdAt) >= b {
			continue
		}
		match := true
		for _, t := range req.GetTags() {
			if v, ok := sb.tags[t.GetTagName()]; !ok || v != t.GetTagValue() {
				match = false
				break
			}
		}
		if match {
			hits = append(hits, sb)
		}
	}
	// Newest first, as Modal pages.
	sort.Slice(hits, func(i, j int) bool { return hits[i].createdAt.After(hits[j].createdAt) })
	if len(hits) > listPage {
		hits = hits[:listPage]
	}
	out := make([]*pb.SandboxInfo, 0, len(hits))
	for _, sb := range hits {
		info := pb.SandboxInfo_builder{
			Id: sb.id, CreatedAt: unixSeconds(sb.createdAt), AppId: sb.appID, Tags: tagList(sb.tags),
			Name: sb.name, ImageId: sb.imageID, TimeoutSecs: uint32(sb.timeout / time.Second),
			TaskInfo: pb.TaskInfo_builder{Id: sb.taskID, Result: sb.result}.Build(),
		}
		if sb.idle > 0 {
			info.IdleTimeoutSecs = proto.Uint32(uint32(sb.idle / time.Second))
		}
		out = append(out, info.Build())
	}
	return pb.SandboxListResponse_builder{Sandboxes: out}.Build(), nil
}

// SandboxGetTunnelsV2 answers a tunnel per open port: the hosts are made
// up (*.modal.fake.invalid), as nothing is served on them.
func (s *Server) SandboxGetTunnelsV2(_ context.Context, req *pb.SandboxGetTunnelsRequest) (*pb.SandboxGetTunnelsResponse, error) {
	sb, err := s.lookup(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb.finished() {
		return pb.SandboxGetTunnelsResponse_builder{Result: sb.result}.Build(), nil
	}
	var out []*pb.TunnelData
	for _, p := range sb.ports {
		out = append(out, pb.TunnelData_builder{
			Host: fmt.Sprintf("%s-%d.modal.fake.invalid", sb.taskID, p), Port: 443, ContainerPort: p,
		}.Build())
	}
	return pb.SandboxGetTunnelsResponse_builder{
		Result:  pb.GenericResult_builder{Status: pb.GenericResult_GENERIC_STATUS_SUCCESS}.Build(),
		Tunnels: out,
	}.Build(), nil
}

// finish ends a sandbox with a result: its processes are killed and its
// files removed, its name is free again. vanished says the container was
// removed under a running sandbox (the stale-container quirk).
func (s *Server) finish(sb *sandbox, st pb.GenericResult_GenericStatus, msg string, vanished bool) bool {
	s.mu.Lock()
	if sb.finished() {
		s.mu.Unlock()
		return false
	}
	code := int32(0)
	switch st {
	case pb.GenericResult_GENERIC_STATUS_TERMINATED:
		code = 137
	case pb.GenericResult_GENERIC_STATUS_TIMEOUT:
		code = 124
	}
	sb.result = pb.GenericResult_builder{Status: st, Exception: msg, Exitcode: code}.Build()
	sb.vanished = vanished
	if sb.expiry != nil {
		sb.expiry.Stop()
	}
	procs := slices.Collect(maps.Values(sb.procs))
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	bwrapbox.KillMarked(sb.marker)
	for _, p := range procs {
		<-p.done
	}
	_ = os.RemoveAll(sb.dir)
	s.log.Info("sandbox finished", "sandbox_id", sb.id, "status", st.String(), "vanished", vanished)
	return true
}

// Vanish removes a running sandbox's container under it, as Modal does
// when a worker goes away: its processes die, router calls answer
// NOT_FOUND, lookups by name miss, and Wait reports it terminated. It
// reports whether the sandbox was running.
func (s *Server) Vanish(id string) bool {
	sb, err := s.lookup(id)
	if err != nil {
		return false
	}
	return s.finish(sb, pb.GenericResult_GENERIC_STATUS_TERMINATED, "worker preempted: container removed", true)
}

// Sandboxes returns the ids of the running sandboxes, sorted.
func (s *Server) Sandboxes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, sb := range s.sandboxes {
		if !sb.finished() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Tags returns a sandbox's tags (nil for an unknown one).
func (s *Server) Tags(id string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.sandboxes[id]; sb != nil {
		return maps.Clone(sb.tags)
	}
	return nil
}

// Result returns how a sandbox ended: its status and message; "" while it
// runs or for an unknown one.
func (s *Server) Result(id string) (string, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.sandboxes[id]; sb != nil && sb.result != nil {
		return sb.result.GetStatus().String(), sb.result.GetException()
	}
	return "", ""
}

// shutdown finishes every sandbox.
func (s *Server) shutdown() {
	s.mu.Lock()
	if !s.closed {
		close(s.stop)
	}
	s.closed = true
	all := slices.Collect(maps.Values(s.sandboxes))
	s.mu.Unlock()
	for _, sb := range all {
		s.finish(sb, pb.GenericResult_GENERIC_STATUS_TERMINATED, "server shut down", false)
	}
}

// idleSweep ends the sandboxes idle longer than their idle timeout.
func (s *Server) idleSweep(now time.Time) {
	s.mu.Lock()
	var idle []*sandbox
	for _, sb := range s.sandboxes {
		if !sb.finished() && sb.idle > 0 && sb.running == 0 && now.Sub(sb.last) >= sb.idle {
			idle = append(idle, sb)
		}
	}
	s.mu.Unlock()
	for _, sb := range idle {
		s.finish(sb, pb.GenericResult_GENERIC_STATUS_IDLE_TIMEOUT, fmt.Sprintf("Sandbox idle for %s", sb.idle), false)
	}
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
