package deno

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/sandstep/sandstep/providers"
)

// listed is one sandbox of Deno's list.
type listed struct {
	ID        string            `json:"id"`
	CreatedAt time.Time         `json:"createdAt"`
	Region    string            `json:"region"`
	Status    string            `json:"status"`
	Labels    map[string]string `json:"labels"`
}

// list asks the console for the sandboxes carrying labels, running ones
// only.
func (p *Provider) list(ctx context.Context, cfg *configured, op string, labels map[string]string) ([]listed, error) {
	q := url.Values{}
	for k, v := range labels {
		q.Set("labels["+k+"]", v)
	}
	path := "/api/v2/sandboxes"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var all []listed
	if err := cfg.c.do(ctx, op, http.MethodGet, cfg.c.console, path, nil, &all); err != nil {
		return nil, err
	}
	var out []listed
	for _, l := range all {
		if l.Status == "running" {
			out = append(out, l)
		}
	}
	return out, nil
}

func (p *Provider) sandbox(l listed) providers.Sandbox {
	sb := providers.Sandbox{ID: l.ID, Name: l.Labels[LabelName], Labels: l.Labels, State: providers.StateRunning, CreatedAt: l.CreatedAt}
	if l.Status != "running" {
		sb.State = providers.StateTerminated
	}
	p.mu.Lock()
	if r := p.records[l.ID]; r != nil {
		sb.Snapshot, sb.Mounts, sb.ExpiresAt, sb.PortURLs = r.snapshot, slices.Clone(r.mounts), r.until, maps.Clone(r.ports)
	} else if sb.State == providers.StateRunning {
		// Known to another process only: Deno ends a sandbox no one
		// extended 30 minutes after its create, at the latest.
		sb.ExpiresAt = l.CreatedAt.Add(maxStop)
	}
	p.mu.Unlock()
	return sb
}

// recordFile keeps, inside the sandbox, what Deno does not say of it and
// any process reaching it by id needs: the lifetime asked for, beyond
// Deno's 30 minutes, and Deno's current end.
const recordFile = "/home/app/.sandstep-sandbox.json"

type recordJSON struct {
	ID       string            `json:"id"`
	UntilMs  int64             `json:"until_ms"`
	StopAtMs int64             `json:"stop_at_ms"`
	Snapshot string            `json:"snapshot,omitempty"`
	Mounts   []providers.Mount `json:"mounts,omitempty"`
}

// keepRecord writes the record into the sandbox.
func (p *Provider) keepRecord(ctx context.Context, cfg *configured, rc *rpcConn, r *record) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.s.RequestTimeout.D())
	defer cancel()
	p.mu.Lock()
	b, _ := json.Marshal(recordJSON{ID: rc.id, UntilMs: r.until.UnixMilli(), StopAtMs: r.stopAt.UnixMilli(), Snapshot: r.snapshot, Mounts: r.mounts})
	p.mu.Unlock()
	return rc.call(ctx, "create", "writeTextFile", map[string]any{"path": recordFile, "content": string(b)}, nil)
}

