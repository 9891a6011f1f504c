// Package direct serves sandboxes that API clients use themselves (the
// /v1/sandboxes routes and the Sandy-compatible facade): create, exec with
// output read from any byte offset, files, artifacts, exposed ports, and
// child sandboxes that an agent inside a sandbox creates with the token the
// sandbox was given.
//
// It keeps nothing in memory between requests: a sandbox's record (tenant,
// parent, token hash, activity) is in the store, and an exec's output is in
// the sandbox itself (under execDir), read by offset, so any API instance
// (any Lambda) answers any request. Every create and terminate goes through
// the owner of the lifecycle (package sandboxes): a sandbox's children are
// sandboxes it owns in the ledger, and terminating it releases the tree.
package direct

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/ids"
	"github.com/sandstep/sandstep/internal/service/sandboxes"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/egress"
)

// Label a direct sandbox carries at the provider, with its id.
const LabelSandbox = "sandstep.sandbox"

// TokenPrefix starts every sandbox token (SANDSTEP_TOKEN): the API tells it
// from a tenant's token by it.
const TokenPrefix = "sst_"

// Environment variables every direct sandbox gets.
const (
	EnvURL   = "SANDSTEP_URL"
	EnvToken = "SANDSTEP_TOKEN"
	EnvID    = "SANDSTEP_SANDBOX_ID"
)

// Options configure a Service. Store, Sandboxes and Provider are required.
type Options struct {
	Config    config.SandboxesConfig
	Defaults  config.SandboxConfig
	Store     *store.Store
	Sandboxes *sandboxes.Manager
	Provider  providers.Provider
	Logger    *slog.Logger
	// Now is the clock of lifetimes, limits and idleness (default
	// time.Now); tests move it.
	Now func() time.Time
}

// Service is safe for concurrent use and holds no state between calls.
type Service struct {
	o   Options
	log *slog.Logger
}

