package plugin

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sandstep/sandstep/providers"
	pb "github.com/sandstep/sandstep/providers/proto"
)

// Zero durations and times travel as absent fields so that "unset" stays
// distinguishable from a real value on the other side.

func durToProto(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

func durFromProto(d *durationpb.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.AsDuration()
}

func timeToProto(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func timeFromProto(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

func networkToProto(n providers.NetworkPolicy) *pb.NetworkPolicy {
	if n.Mode == "" && len(n.AllowHosts) == 0 {
		return nil
	}
	return &pb.NetworkPolicy{Mode: string(n.Mode), AllowHosts: n.AllowHosts}
}

func networkFromProto(n *pb.NetworkPolicy) providers.NetworkPolicy {
	if n == nil {
		return providers.NetworkPolicy{}
	}
	return providers.NetworkPolicy{Mode: providers.NetworkMode(n.Mode), AllowHosts: n.AllowHosts}
}

func configToProto(c providers.Config) *pb.ConfigureRequest {
	return &pb.ConfigureRequest{
		SettingsJson: c.Settings,
		Secrets:      c.Secrets,
		BaseDir:      c.BaseDir,
		DataDir:      c.DataDir,
		Defaults: &pb.SandboxDefaults{
			Lifetime:     durToProto(c.Defaults.Lifetime),
			IdleTimeout:  durToProto(c.Defaults.IdleTimeout),
			ExecTimeout:  durToProto(c.Defaults.ExecTimeout),
			MemoryMb:     int64(c.Defaults.MemoryMB),
			Network:      networkToProto(c.Defaults.Network),
			AllowPrivate: c.Defaults.AllowPrivate,
		},
	}
}

func configFromProto(r *pb.ConfigureRequest) providers.Config {
	d := r.GetDefaults()
	return providers.Config{
		Settings: r.GetSettingsJson(),
		Secrets:  r.GetSecrets(),
		BaseDir:  r.GetBaseDir(),
		DataDir:  r.GetDataDir(),
		Defaults: providers.SandboxDefaults{
			Lifetime:     durFromProto(d.GetLifetime()),
			IdleTimeout:  durFromProto(d.GetIdleTimeout()),
			ExecTimeout:  durFromProto(d.GetExecTimeout()),
			MemoryMB:     int(d.GetMemoryMb()),
			Network:      networkFromProto(d.GetNetwork()),
			AllowPrivate: d.GetAllowPrivate(),
		},
	}
}

func infoToProto(i providers.Info) *pb.InfoResponse {
	c := i.Capabilities
	modes := make([]string, len(c.NetworkModes))
	for k, m := range c.NetworkModes {
		modes[k] = string(m)
	}
	return &pb.InfoResponse{
		Name:       i.Name,
		Version:    i.Version,
		ApiVersion: int64(i.APIVersion),
		Capabilities: &pb.Capabilities{
			Snapshots:         c.Snapshots,
			Volumes:           c.Volumes,
			NamedSandboxes:    c.NamedSandboxes,
			ListByLabels:      c.ListByLabels,
			ExecStreaming:     c.ExecStreaming,
			FileApi:           c.FileAPI,
			PublicUrl:         c.PublicURL,
			HostScopedSecrets: c.HostScopedSecrets,
			ListSnapshots:     c.ListSnapshots,
			NetworkModes:      modes,
			MaxLifetime:       durToProto(c.MaxLifetime),
			Regions:           c.Regions,
			Limits:            limitsToProto(c.Limits),
		},
	}
}

func limitsToProto(l providers.Limits) *pb.Limits {
	if l.Cgroups == "" && l.Volumes == "" && len(l.Enforced) == 0 {
		return nil
	}
	return &pb.Limits{Cgroups: l.Cgroups, Volumes: l.Volumes, Enforced: l.Enforced}
}

func limitsFromProto(l *pb.Limits) providers.Limits {
	return providers.Limits{Cgroups: l.GetCgroups(), Volumes: l.GetVolumes(), Enforced: l.GetEnforced()}
}

func infoFromProto(r *pb.InfoResponse) providers.Info {
	c := r.GetCapabilities()
	var modes []providers.NetworkMode
	for _, m := range c.GetNetworkModes() {
		modes = append(modes, providers.NetworkMode(m))
	}
	return providers.Info{
		Name:       r.GetName(),
		Version:    r.GetVersion(),
		APIVersion: int(r.GetApiVersion()),
		Capabilities: providers.Capabilities{
			Snapshots:         c.GetSnapshots(),
			Volumes:           c.GetVolumes(),
			NamedSandboxes:    c.GetNamedSandboxes(),
			ListByLabels:      c.GetListByLabels(),
			ExecStreaming:     c.GetExecStreaming(),
			FileAPI:           c.GetFileApi(),
			PublicURL:         c.GetPublicUrl(),
			HostScopedSecrets: c.GetHostScopedSecrets(),
			ListSnapshots:     c.GetListSnapshots(),
			NetworkModes:      modes,
			MaxLifetime:       durFromProto(c.GetMaxLifetime()),
			Regions:           c.GetRegions(),
			Limits:            limitsFromProto(c.GetLimits()),
		},
	}
}

func mountsToProto(ms []providers.Mount) []*pb.Mount {
	if len(ms) == 0 {
		return nil
	}
	out := make([]*pb.Mount, len(ms))
	for i, m := range ms {
		out[i] = &pb.Mount{Volume: m.Volume, Path: m.Path, ReadOnly: m.ReadOnly}
	}
	return out
}

func mountsFromProto(ms []*pb.Mount) []providers.Mount {
	if len(ms) == 0 {
		return nil
	}
	out := make([]providers.Mount, len(ms))
	for i, m := range ms {
		out[i] = providers.Mount{Volume: m.GetVolume(), Path: m.GetPath(), ReadOnly: m.GetReadOnly()}
	}
	return out
}

func createSpecToProto(s providers.CreateSpec) *pb.CreateSpec {
	var secrets []*pb.Secret
	for _, sec := range s.Secrets {
		secrets = append(secrets, &pb.Secret{Name: sec.Name, Value: sec.Value, Hosts: sec.Hosts})
	}
	return &pb.CreateSpec{
		Name:        s.Name,
		Labels:      s.Labels,
		Snapshot:    s.Snapshot,
		Mounts:      mountsToProto(s.Mounts),
		Env:         s.Env,
		Secrets:     secrets,
		Network:     networkToProto(s.Network),
		Lifetime:    durToProto(s.Lifetime),
		IdleTimeout: durToProto(s.IdleTimeout),
		Resources: &pb.Resources{
			MemoryMb: int64(s.Resources.MemoryMB),
			Cpus:     s.Resources.CPUs,
			DiskMb:   int64(s.Resources.DiskMB),
		},
		Priority:    int64(s.Priority),
		Preemptible: s.Preemptible,
		Flavor:      s.Flavor,
		Region:      s.Region,
		ExposePorts: intsToProto(s.ExposePorts),
	}
}

func createSpecFromProto(s *pb.CreateSpec) providers.CreateSpec {
	var secrets []providers.Secret
	for _, sec := range s.GetSecrets() {
		secrets = append(secrets, providers.Secret{Name: sec.GetName(), Value: sec.GetValue(), Hosts: sec.GetHosts()})
	}
	r := s.GetResources()
	return providers.CreateSpec{
		Name:        s.GetName(),
		Labels:      s.GetLabels(),
		Snapshot:    s.GetSnapshot(),
		Mounts:      mountsFromProto(s.GetMounts()),
		Env:         s.GetEnv(),
		Secrets:     secrets,
		Network:     networkFromProto(s.GetNetwork()),
		Lifetime:    durFromProto(s.GetLifetime()),
		IdleTimeout: durFromProto(s.GetIdleTimeout()),
		Resources: providers.Resources{
			MemoryMB: int(r.GetMemoryMb()),
			CPUs:     r.GetCpus(),
			DiskMB:   int(r.GetDiskMb()),
		},
		Priority:    int(s.GetPriority()),
		Preemptible: s.GetPreemptible(),
		Flavor:      s.GetFlavor(),
		Region:      s.GetRegion(),
		ExposePorts: intsFromProto(s.GetExposePorts()),
	}
}

func sandboxToProto(s providers.Sandbox) *pb.Sandbox {
	return &pb.Sandbox{
		Id:        s.ID,
		Name:      s.Name,
		Labels:    s.Labels,
		State:     string(s.State),
		Snapshot:  s.Snapshot,
		Mounts:    mountsToProto(s.Mounts),
		PublicUrl: s.PublicURL,
		CreatedAt: timeToProto(s.CreatedAt),
		ExpiresAt: timeToProto(s.ExpiresAt),
		Network:   usageToProto(s.Network),
		PortUrls:  portURLsToProto(s.PortURLs),
	}
}

// usageToProto sends a measured usage even when every count is zero: the
// message's presence is what says the provider counts (usageFromProto).
func usageToProto(u providers.NetworkUsage) *pb.NetworkUsage {
	if !u.Measured && u.BytesOut == 0 && u.BytesIn == 0 && u.Connections == 0 && u.Denied == 0 && len(u.Hosts) == 0 && u.MoreHosts == 0 {
		return nil
	}
	return &pb.NetworkUsage{
		BytesOut:    u.BytesOut,
		BytesIn:     u.BytesIn,
		Connections: u.Connections,
		Denied:      u.Denied,
		Hosts:       u.Hosts,
		MoreHosts:   u.MoreHosts,
	}
}

func usageFromProto(u *pb.NetworkUsage) providers.NetworkUsage {
	return providers.NetworkUsage{
		Measured:    u != nil,
		BytesOut:    u.GetBytesOut(),
		BytesIn:     u.GetBytesIn(),
		Connections: u.GetConnections(),
		Denied:      u.GetDenied(),
		Hosts:       u.GetHosts(),
		MoreHosts:   u.GetMoreHosts(),
	}
}

func sandboxFromProto(s *pb.Sandbox) providers.Sandbox {
	return providers.Sandbox{
		ID:        s.GetId(),
		Name:      s.GetName(),
		Labels:    s.GetLabels(),
		State:     providers.SandboxState(s.GetState()),
		Snapshot:  s.GetSnapshot(),
		Mounts:    mountsFromProto(s.GetMounts()),
		PublicURL: s.GetPublicUrl(),
		CreatedAt: timeFromProto(s.GetCreatedAt()),
		ExpiresAt: timeFromProto(s.GetExpiresAt()),
		Network:   usageFromProto(s.GetNetwork()),
		PortURLs:  portURLsFromProto(s.GetPortUrls()),
	}
}

func execStartToProto(id string, r providers.ExecRequest) *pb.ExecStart {
	return &pb.ExecStart{
		SandboxId: id,
		Argv:      r.Argv,
		Shell:     r.Shell,
		Cwd:       r.Cwd,
		Env:       r.Env,
		Timeout:   durToProto(r.Timeout),
		HasStdin:  r.Stdin != nil,
	}
}

// execRequestFromProto leaves the streams for the caller to attach.
func execRequestFromProto(s *pb.ExecStart) providers.ExecRequest {
	return providers.ExecRequest{
		Argv:    s.GetArgv(),
		Shell:   s.GetShell(),
		Cwd:     s.GetCwd(),
		Env:     s.GetEnv(),
		Timeout: durFromProto(s.GetTimeout()),
	}
}

func execExitToProto(r providers.ExecResult) *pb.ExecExit {
	return &pb.ExecExit{
		ExitCode: int64(r.ExitCode),
		Signal:   r.Signal,
		TimedOut: r.TimedOut,
		Oom:      r.OOM,
		Duration: durToProto(r.Duration),
	}
}

func execExitFromProto(e *pb.ExecExit) providers.ExecResult {
	return providers.ExecResult{
		ExitCode: int(e.GetExitCode()),
		Signal:   e.GetSignal(),
		TimedOut: e.GetTimedOut(),
		OOM:      e.GetOom(),
		Duration: durFromProto(e.GetDuration()),
	}
}

func fileInfoToProto(f providers.FileInfo) *pb.FileInfo {
	return &pb.FileInfo{
		Name:    f.Name,
		Path:    f.Path,
		Size:    f.Size,
		Mode:    f.Mode,
		IsDir:   f.IsDir,
		ModTime: timeToProto(f.ModTime),
	}
}

func fileInfoFromProto(f *pb.FileInfo) providers.FileInfo {
	return providers.FileInfo{
		Name:    f.GetName(),
		Path:    f.GetPath(),
		Size:    f.GetSize(),
		Mode:    f.GetMode(),
		IsDir:   f.GetIsDir(),
		ModTime: timeFromProto(f.GetModTime()),
	}
}

func snapshotSpecToProto(s providers.SnapshotSpec) *pb.SnapshotSpec {
	return &pb.SnapshotSpec{
		Slug:    s.Slug,
		Setup:   s.Setup,
		Env:     s.Env,
		Labels:  s.Labels,
		Timeout: durToProto(s.Timeout),
	}
}

func snapshotSpecFromProto(s *pb.SnapshotSpec) providers.SnapshotSpec {
	return providers.SnapshotSpec{
		Slug:    s.GetSlug(),
		Setup:   s.GetSetup(),
		Env:     s.GetEnv(),
		Labels:  s.GetLabels(),
		Timeout: durFromProto(s.GetTimeout()),
	}
}

func snapshotToProto(s providers.Snapshot) *pb.Snapshot {
	return &pb.Snapshot{
		Slug:      s.Slug,
		Labels:    s.Labels,
		SizeBytes: s.SizeBytes,
		CreatedAt: timeToProto(s.CreatedAt),
	}
}

func snapshotFromProto(s *pb.Snapshot) providers.Snapshot {
	return providers.Snapshot{
		Slug:      s.GetSlug(),
		Labels:    s.GetLabels(),
		SizeBytes: s.GetSizeBytes(),
		CreatedAt: timeFromProto(s.GetCreatedAt()),
	}
}

func volumeSpecToProto(s providers.VolumeSpec) *pb.VolumeSpec {
	return &pb.VolumeSpec{
		Slug:       s.Slug,
		Labels:     s.Labels,
		CapacityMb: int64(s.CapacityMB),
		Region:     s.Region,
	}
}

func volumeSpecFromProto(s *pb.VolumeSpec) providers.VolumeSpec {
	return providers.VolumeSpec{
		Slug:       s.GetSlug(),
		Labels:     s.GetLabels(),
		CapacityMB: int(s.GetCapacityMb()),
		Region:     s.GetRegion(),
	}
}

func volumeToProto(v providers.Volume) *pb.Volume {
	return &pb.Volume{
		Slug:       v.Slug,
		Labels:     v.Labels,
		CapacityMb: int64(v.CapacityMB),
		SizeBytes:  v.SizeBytes,
		CreatedAt:  timeToProto(v.CreatedAt),
	}
}

func volumeFromProto(v *pb.Volume) providers.Volume {
	return providers.Volume{
		Slug:       v.GetSlug(),
		Labels:     v.GetLabels(),
		CapacityMB: int(v.GetCapacityMb()),
		SizeBytes:  v.GetSizeBytes(),
		CreatedAt:  timeFromProto(v.GetCreatedAt()),
	}
}

func intsToProto(v []int) []int32 {
	if len(v) == 0 {
		return nil
	}
	out := make([]int32, len(v))
	for i, n := range v {
		out[i] = int32(n)
	}
	return out
}

func intsFromProto(v []int32) []int {
	if len(v) == 0 {
		return nil
	}
	out := make([]int, len(v))
	for i, n := range v {
		out[i] = int(n)
	}
	return out
}

func portURLsToProto(m map[int]string) map[int32]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[int32]string, len(m))
	for p, u := range m {
		out[int32(p)] = u
	}
	return out
}

func portURLsFromProto(m map[int32]string) map[int]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[int]string, len(m))
	for p, u := range m {
		out[int(p)] = u
	}
	return out
}
