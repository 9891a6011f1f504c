package conformance_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/conformance"
	"github.com/sandstep/sandstep/providers/plugin/plugintest"
)

// minimal is what a provider author writes first: sandboxes that only
// exist, commands that all succeed, and the Unsupported types for every
// optional group. It is the whole provider.
type minimal struct {
	providers.UnsupportedSnapshots
	providers.UnsupportedVolumes
	providers.UnsupportedList
	providers.UnsupportedFiles

	mu   sync.Mutex
	n    int
	live map[string]providers.Sandbox
}

func (m *minimal) Configure(context.Context, providers.Config) error { return nil }

func (m *minimal) Info(context.Context) (providers.Info, error) {
	return providers.Info{Name: "minimal", Version: "0.1.0", APIVersion: providers.APIVersion,
		Capabilities: providers.Capabilities{NetworkModes: []providers.NetworkMode{providers.NetworkNone}}}, nil
}

func (m *minimal) Create(_ context.Context, spec providers.CreateSpec) (providers.Sandbox, error) {
	if mode := spec.Network.Mode; mode != "" && mode != providers.NetworkNone {
		code := providers.Unsupported
		if mode != providers.NetworkAll && mode != providers.NetworkAllowlist {
			code = providers.InvalidArgument
		}
		return providers.Sandbox{}, providers.Errorf(code, "create", "network mode %q", mode)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n++
	sb := providers.Sandbox{ID: fmt.Sprint("m", m.n), Name: spec.Name, Labels: spec.Labels, State: providers.StateRunning,
		CreatedAt: time.Now(), ExpiresAt: time.Now().Add(spec.Lifetime)}
	m.live[sb.ID] = sb
	return sb, nil
}

func (m *minimal) Get(_ context.Context, id string) (providers.Sandbox, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if sb, ok := m.live[id]; ok {
		return sb, nil
	}
	return providers.Sandbox{}, providers.Errorf(providers.NotFound, "get", "no sandbox %q", id)
}

func (m *minimal) Terminate(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.live, id)
	return nil
}

func (m *minimal) Exec(ctx context.Context, id string, _ providers.ExecRequest) (providers.ExecResult, error) {
	_, err := m.Get(ctx, id)
	return providers.ExecResult{}, err
}

// A provider of a few dozen lines, embedding the Unsupported types, passes
// the core cases through the plugin protocol without a binary.
func TestMinimalProviderPassesCoreInProcess(t *testing.T) {
	conformance.Run(t, plugintest.Connect(t, &minimal{live: map[string]providers.Sandbox{}}), conformance.Options{Core: true})
}

// overclaiming says it has every optional group while embedding the types
// that refuse them.
type overclaiming struct{ *minimal }

func (o overclaiming) Info(ctx context.Context) (providers.Info, error) {
	info, err := o.minimal.Info(ctx)
	c := &info.Capabilities
	c.Snapshots, c.Volumes, c.ListByLabels, c.FileAPI, c.NamedSandboxes = true, true, true, true, true
	c.Limits.Enforced = []string{providers.LimitMemory, providers.LimitVolumeCapacity}
	return info, err
}

// Capabilities stay truthful: what an embedded Unsupported type refuses is
// not claimed across the plugin protocol, whatever Info says, and the suite
// then expects the refusals.
func TestEmbeddedUnsupportedTypesAreNotClaimed(t *testing.T) {
	p := plugintest.Connect(t, overclaiming{&minimal{live: map[string]providers.Sandbox{}}})
	info, err := p.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	c := info.Capabilities
	if c.Snapshots || c.Volumes || c.ListByLabels || c.FileAPI {
		t.Errorf("claimed through the plugin: %+v", c)
	}
	if !c.NamedSandboxes || !c.Limits.Enforces(providers.LimitMemory) || c.Limits.Enforces(providers.LimitVolumeCapacity) {
		t.Errorf("NamedSandboxes and the memory limit are the provider's own to claim, volume capacity is not: %+v", c)
	}
	conformance.Run(t, p, conformance.Options{Core: true, Only: []string{"info", "unsupported"}})
}
