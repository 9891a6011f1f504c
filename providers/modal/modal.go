// Package modal is the sandbox provider for Modal Sandboxes
// (shared/contracts/modal-api.md). It runs as the plugin
// sandstep-provider-modal.
//
// It is a thin client over the gRPC stubs generated into Modal's Go SDK
// (github.com/modal-labs/modal-client/go/proto/modal_proto), not the SDK's
// high-level API: the provider needs a dozen RPCs, its own retry and
// timeout rules and its own exec semantics (a deadline that kills the whole
// process tree, streamed output, files over exec), and the fake Modal
// (internal/testkit/fakemodal) implements exactly the RPCs used here. The
// SDK itself stays out of the plugin; the fake's tests run it as the
// judge of the fake.
//
// A sandbox is a Modal Sandbox (V2 backend) in one App, named after the
// job or session (CreateSpec.Name) and tagged with its labels, so that a
// name is taken at most once among running sandboxes and List by labels
// is Modal's own SandboxListV2. Exec goes through the sandbox's task
// command router; files are execs of sh, cat, tail and find inside the
// sandbox, streamed both ways and size-checked.
//
// Volumes are Modal Volumes (volumes.go); snapshots are Modal's filesystem
// snapshots, named images (snapshots.go).
package modal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/protobuf/proto"

	"github.com/sandstep/sandstep/internal/service/version"
	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/plugin"
)

// Provider is the Modal provider. It is safe for concurrent use.
type Provider struct {
	log *slog.Logger

	mu     sync.Mutex
	cfg    *state
	routes map[string]*route            // by sandbox id
	vols   map[string]volMeta           // by Modal volume name
	snaps  map[string]map[string]string // labels by snapshot slug
	builds snapshotBuilds
}

// state is one successful Configure.
type state struct {
	s        Settings
	defaults providers.SandboxDefaults
	c        *client

	initMu  sync.Mutex
	appID   string
	imageID string
}

var _ providers.Provider = (*Provider)(nil)

// New returns an unconfigured provider.
func New() *Provider {
	return &Provider{log: plugin.Logger("provider", "modal"), routes: map[string]*route{}, vols: map[string]volMeta{}, snaps: map[string]map[string]string{}}
}

// Tags the provider keeps beside the caller's labels; Labels never show
// them.
const (
	tagPrefix  = "sandstep.modal."
	tagName    = tagPrefix + "name"
	tagCreate  = tagPrefix + "create" // a nonce per Create call: our own lost answer, or someone else's sandbox
	tagCreated = tagPrefix + "created"
	tagExpires = tagPrefix + "expires"
	// tagPorts lists the sandbox's open ports ("5173,8080"), so that Get
	// asks for tunnels only for a sandbox that has some.
	tagPorts = tagPrefix + "ports"
	// tagMounts lists the volumes it mounts ("slug:/path[:ro],..."), so
	// that DeleteVolume finds a volume in use and Get reports Mounts.
	tagMounts = tagPrefix + "mounts"
	// tagSnapshot is the slug of the snapshot it was created from;
	// tagBuilder marks a sandbox that builds the snapshot it names.
	tagSnapshot = tagPrefix + "snapshot"
	tagBuilder  = tagPrefix + "builder"
)

// ErrStaleContainer is wrapped, with code NotFound, by the errors of calls
// into a sandbox whose container Modal removed while the ledger still
// holds it running (Modal's NotFoundError "This Sandbox has already shut
// down"). The host treats it as it treats a preempted sandbox: the
// sandbox is gone, a new one must be made under a new name.
var ErrStaleContainer = errors.New("modal: the sandbox's container is gone (stale container)")