// loadRecord reads the record of a sandbox this process did not create
// (the next Lambda invocation's, a restarted plugin's). One that is not
// there, or is another sandbox's (a bootable root volume keeps its files),
// leaves the sandbox unknown.
func (p *Provider) loadRecord(ctx context.Context, cfg *configured, rc *rpcConn, createdAt time.Time) {
	ctx, cancel := context.WithTimeout(ctx, cfg.s.RequestTimeout.D())
	defer cancel()
	var text string
	var rj recordJSON
	if err := rc.call(ctx, "connect", "readTextFile", map[string]string{"path": recordFile}, &text); err != nil ||
		json.Unmarshal([]byte(text), &rj) != nil || rj.ID != rc.id {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.records[rc.id] == nil {
		p.records[rc.id] = &record{until: time.UnixMilli(rj.UntilMs), stopAt: time.UnixMilli(rj.StopAtMs), snapshot: rj.Snapshot, mounts: rj.Mounts, createdAt: createdAt}
	}
}

// Get finds a sandbox in Deno's list, stopped ones reported terminated.
func (p *Provider) Get(ctx context.Context, id string) (providers.Sandbox, error) {
	const op = "get"
	cfg, err := p.settings(op)
	if err != nil {
		return providers.Sandbox{}, err
	}
	if !sandboxIDRE.MatchString(id) {
		return providers.Sandbox{}, providers.Errorf(providers.NotFound, op, "no sandbox %q: not a Deno sandbox id", clip(id))
	}
	var all []listed
	if err := cfg.c.do(ctx, op, http.MethodGet, cfg.c.console, "/api/v2/sandboxes", nil, &all); err != nil {
		return providers.Sandbox{}, err
	}
	for _, l := range all {
		if l.ID != id {
			continue
		}
		p.mu.Lock()
		known := p.records[id] != nil
		p.mu.Unlock()
		if !known && l.Status == "running" {
			// Its lifetime is in the sandbox: connect (the socket serves
			// the calls that follow a Get) and read it.
			if rc, err := p.conn(ctx, op, id); err == nil {
				p.loadRecord(ctx, cfg, rc, l.CreatedAt)
			}
		}
		return p.sandbox(l), nil
	}
	return providers.Sandbox{}, providers.Errorf(providers.NotFound, op, "no sandbox %s", id)
}

// List returns the running sandboxes carrying the labels (and name).
func (p *Provider) List(ctx context.Context, f providers.ListFilter) ([]providers.Sandbox, error) {
	const op = "list"
	cfg, err := p.settings(op)
	if err != nil {
		return nil, err
	}
	labels := maps.Clone(f.Labels)
	if f.Name != "" {
		if labels == nil {
			labels = map[string]string{}
		}
		labels[LabelName] = f.Name
	}
	ls, err := p.list(ctx, cfg, op, labels)
	if err != nil {
		return nil, err
	}
	out := make([]providers.Sandbox, 0, len(ls))
	for _, l := range ls {
		out = append(out, p.sandbox(l))
	}
	return out, nil
}

// Terminate kills the sandbox; Deno's 404 means it is gone already.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	const op = "terminate"
	cfg, err := p.settings(op)
	if err != nil {
		return err
	}
	if !sandboxIDRE.MatchString(id) {
		return nil // no such sandbox can exist
	}
	return p.kill(ctx, cfg, id)
}

func (p *Provider) kill(ctx context.Context, cfg *configured, id string) error {
	err := cfg.c.do(ctx, "terminate", http.MethodDelete, cfg.c.sandbox, "/api/v3/sandbox/"+id, nil, nil)
	if err != nil && !providers.IsNotFound(err) {
		return err
	}
	p.mu.Lock()
	rc := p.conns[id]
	if r := p.records[id]; r != nil {
		for _, m := range r.mounts {
			p.detaching[m.Volume] = time.Now().Add(detachWait)
		}
	}
	delete(p.conns, id)
	delete(p.records, id)
	p.mu.Unlock()
	if rc != nil {
		rc.close()
	}
	p.log.Info("sandbox terminated", "id", id)
	return nil
}

// conn returns a socket to a running sandbox: the one this process holds,
// or a new connect by id (after a restart, or in the next Lambda
// invocation). A sandbox whose asked-for lifetime goes past Deno's end is
// extended when that end is near.
func (p *Provider) conn(ctx context.Context, op, id string) (*rpcConn, error) {
	cfg, err := p.settings(op)
	if err != nil {
		return nil, err
	}
	if !sandboxIDRE.MatchString(id) {
		return nil, providers.Errorf(providers.NotFound, op, "no sandbox %q: not a Deno sandbox id", clip(id))
	}
	p.mu.Lock()
	rc := p.conns[id]
	_, known := p.records[id]
	p.mu.Unlock()
	if rc == nil || !rc.alive() {
		if rc, err = dial(ctx, cfg.c, op, cfg.c.sandbox+"/api/v3/sandbox/"+id+"/connect", nil); err != nil {
			return nil, err
		}
		p.mu.Lock()
		if old := p.conns[id]; old != nil && old != rc && old.alive() {
			rc.close()
			rc = old
		} else {
			p.conns[id] = rc
		}
		p.mu.Unlock()
		if !known {
			p.loadRecord(ctx, cfg, rc, time.Time{})
		}
	}
	p.extendIfDue(ctx, cfg, rc, id)
	return rc, nil
}