// New returns a Service.
func New(o Options) *Service {
	if o.Store == nil || o.Sandboxes == nil || o.Provider == nil {
		panic("direct.New: Store, Sandboxes and Provider are required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Service{o: o, log: o.Logger}
}

// Config is the [sandboxes] configuration the service runs with.
func (s *Service) Config() config.SandboxesConfig { return s.o.Config }

// Kinds of errors the API answers differently.
type Kind int

const (
	KindInvalid Kind = iota + 1
	KindNotFound
	KindForbidden
	KindConflict
	KindUnavailable
)

// Error is a request the service refuses; Field names the request field
// at fault, when one is.
type Error struct {
	Kind    Kind
	Field   string
	Message string
	Err     error
}

func (e *Error) Error() string { return e.Message }
func (e *Error) Unwrap() error { return e.Err }

func invalid(field, format string, args ...any) *Error {
	return &Error{Kind: KindInvalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

func notFound(id string) *Error {
	return &Error{Kind: KindNotFound, Message: fmt.Sprintf("sandbox %q not found", id)}
}

// Caller is who makes a request: a tenant, and, with a sandbox's token,
// the sandbox whose children it may manage.
type Caller struct {
	Tenant string
	// Parent is set for a sandbox token: the caller may create children
	// of it and use and terminate those children only.
	Parent string
}

// CreateRequest is POST /v1/sandboxes.
type CreateRequest struct {
	TTL         time.Duration
	ExposePorts []int
	Network     providers.NetworkMode
	AllowHosts  []string
	MemoryMB    int
	Labels      map[string]string
	Name        string
	// APIURL is sandstep's URL as the sandbox will reach it (config's
	// api_url, or the request's own).
	APIURL string
	// Secrets are for sandstep's own callers (an agent run's host-scoped
	// model key), never taken from a request.
	Secrets []providers.Secret
	// Job, for sandstep's own callers, is the job whose usage the sandbox
	// and every child it starts count in (an agent run), instead of the
	// usage records of sandboxes no job owns; never taken from a request.
	Job string
}

// Sandbox is a sandbox as the API shows it.
type Sandbox struct {
	store.DirectSandbox
	// Created is false when a named create found the sandbox already there.
	Created bool
}

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return idEncoding.EncodeToString(b)
}

func tokenHash(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:])
}

// ledgerName is the sandbox's ledger entry and provider name.
func ledgerName(id string) string { return "sbx-" + id }

// Limits of a create request.
const (
	MaxPorts      = 8
	MaxLabels     = 32
	MaxAllowHosts = 256
)

func (s *Service) check(req *CreateRequest) error {
	c := s.o.Config
	if req.TTL == 0 {
		req.TTL = c.DefaultTTL.D()
	}
	if req.TTL < time.Second || req.TTL > c.MaxTTL.D() {
		return invalid("ttl_seconds", "ttl_seconds must be from 1 to %d, not %d", int64(c.MaxTTL.D()/time.Second), int64(req.TTL/time.Second))
	}
	if len(req.ExposePorts) > MaxPorts {
		return invalid("expose_ports", "at most %d ports may be exposed, not %d", MaxPorts, len(req.ExposePorts))
	}
	seen := map[int]bool{}
	for _, p := range req.ExposePorts {
		if p < 1 || p > 65535 || seen[p] {
			return invalid("expose_ports", "port %d is not a port from 1 to 65535 listed once", p)
		}
		if p == 3128 {
			return invalid("expose_ports", "port 3128 is the sandbox's own way out and cannot be exposed")
		}
		seen[p] = true
	}
	slices.Sort(req.ExposePorts)
	switch req.Network {
	case "":
		req.Network = s.o.Defaults.Network
		if req.Network == providers.NetworkAllowlist && len(req.AllowHosts) == 0 {
			req.AllowHosts = s.o.Defaults.AllowHosts
		}
	case providers.NetworkNone, providers.NetworkAll:
		if len(req.AllowHosts) > 0 {
			return invalid("allow_hosts", "allow_hosts needs network \"allowlist\"")
		}
	case providers.NetworkAllowlist:
		if len(req.AllowHosts) == 0 {
			return invalid("allow_hosts", "network \"allowlist\" needs allow_hosts")
		}
		if len(req.AllowHosts) > MaxAllowHosts {
			return invalid("allow_hosts", "at most %d hosts, not %d", MaxAllowHosts, len(req.AllowHosts))
		}
		// The egress proxy's own parser: what it would refuse at create is
		// the request's fault, said now with the field.
		for i, h := range req.AllowHosts {
			if _, err := egress.ParseHostRule(h); err != nil {
				return invalid("allow_hosts", "allow_hosts[%d]: %v", i, err)
			}
		}
	default:
		return invalid("network", "network must be \"none\", \"all\" or \"allowlist\", not %q", req.Network)
	}
	if req.MemoryMB != 0 && (req.MemoryMB < 64 || req.MemoryMB > 65536) {
		return invalid("memory_mb", "memory_mb must be from 64 to 65536, not %d", req.MemoryMB)
	}
	if len(req.Labels) > MaxLabels {
		return invalid("labels", "at most %d labels, not %d", MaxLabels, len(req.Labels))
	}
	for k, v := range req.Labels {
		if k == "" || len(k) > 63 || len(v) > 256 || strings.HasPrefix(k, "sandstep.") {
			return invalid("labels", "label %q: keys are 1 to 63 characters and not \"sandstep.*\", values at most 256", k)
		}
	}
	if req.Name != "" && !ids.Valid(req.Name) {
		return invalid("name", "the name %q must be 1 to %d characters of A-Z, a-z, 0-9, '.', '_' and '-'", req.Name, ids.MaxLen)
	}
	return nil
}

// CreateSandbox starts a sandbox for the caller; with a sandbox token, a child of
// that sandbox, held to the per-parent limits (a *store.LimitError when one
// is reached) and to its parent's remaining lifetime.
func (s *Service) CreateSandbox(ctx context.Context, caller Caller, req CreateRequest) (Sandbox, error) {
	if err := s.check(&req); err != nil {
		return Sandbox{}, err
	}
	now := s.o.Now()
	rec := store.DirectSandbox{
		ID: randomID(10), Tenant: caller.Tenant, Name: req.Name, Ports: req.ExposePorts,
		Network: string(req.Network), Labels: req.Labels, CreatedAt: now, LastActive: now,
		URLToken: randomID(20), Job: req.Job,
	}
	rec.Ledger = ledgerName(rec.ID)
	owner := sandboxes.TenantOwner(caller.Tenant)
	limits := store.ChildLimits{}
	if caller.Parent != "" {
		parent, err := s.get(ctx, Caller{Tenant: caller.Tenant}, caller.Parent)
		if err != nil {
			return Sandbox{}, err
		}
		if parent.State != store.DirectRunning {
			return Sandbox{}, &Error{Kind: KindConflict, Message: fmt.Sprintf("the parent sandbox %s is %s", parent.ID, parent.State)}
		}
		if parent.Depth+1 > s.o.Config.MaxDepth {
			return Sandbox{}, &store.LimitError{Limit: "max_depth", Max: int64(s.o.Config.MaxDepth), Scope: "parent"}
		}
		// A child counts where its parent does (an agent run's children
		// in the run's usage).
		rec.ParentID, rec.Depth, rec.Job = parent.ID, parent.Depth+1, parent.Job
		// A child lives at most child_max_ttl, and never beyond its parent.
		req.TTL = min(req.TTL, s.o.Config.ChildMaxTTL.D(), parent.EndsAt.Sub(now))
		if req.TTL < time.Second {
			return Sandbox{}, &Error{Kind: KindConflict, Message: fmt.Sprintf("the parent sandbox %s ends in less than a second", parent.ID)}
		}
		owner = sandboxes.SandboxOwner(parent.Ledger, caller.Tenant)
		limits = store.ChildLimits{MaxAlive: s.o.Config.MaxChildren, PerHour: s.o.Config.ChildrenPerHour}
	}
	rec.EndsAt = now.Add(req.TTL)
	if req.Name != "" {
		held, err := s.o.Store.DirectClaimName(ctx, caller.Tenant, req.Name, rec.ID)
		if err != nil {
			return Sandbox{}, err
		}
		if held != rec.ID {
			return s.named(ctx, caller, req.Name, held)
		}
	}
	token := TokenPrefix + rec.ID + "_" + randomID(24)
	rec.TokenHash = tokenHash(token)
	if err := s.o.Store.DirectCreate(ctx, rec, limits, now); err != nil {
		return Sandbox{}, err
	}
	spec := providers.CreateSpec{
		Name: rec.Ledger,
		Labels: map[string]string{
			providers.LabelOwner: "sandstep", providers.LabelTenant: caller.Tenant, LabelSandbox: rec.ID,
		},
		Env:      map[string]string{EnvURL: strings.TrimRight(req.APIURL, "/"), EnvID: rec.ID},
		Secrets:  []providers.Secret{{Name: EnvToken, Value: token}},
		Network:  providers.NetworkPolicy{Mode: req.Network, AllowHosts: req.AllowHosts},
		Lifetime: req.TTL,
		// Idleness is judged here (see Reap), where requests to exposed
		// ports count; the provider's own judge sees only execs.
		IdleTimeout: req.TTL,
		Resources:   providers.Resources{MemoryMB: req.MemoryMB},
		ExposePorts: req.ExposePorts,
	}
	maps.Copy(spec.Labels, req.Labels)
	spec.Secrets = append(spec.Secrets, req.Secrets...)
	lease, err := s.o.Sandboxes.Acquire(ctx, sandboxes.Request{Owner: owner, Spec: spec, Job: rec.Job})
	if err != nil {
		if _, cerr := s.o.Store.DirectClose(context.WithoutCancel(ctx), rec.ID, "create failed", store.DirectEvent{Type: "sandbox.terminated", At: s.o.Now(), Message: "create failed"}); cerr != nil {
			s.log.Warn("closing the record of a failed create", "sandbox", rec.ID, "err", cerr)
		}
		var ce *sandboxes.CreateError
		var pe *providers.Error
		if errors.As(err, &ce) && errors.As(err, &pe) && pe.Code == providers.InvalidArgument {
			// Retrying the same request will not help: not a 503.
			return Sandbox{}, &Error{Kind: KindInvalid, Message: "the provider refused the sandbox: " + pe.Error(), Err: err}
		}
		if errors.As(err, &ce) {
			return Sandbox{}, &Error{Kind: KindUnavailable, Message: "the provider did not create the sandbox: " + ce.Error(), Err: err}
		}
		return Sandbox{}, err
	}
	urls := map[string]string{}
	for p, u := range lease.Sandbox.PortURLs {
		urls[strconv.Itoa(p)] = u
	}
	got, err := s.o.Store.DirectRunning(ctx, rec.ID, lease.Sandbox.ID, urls)
	if err != nil {
		// Terminated while it was created (its parent went): end it.
		if _, terr := s.terminate(context.WithoutCancel(ctx), rec, "released during create"); terr != nil {
			s.log.Error("terminate a sandbox whose record closed during its create", "sandbox", rec.ID, "err", terr)
		}
		return Sandbox{}, &Error{Kind: KindConflict, Message: "the sandbox was terminated while it was created (its parent ended?)", Err: err}
	}
	s.log.Info("direct sandbox created", "sandbox", rec.ID, "tenant", caller.Tenant, "parent", rec.ParentID, "sandbox_id", lease.Sandbox.ID)
	return Sandbox{DirectSandbox: got, Created: true}, nil
}

// namedWait is how long a named create waits for another create of the
// same name to finish.
const namedWait = 30 * time.Second

// named answers a named create whose name another create claimed first:
// that sandbox, once it runs (or ended).
func (s *Service) named(ctx context.Context, caller Caller, name, held string) (Sandbox, error) {
	deadline := time.Now().Add(namedWait)
	for {
		cur, err := s.o.Store.DirectGet(ctx, held)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return Sandbox{}, err
		}
		if err == nil && (cur.Tenant != caller.Tenant || cur.ParentID != caller.Parent) {
			return Sandbox{}, &Error{Kind: KindConflict, Field: "name", Message: fmt.Sprintf("the name %q belongs to another sandbox", name)}
		}
		// Not yet recorded (its create is between the claim and the
		// record) or being created: wait for it.
		if err == nil && cur.State != store.DirectCreating {
			return Sandbox{DirectSandbox: cur}, nil
		}
		if !time.Now().Before(deadline) {
			return Sandbox{}, &Error{Kind: KindConflict, Field: "name", Message: fmt.Sprintf("the sandbox named %q is still being created; ask again", name)}
		}
		select {
		case <-ctx.Done():
			return Sandbox{}, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// get reads a sandbox the caller may see: its tenant's, and with a sandbox
// token only that sandbox's children. Anything else is not found.
func (s *Service) get(ctx context.Context, caller Caller, id string) (store.DirectSandbox, error) {
	if !ids.Valid(id) {
		return store.DirectSandbox{}, notFound(id)
	}
	d, err := s.o.Store.DirectGet(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return d, notFound(id)
	}
	if err != nil {
		return d, err
	}
	if d.Tenant != caller.Tenant || (caller.Parent != "" && d.ParentID != caller.Parent) {
		return store.DirectSandbox{}, notFound(id)
	}
	return d, nil
}

// Get returns a sandbox and the ids of its live children.
func (s *Service) Get(ctx context.Context, caller Caller, id string) (store.DirectSandbox, []string, error) {
	d, err := s.get(ctx, caller, id)
	if err != nil {
		return d, nil, err
	}
	s.touch(ctx, d, time.Time{})
	entries, err := s.o.Sandboxes.Held(ctx, sandboxes.SandboxOwner(d.Ledger, d.Tenant))
	if err != nil {
		return d, nil, err
	}
	children := []string{}
	for _, e := range entries {
		children = append(children, strings.TrimPrefix(e.Name, "sbx-"))
	}
	return d, children, nil
}

// live reads a sandbox the caller may use and that still runs.
func (s *Service) live(ctx context.Context, caller Caller, id string) (store.DirectSandbox, error) {
	d, err := s.get(ctx, caller, id)
	if err != nil {
		return d, err
	}
	if d.State != store.DirectRunning {
		return d, &Error{Kind: KindConflict, Message: fmt.Sprintf("sandbox %s is %s", id, d.State)}
	}
	return d, nil
}

// touch records activity for the idle clock, at most every few seconds.
func (s *Service) touch(ctx context.Context, d store.DirectSandbox, keepAlive time.Time) {
	now := s.o.Now()
	if now.Sub(d.LastActive) < 2*time.Second && !keepAlive.After(d.KeepAliveUntil) {
		return
	}
	if err := s.o.Store.DirectTouch(ctx, d.ID, now, keepAlive); err != nil {
		s.log.Warn("recording sandbox activity", "sandbox", d.ID, "err", err)
	}
}

// List returns a page of the caller's sandboxes: with a sandbox token,
// only that sandbox's children.
func (s *Service) List(ctx context.Context, caller Caller, q store.ListQuery) (store.DirectPage, error) {
	page, err := s.o.Store.DirectList(ctx, caller.Tenant, q)
	if err != nil || caller.Parent == "" {
		return page, err
	}
	kept := page.Sandboxes[:0]
	for _, d := range page.Sandboxes {
		if d.ParentID == caller.Parent {
			kept = append(kept, d)
		}
	}
	page.Sandboxes = kept
	return page, nil
}

// TerminateSandbox ends a sandbox and, recursively, its children. It is
// idempotent: a terminated sandbox answers as it is.
func (s *Service) TerminateSandbox(ctx context.Context, caller Caller, id string) (store.DirectSandbox, error) {
	d, err := s.get(ctx, caller, id)
	if err != nil {
		return d, err
	}
	if _, err := s.terminate(ctx, d, "terminated by request"); err != nil {
		return d, err
	}
	return s.o.Store.DirectGet(ctx, id)
}

// TerminateTree is TerminateSandbox for sandstep's own callers: it says why,
// and answers how many sandboxes of the tree it closed (the sandbox and
// its children).
func (s *Service) TerminateTree(ctx context.Context, caller Caller, id, reason string) (int, error) {
	d, err := s.get(ctx, caller, id)
	if err != nil {
		return 0, err
	}
	return s.terminate(ctx, d, reason)
}

// terminate releases the sandbox's tree through the owner package and
// closes the records of every sandbox in it.
func (s *Service) terminate(ctx context.Context, d store.DirectSandbox, reason string) (int, error) {
	owner := sandboxes.TenantOwner(d.Tenant)
	if d.ParentID != "" {
		owner = sandboxes.SandboxOwner(ledgerName(d.ParentID), d.Tenant)
	}
	names, err := s.o.Sandboxes.ReleaseTree(ctx, owner, d.Ledger, reason)
	n := 0
	for _, name := range names {
		id := strings.TrimPrefix(name, "sbx-")
		why := reason
		if id != d.ID {
			why = "parent terminated"
		}
		closed, cerr := s.o.Store.DirectClose(ctx, id, why, store.DirectEvent{Type: "sandbox.terminated", At: s.o.Now(), Message: why})
		if cerr != nil && !errors.Is(cerr, store.ErrNotFound) {
			err = errors.Join(err, cerr)
		}
		if closed {
			n++
		}
	}
	return n, err
}

// TreeUsage is what the sandbox id and the children it started
// (recursively) used, as the ledger counts it for the job they belong to
// (CreateRequest.Job): their time by provider and size, bytes out where
// measured, execs. Sandboxes of no job count nothing here.
func (s *Service) TreeUsage(ctx context.Context, caller Caller, id string) (store.Usage, error) {
	d, err := s.get(ctx, caller, id)
	if err != nil {
		return store.Usage{}, err
	}
	if d.Job == "" {
		return store.Usage{}, nil
	}
	return s.o.Sandboxes.TreeUsage(ctx, d.Ledger, d.Job)
}

// Authenticate resolves a sandbox token: the tenant it acts for and the
// sandbox whose children it manages. A token of a terminated sandbox is no
// token.
func (s *Service) Authenticate(ctx context.Context, token string) (Caller, bool) {
	rest, ok := strings.CutPrefix(token, TokenPrefix)
	if !ok {
		return Caller{}, false
	}
	id, _, ok := strings.Cut(rest, "_")
	if !ok || !ids.Valid(id) {
		return Caller{}, false
	}
	d, err := s.o.Store.DirectGet(ctx, id)
	if err != nil || d.State == store.DirectTerminated || d.TokenHash == "" {
		return Caller{}, false
	}
	if subtle.ConstantTimeCompare([]byte(tokenHash(token)), []byte(d.TokenHash)) != 1 {
		return Caller{}, false
	}
	return Caller{Tenant: d.Tenant, Parent: d.ID}, true
}

// URLTokenValid reports whether tok is the URL token of the sandbox id,
// for its public URLs (exposed ports, artifacts); it returns the sandbox.
func (s *Service) URLTokenValid(ctx context.Context, id, tok string) (store.DirectSandbox, bool) {
	if tok == "" || !ids.Valid(id) {
		return store.DirectSandbox{}, false
	}
	d, err := s.o.Store.DirectGet(ctx, id)
	if err != nil || d.State != store.DirectRunning {
		return store.DirectSandbox{}, false
	}
	return d, subtle.ConstantTimeCompare([]byte(tok), []byte(d.URLToken)) == 1
}

// TouchPort records a request to one of the sandbox's exposed ports as
// activity.
func (s *Service) TouchPort(ctx context.Context, d store.DirectSandbox) { s.touch(ctx, d, time.Time{}) }