// Configure decodes the settings and takes the token from the secrets
// "token_id" and "token_secret". It does not call Modal.
func (p *Provider) Configure(_ context.Context, cfg providers.Config) error {
	const op = "configure"
	s, err := ParseSettings(cfg.Settings)
	if err != nil {
		return providers.Wrap(providers.InvalidArgument, op, err)
	}
	id, secret := cfg.Secrets["token_id"], cfg.Secrets["token_secret"]
	var e providers.SettingsError
	if id == "" {
		e.Add("token_id_env", "the Modal token id is missing: name the environment variable that holds it (token_id_env = \"MODAL_TOKEN_ID\") and set that variable")
	}
	if secret == "" {
		e.Add("token_secret_env", "the Modal token secret is missing: name the environment variable that holds it (token_secret_env = \"MODAL_TOKEN_SECRET\") and set that variable")
	}
	if err := e.Err(); err != nil {
		return providers.Wrap(providers.InvalidArgument, op, err)
	}
	c, err := newClient(s, id, secret, p.log)
	if err != nil {
		return providers.Wrap(providers.InvalidArgument, op, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cfg != nil {
		p.cfg.c.close()
	}
	p.cfg = &state{s: s, defaults: cfg.Defaults, c: c}
	p.routes = map[string]*route{}
	return nil
}

// Close releases the connections.
func (p *Provider) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cfg != nil {
		p.cfg.c.close()
	}
}

// Info describes the provider. ListSnapshots is not offered: Modal's named
// images carry no labels (snapshots.go).
func (p *Provider) Info(context.Context) (providers.Info, error) {
	return providers.Info{
		Name:       "modal",
		Version:    version.Version,
		APIVersion: providers.APIVersion,
		Capabilities: providers.Capabilities{
			NamedSandboxes: true,
			Volumes:        true,
			Snapshots:      true,
			ListByLabels:   true,
			ExecStreaming:  true,
			FileAPI:        true,
			// Exposed ports are Modal tunnels (https URLs Modal serves,
			// with no auth of sandstep's in front).
			PublicURL:    true,
			NetworkModes: []providers.NetworkMode{providers.NetworkNone, providers.NetworkAll},
			MaxLifetime:  maxLifetime,
		},
	}, nil
}

func (p *Provider) settings(op string) (*state, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cfg == nil {
		return nil, providers.Errorf(providers.FailedPrecondition, op, "the provider is not configured")
	}
	return p.cfg, nil
}

// validName is Modal's rule for sandbox names: letters, digits, '.', '-'
// and '_', at most 64, and not shaped like an object id ("ap-" and 22
// characters).
var (
	validName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
	objectID  = regexp.MustCompile(`^[a-z]{2}-[A-Za-z0-9]{22}$`)
	// validID accepts Modal's object ids and keeps anything that could walk
	// out of place out.
	validID = regexp.MustCompile(`^[a-z]{2}-[A-Za-z0-9_-]{1,100}$`)
)

// CheckName refuses a sandbox name Modal would refuse, before any call.
func CheckName(name string) error {
	if !validName.MatchString(name) || objectID.MatchString(name) {
		return fmt.Errorf("%q is not a valid Modal sandbox name: 1 to 64 letters, digits, '.', '-' or '_', not shaped like a Modal object id", name)
	}
	return nil
}

func checkID(op, id string) error {
	if !validID.MatchString(id) {
		return providers.Errorf(providers.NotFound, op, "%q is not a Modal sandbox id", id)
	}
	return nil
}

// ensureApp resolves the App and the image once per configuration.
func (p *Provider) ensureApp(ctx context.Context, st *state) (string, string, error) {
	const op = "create"
	st.initMu.Lock()
	defer st.initMu.Unlock()
	if st.appID != "" && st.imageID != "" {
		return st.appID, st.imageID, nil
	}
	app, err := call(ctx, st.c, op, func(ctx context.Context) (*pb.AppGetOrCreateResponse, error) {
		return st.c.cp.AppGetOrCreate(ctx, pb.AppGetOrCreateRequest_builder{
			AppName: st.s.AppName, EnvironmentName: st.s.Environment,
			ObjectCreationType: pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_IF_MISSING,
		}.Build())
	})
	if err != nil {
		return "", "", err
	}
	cmds := append([]string{"FROM " + st.s.Image}, st.s.ImageCommands...)
	img, err := call(ctx, st.c, op, func(ctx context.Context) (*pb.ImageGetOrCreateResponse, error) {
		return st.c.cp.ImageGetOrCreate(ctx, pb.ImageGetOrCreateRequest_builder{
			AppId: app.GetAppId(), Image: pb.Image_builder{DockerfileCommands: cmds}.Build(),
		}.Build())
	})
	if err != nil {
		return "", "", err
	}
	if err := p.joinImage(ctx, st, img.GetImageId(), img.GetResult()); err != nil {
		return "", "", err
	}
	st.appID, st.imageID = app.GetAppId(), img.GetImageId()
	p.log.Info("modal app and image ready", "app", st.s.AppName, "app_id", st.appID, "image_id", st.imageID)
	return st.appID, st.imageID, nil
}

// joinImage waits for an image build to end (ImageJoinStreaming) unless
// the answer already says how it ended.
func (p *Provider) joinImage(ctx context.Context, st *state, id string, res *pb.GenericResult) error {
	const op = "create"
	lastEntry := ""
	for res == nil || res.GetStatus() == pb.GenericResult_GENERIC_STATUS_UNSPECIFIED {
		stream, err := st.c.cp.ImageJoinStreaming(ctx, pb.ImageJoinStreamingRequest_builder{ImageId: id, Timeout: 55, LastEntryId: lastEntry}.Build())
		if err != nil {
			return mapError(op, err)
		}
		for {
			msg, err := stream.Recv()
			if err != nil {
				if ctx.Err() != nil {
					return providers.Wrap(providers.DeadlineExceeded, op, ctx.Err())
				}
				break // the stream ends every 55 s; join again
			}
			if msg.GetEntryId() != "" {
				lastEntry = msg.GetEntryId()
			}
			if r := msg.GetResult(); r != nil && r.GetStatus() != pb.GenericResult_GENERIC_STATUS_UNSPECIFIED {
				res = r
				break
			}
		}
	}
	if res.GetStatus() != pb.GenericResult_GENERIC_STATUS_SUCCESS {
		return providers.Errorf(providers.FailedPrecondition, op, "building the image %q failed (%s): %s", st.s.Image, res.GetStatus(), redact(res.GetException()))
	}
	return nil
}

// Create makes a named, tagged sandbox. A create whose answer was lost and
// that a retry finds under its name is the same sandbox (its create tag is
// this call's), not a second one; a name that another create holds is
// AlreadyExists.
func (p *Provider) Create(ctx context.Context, spec providers.CreateSpec) (providers.Sandbox, error) {
	const op = "create"
	st, err := p.settings(op)
	if err != nil {
		return providers.Sandbox{}, err
	}
	started := time.Now()
	sb, reused, err := p.create(ctx, st, spec, nil)
	if err != nil {
		p.log.Warn("sandbox create failed", "name", spec.Name, "code", providers.CodeOf(err).String(), "error", err, "ms", time.Since(started).Milliseconds())
		return providers.Sandbox{}, err
	}
	p.log.Info("sandbox created", "sandbox_id", sb.ID, "name", spec.Name, "adopted_lost_answer", reused, "ms", time.Since(started).Milliseconds())
	return sb, nil
}

// create makes the sandbox; extra are tags of the provider's own beyond
// the usual ones.
func (p *Provider) create(ctx context.Context, st *state, spec providers.CreateSpec, extra map[string]string) (providers.Sandbox, bool, error) {
	const op = "create"
	if spec.Name != "" {
		if err := CheckName(spec.Name); err != nil {
			return providers.Sandbox{}, false, providers.Wrap(providers.InvalidArgument, op, err)
		}
	}
	network := spec.Network
	if network.Mode == "" {
		network = st.defaults.Network
	}
	access := pb.NetworkAccess_OPEN
	switch network.Mode {
	case "", providers.NetworkAll:
	case providers.NetworkNone:
		access = pb.NetworkAccess_BLOCKED
	case providers.NetworkAllowlist:
		return providers.Sandbox{}, false, providers.Errorf(providers.Unsupported, op, "the modal provider does not offer network allowlists yet")
	default:
		return providers.Sandbox{}, false, providers.Errorf(providers.InvalidArgument, op, "unknown network mode %q", network.Mode)
	}
	if spec.Snapshot != "" {
		if err := checkSlug(op, spec.Snapshot); err != nil {
			return providers.Sandbox{}, false, err
		}
	}
	mounts, err := checkMounts(op, spec.Mounts)
	if err != nil {
		return providers.Sandbox{}, false, err
	}
	ports, err := openPorts(st.s.OpenPorts, spec.ExposePorts)
	if err != nil {
		return providers.Sandbox{}, false, err
	}
	lifetime := firstPositive(spec.Lifetime, st.s.Timeout.D(), st.defaults.Lifetime, 5*time.Minute)
	if lifetime > maxLifetime {
		return providers.Sandbox{}, false, providers.Errorf(providers.InvalidArgument, op, "lifetime %s is above Modal's cap of 24h", lifetime)
	}
	idle := firstPositive(spec.IdleTimeout, st.s.IdleTimeout.D(), st.defaults.IdleTimeout)
	env := maps.Clone(spec.Env)
	if env == nil {
		env = map[string]string{}
	}
	for _, s := range spec.Secrets {
		env[s.Name] = s.Value // Modal cannot scope a secret to hosts
	}
	for k := range env {
		if err := checkEnvName(k); err != nil {
			return providers.Sandbox{}, false, providers.Wrap(providers.InvalidArgument, op, err)
		}
	}
	appID, imageID, err := p.ensureApp(ctx, st)
	if err != nil {
		return providers.Sandbox{}, false, err
	}
	volumeMounts, err := p.volumeMounts(ctx, st, op, mounts)
	if err != nil {
		return providers.Sandbox{}, false, err
	}
	if spec.Snapshot != "" {
		if imageID, err = p.snapshotImage(ctx, st, op, spec.Snapshot); err != nil {
			return providers.Sandbox{}, false, err
		}
	}

	now := time.Now().UTC()
	nonce := randomHex(12)
	tags := map[string]string{}
	for k, v := range spec.Labels {
		if strings.HasPrefix(k, tagPrefix) {
			return providers.Sandbox{}, false, providers.Errorf(providers.InvalidArgument, op, "label %q uses the provider's own prefix %q", k, tagPrefix)
		}
		tags[k] = v
	}
	tags[tagName] = spec.Name
	tags[tagCreate] = nonce
	tags[tagCreated] = now.Format(time.RFC3339)
	tags[tagExpires] = now.Add(lifetime).Format(time.RFC3339)
	if len(ports) > 0 {
		tags[tagPorts] = joinPorts(ports)
	}
	if len(mounts) > 0 {
		tags[tagMounts] = mountsTag(mounts)
	}
	if spec.Snapshot != "" {
		tags[tagSnapshot] = spec.Snapshot
	}
	maps.Copy(tags, extra)

	def := pb.Sandbox_builder{
		ImageId:       imageID,
		TimeoutSecs:   uint32(math.Ceil(lifetime.Seconds())),
		Workdir:       proto.String(st.s.Workdir),
		NetworkAccess: pb.NetworkAccess_builder{NetworkAccessType: access}.Build(),
		VolumeMounts:  volumeMounts,
		Resources: pb.Resources_builder{
			MemoryMb: uint32(firstPositiveInt(spec.Resources.MemoryMB, st.s.MemoryMB, st.defaults.MemoryMB)),
			MilliCpu: uint32(math.Round(1000 * firstPositiveFloat(spec.Resources.CPUs, st.s.CPU))),
		}.Build(),
	}
	if spec.Name != "" {
		def.Name = proto.String(spec.Name)
	}
	if idle > 0 {
		def.IdleTimeoutSecs = proto.Uint32(uint32(math.Ceil(idle.Seconds())))
	}
	if region := firstNonEmpty(spec.Region, st.s.Region); region != "" {
		def.SchedulerPlacement = pb.SchedulerPlacement_builder{Regions: []string{region}}.Build()
	}
	if len(ports) > 0 {
		var specs []*pb.PortSpec
		for _, port := range ports {
			specs = append(specs, pb.PortSpec_builder{Port: uint32(port)}.Build())
		}
		def.OpenPorts = pb.PortSpecs_builder{Ports: specs}.Build()
	}
	if spec.Resources.DiskMB > 0 {
		def.Resources.SetEphemeralDiskMb(uint32(spec.Resources.DiskMB))
	}
	req := pb.SandboxCreateV2Request_builder{
		AppId:         appID,
		Definition:    def.Build(),
		Tags:          tagList(tags),
		SecretSources: []*pb.SecretSource{pb.SecretSource_builder{Env: pb.StringMap_builder{Contents: env}.Build()}.Build()},
	}.Build()

	resp, err := call(ctx, st.c, op, func(ctx context.Context) (*pb.SandboxCreateV2Response, error) {
		return st.c.cp.SandboxCreateV2(ctx, req)
	})
	reused := false
	if providers.CodeOf(err) == providers.AlreadyExists && spec.Name != "" {
		id, ours, lerr := p.holderOfName(ctx, st, spec.Name, nonce)
		switch {
		case lerr != nil:
			return providers.Sandbox{}, false, err
		case !ours:
			return providers.Sandbox{}, false, providers.Errorf(providers.AlreadyExists, op, "the name %q is taken by running sandbox %s", spec.Name, id)
		}
		// Our own create whose answer was lost on the way: adopt it.
		resp, err, reused = pb.SandboxCreateV2Response_builder{SandboxId: id}.Build(), nil, true
	}
	if err != nil {
		return providers.Sandbox{}, false, err
	}
	id := resp.GetSandboxId()
	if !validID.MatchString(id) {
		return providers.Sandbox{}, false, providers.Errorf(providers.Internal, op, "Modal's create answer carries no usable sandbox id")
	}
	if a := resp.GetCommandRouterAccess(); a != nil && resp.GetTaskId() != "" {
		p.setRoute(id, &route{taskID: resp.GetTaskId(), url: a.GetUrl(), jwt: a.GetJwt(), exp: jwtExpOrZero(a.GetJwt())})
	} else if _, err := p.route(ctx, op, id, true); err != nil {
		// It never became ready: end it rather than leave it running.
		p.abandon(ctx, st, id)
		return providers.Sandbox{}, false, err
	}
	sb := sandboxFrom(id, tags, providers.StateRunning)
	if len(ports) > 0 {
		// Modal's create answers before the tunnels are up; GetTunnels
		// waits for them.
		if sb.PortURLs, err = p.PortURLs(ctx, id); err != nil {
			p.abandon(ctx, st, id)
			return providers.Sandbox{}, false, err
		}
	}
	return sb, reused, nil
}

// holderOfName finds the running sandbox holding name and tells whether
// this create (nonce) made it.
func (p *Provider) holderOfName(ctx context.Context, st *state, name, nonce string) (string, bool, error) {
	const op = "create"
	got, err := call(ctx, st.c, op, func(ctx context.Context) (*pb.SandboxGetFromNameResponse, error) {
		return st.c.cp.SandboxGetFromNameV2(ctx, pb.SandboxGetFromNameRequest_builder{
			SandboxName: name, AppName: st.s.AppName, EnvironmentName: st.s.Environment,
		}.Build())
	})
	if err != nil {
		return "", false, err
	}
	tags, err := p.tags(ctx, st, op, got.GetSandboxId())
	if err != nil {
		return "", false, err
	}
	return got.GetSandboxId(), tags[tagCreate] == nonce, nil
}

// abandon terminates a sandbox no caller holds: one that Create will not
// hand out, or a snapshot's builder.
func (p *Provider) abandon(ctx context.Context, st *state, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := p.terminate(ctx, st, id); err != nil {
		p.log.Warn("terminating a sandbox no caller holds failed; Modal ends it at its timeout", "sandbox_id", id, "error", err)
	}
}

func (p *Provider) tags(ctx context.Context, st *state, op, id string) (map[string]string, error) {
	resp, err := call(ctx, st.c, op, func(ctx context.Context) (*pb.SandboxTagsGetResponse, error) {
		return st.c.cp.SandboxTagsGetV2(ctx, pb.SandboxTagsGetRequest_builder{SandboxId: id}.Build())
	})
	if err != nil {
		return nil, err
	}
	tags := map[string]string{}
	for _, t := range resp.GetTags() {
		tags[t.GetTagName()] = t.GetTagValue()
	}
	return tags, nil
}

// Get reports a sandbox: running, or terminated while Modal still knows
// it; NotFound for one it does not know.
func (p *Provider) Get(ctx context.Context, id string) (providers.Sandbox, error) {
	const op = "get"
	st, err := p.settings(op)
	if err != nil {
		return providers.Sandbox{}, err
	}
	if err := checkID(op, id); err != nil {
		return providers.Sandbox{}, err
	}
	w, err := call(ctx, st.c, op, func(ctx context.Context) (*pb.SandboxWaitResponse, error) {
		return st.c.cp.SandboxWaitV2(ctx, pb.SandboxWaitRequest_builder{SandboxId: id, Timeout: 0}.Build())
	})
	if err != nil {
		return providers.Sandbox{}, err
	}
	tags, err := p.tags(ctx, st, op, id)
	if err != nil {
		return providers.Sandbox{}, err
	}
	state := providers.StateRunning
	if w.GetResult() != nil {
		state = providers.StateTerminated
		p.dropRoute(id)
	}
	sb := sandboxFrom(id, tags, state)
	if state == providers.StateRunning && tags[tagPorts] != "" {
		urls, err := p.PortURLs(ctx, id)
		switch {
		case err == nil:
			sb.PortURLs = urls
		case providers.CodeOf(err) == providers.FailedPrecondition:
			// It ended between the two calls.
			sb.State = providers.StateTerminated
		default:
			return providers.Sandbox{}, err
		}
	}
	return sb, nil
}

// List returns the running sandboxes of the App carrying every label (and
// the name, when the filter has one), through Modal's tag filter.
func (p *Provider) List(ctx context.Context, f providers.ListFilter) ([]providers.Sandbox, error) {
	const op = "list"
	st, err := p.settings(op)
	if err != nil {
		return nil, err
	}
	appID, _, err := p.ensureApp(ctx, st)
	if err != nil {
		return nil, err
	}
	want := maps.Clone(f.Labels)
	if want == nil {
		want = map[string]string{}
	}
	if f.Name != "" {
		want[tagName] = f.Name
	}
	var (
		out    []providers.Sandbox
		before float64
	)
	for range 1000 { // pages of 100: far more sandboxes than one App holds
		resp, err := call(ctx, st.c, op, func(ctx context.Context) (*pb.SandboxListResponse, error) {
			return st.c.cp.SandboxListV2(ctx, pb.SandboxListRequest_builder{
				AppId: appID, EnvironmentName: st.s.Environment, Tags: tagList(want), BeforeTimestamp: before,
			}.Build())
		})
		if err != nil {
			return nil, err
		}
		page := resp.GetSandboxes()
		for _, info := range page {
			tags := map[string]string{}
			for _, t := range info.GetTags() {
				tags[t.GetTagName()] = t.GetTagValue()
			}
			state := providers.StateRunning
			if info.GetTaskInfo().GetResult() != nil {
				state = providers.StateTerminated
			}
			sb := sandboxFrom(info.GetId(), tags, state)
			if sb.CreatedAt.IsZero() {
				sb.CreatedAt = time.Unix(0, int64(info.GetCreatedAt()*1e9)).UTC()
			}
			out = append(out, sb)
			before = info.GetCreatedAt()
		}
		if len(page) < 100 {
			return out, nil
		}
	}
	return out, nil
}

// Terminate ends a sandbox; one Modal does not know, or that has ended,
// is already terminated.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	const op = "terminate"
	st, err := p.settings(op)
	if err != nil {
		return err
	}
	if !validID.MatchString(id) {
		return nil // never a Modal sandbox, so not a running one
	}
	started := time.Now()
	if err := p.terminate(ctx, st, id); err != nil {
		p.log.Warn("sandbox terminate failed", "sandbox_id", id, "code", providers.CodeOf(err).String(), "error", err)
		return err
	}
	p.log.Info("sandbox terminated", "sandbox_id", id, "ms", time.Since(started).Milliseconds())
	return nil
}