// extendWithin is how near Deno's end must be before a call extends it.
const extendWithin = 10 * time.Minute

func (p *Provider) extendIfDue(ctx context.Context, cfg *configured, rc *rpcConn, id string) {
	p.mu.Lock()
	r := p.records[id]
	var want time.Time
	now := p.now()
	if r != nil && r.until.After(r.stopAt) && r.stopAt.Sub(now) < extendWithin {
		want = r.until
		if lim := now.Add(maxStop); want.After(lim) {
			want = lim
		}
	}
	p.mu.Unlock()
	if want.IsZero() {
		return
	}
	got, err := p.extend(ctx, cfg, id, want)
	if err != nil {
		p.log.Warn("extending a sandbox failed; it stops at its current end", "id", id, "error", err)
		return
	}
	p.mu.Lock()
	r.stopAt = got
	p.mu.Unlock()
	// The next process to reach the sandbox learns the new end from it.
	if err := p.keepRecord(ctx, cfg, rc, r); err != nil {
		p.log.Warn("keeping a sandbox's new end in it failed", "id", id, "error", err)
	}
}

// extend asks Deno to move the sandbox's end to want and returns the end
// it granted.
func (p *Provider) extend(ctx context.Context, cfg *configured, id string, want time.Time) (time.Time, error) {
	var out struct {
		StopAtMs int64 `json:"stop_at_ms"`
	}
	if err := cfg.c.do(ctx, "extend", http.MethodPatch, cfg.c.sandbox, "/api/v3/sandbox/"+id, map[string]int64{"stop_at_ms": want.UnixMilli()}, &out); err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(out.StopAtMs), nil
}

// exposeAll exposes ports of a new sandbox (CreateSpec.ExposePorts) and
// keeps their URLs in its record, for Get.
func (p *Provider) exposeAll(ctx context.Context, id string, ports []int) (map[int]string, error) {
	if len(ports) == 0 {
		return nil, nil
	}
	urls := make(map[int]string, len(ports))
	for _, port := range ports {
		u, err := p.ExposeHTTP(ctx, id, port)
		if err != nil {
			return nil, fmt.Errorf("expose port %d: %w", port, err)
		}
		urls[port] = u
	}
	p.mu.Lock()
	if r := p.records[id]; r != nil {
		r.ports = maps.Clone(urls)
	}
	p.mu.Unlock()
	return urls, nil
}

// ExposeHTTP makes port of the sandbox public and returns its URL, which
// anyone may call (Deno puts no auth in front of it).
func (p *Provider) ExposeHTTP(ctx context.Context, id string, port int) (string, error) {
	const op = "expose"
	if port < 1 || port > 65535 {
		return "", providers.Errorf(providers.InvalidArgument, op, "port %d is not from 1 to 65535", port)
	}
	rc, err := p.conn(ctx, op, id)
	if err != nil {
		return "", err
	}
	cfg, _ := p.settings(op)
	var out struct {
		Domain string `json:"domain"`
	}
	if err := cfg.c.do(ctx, op, http.MethodPost, cfg.c.sandbox, "/api/v3/sandbox/"+id+"/expose/http", map[string]any{}, &out); err != nil {
		return "", err
	}
	if out.Domain == "" || strings.ContainsAny(out.Domain, "/?#@ ") {
		return "", providers.Errorf(providers.Internal, op, "Deno's expose answer names no usable domain (%q)", clip(out.Domain))
	}
	if err := rc.call(ctx, op, "exposeHttp", map[string]any{"domain": out.Domain, "port": port}, nil); err != nil {
		return "", err
	}
	return "https://" + out.Domain, nil
}