func (p *Provider) terminate(ctx context.Context, st *state, id string) error {
	_, err := call(ctx, st.c, "terminate", func(ctx context.Context) (*pb.SandboxTerminateResponse, error) {
		return st.c.cp.SandboxTerminateV2(ctx, pb.SandboxTerminateRequest_builder{SandboxId: id}.Build())
	})
	if err != nil && !providers.IsNotFound(err) {
		return err
	}
	p.dropRoute(id)
	return nil
}

// PortURLs returns the public URL of each exposed port of a sandbox, by
// container port (Modal's tunnels, SandboxGetTunnelsV2). Ports are opened
// at create; a sandbox that opened none has none.
func (p *Provider) PortURLs(ctx context.Context, id string) (map[int]string, error) {
	const op = "ports"
	st, err := p.settings(op)
	if err != nil {
		return nil, err
	}
	if err := checkID(op, id); err != nil {
		return nil, err
	}
	resp, err := call(ctx, st.c, op, func(ctx context.Context) (*pb.SandboxGetTunnelsResponse, error) {
		return st.c.cp.SandboxGetTunnelsV2(ctx, pb.SandboxGetTunnelsRequest_builder{SandboxId: id, Timeout: 10}.Build())
	})
	if err != nil {
		return nil, err
	}
	if r := resp.GetResult(); r != nil && r.GetStatus() != pb.GenericResult_GENERIC_STATUS_SUCCESS {
		return nil, providers.Errorf(providers.FailedPrecondition, op, "sandbox %s is not running (%s)", id, r.GetStatus())
	}
	urls := map[int]string{}
	for _, t := range resp.GetTunnels() {
		u := "https://" + t.GetHost()
		if t.GetPort() != 443 {
			u += ":" + strconv.Itoa(int(t.GetPort()))
		}
		urls[int(t.GetContainerPort())] = u
	}
	return urls, nil
}

// openPorts is the settings' open_ports and the spec's ExposePorts, each
// once, sorted; a port out of range is refused.
func openPorts(always, asked []int) ([]int, error) {
	for _, port := range asked {
		if port < 1 || port > 65535 {
			return nil, providers.Errorf(providers.InvalidArgument, "create", "expose port %d: ports are from 1 to 65535", port)
		}
	}
	ports := slices.Concat(always, asked)
	slices.Sort(ports)
	return slices.Compact(ports), nil
}

func joinPorts(ports []int) string {
	parts := make([]string, len(ports))
	for i, port := range ports {
		parts[i] = strconv.Itoa(port)
	}
	return strings.Join(parts, ",")
}

// sandboxFrom makes a Sandbox of an id and its tags.
func sandboxFrom(id string, tags map[string]string, state providers.SandboxState) providers.Sandbox {
	sb := providers.Sandbox{ID: id, Name: tags[tagName], State: state, Labels: map[string]string{}}
	for k, v := range tags {
		if !strings.HasPrefix(k, tagPrefix) {
			sb.Labels[k] = v
		}
	}
	sb.Mounts = parseMounts(tags[tagMounts])
	sb.Snapshot = tags[tagSnapshot]
	sb.CreatedAt, _ = time.Parse(time.RFC3339, tags[tagCreated])
	sb.ExpiresAt, _ = time.Parse(time.RFC3339, tags[tagExpires])
	return sb
}

func tagList(tags map[string]string) []*pb.SandboxTag {
	out := make([]*pb.SandboxTag, 0, len(tags))
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		out = append(out, pb.SandboxTag_builder{TagName: k, TagValue: tags[k]}.Build())
	}
	return out
}

// envName is a variable name a POSIX shell accepts; names starting with
// SANDSTEP_MODAL_ are the provider's own.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func checkEnvName(name string) error {
	if !envName.MatchString(name) || strings.HasPrefix(name, "SANDSTEP_MODAL_") {
		return fmt.Errorf("%q cannot be an environment variable name here", name)
	}
	return nil
}

func firstPositive(ds ...time.Duration) time.Duration {
	for _, d := range ds {
		if d > 0 {
			return d
		}
	}
	return 0
}

func firstPositiveInt(ns ...int) int {
	for _, n := range ns {
		if n > 0 {
			return n
		}
	}
	return 0
}

func firstPositiveFloat(ns ...float64) float64 {
	for _, n := range ns {
		if n > 0 {
			return n
		}
	}
	return 0
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
