package providertest_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/conformance"
	"github.com/sandstep/sandstep/providers/plugin/plugintest"
	"github.com/sandstep/sandstep/providers/providertest"
)

// The mock answers as a provider must: the suite's core cases pass against
// it through the plugin protocol.
func TestMockPassesCoreConformanceInProcess(t *testing.T) {
	conformance.Run(t, plugintest.Connect(t, providertest.New()), conformance.Options{Core: true})
}

// Direct calls too, for tests that use the mock without the wire.
func TestMockPassesCoreConformanceDirect(t *testing.T) {
	conformance.Run(t, providertest.New(), conformance.Options{Core: true})
}

func TestMockRecordsCalls(t *testing.T) {
	ctx := t.Context()
	m := providertest.New()
	sb, err := m.Create(ctx, providers.CreateSpec{Name: "job-1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Exec(ctx, sb.ID, providers.ExecRequest{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if err := m.Terminate(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	want := []providertest.Call{{Method: "Create", Target: "job-1"}, {Method: "Exec", Target: sb.ID}, {Method: "Terminate", Target: sb.ID}}
	if got := m.Calls(); !slices.Equal(got, want) {
		t.Errorf("Calls() = %+v, want %+v", got, want)
	}
	if n := m.Count("Terminate"); n != 1 {
		t.Errorf("Count(Terminate) = %d, want 1", n)
	}
}

func TestMockFailures(t *testing.T) {
	ctx := t.Context()
	m := providertest.New()
	p := plugintest.Connect(t, m)

	m.FailOnce("Create", providers.Errorf(providers.ResourceExhausted, "create", "quota"))
	if _, err := p.Create(ctx, providers.CreateSpec{}); providers.CodeOf(err) != providers.ResourceExhausted {
		t.Fatalf("first Create: %v, want ResourceExhausted", err)
	}
	sb, err := p.Create(ctx, providers.CreateSpec{})
	if err != nil {
		t.Fatalf("Create after a FailOnce: %v", err)
	}

	m.Fail("Terminate", providers.Errorf(providers.Unavailable, "terminate", "backend down"))
	for range 2 {
		if err := p.Terminate(ctx, sb.ID); !errors.Is(err, providers.ErrUnavailable) {
			t.Fatalf("Terminate with a standing failure: %v, want Unavailable", err)
		}
	}
	m.Fail("Terminate", nil)
	if err := p.Terminate(ctx, sb.ID); err != nil {
		t.Fatalf("Terminate once cleared: %v", err)
	}
	// A failed call is recorded like any other.
	if n := m.Count("Terminate"); n != 3 {
		t.Errorf("Count(Terminate) = %d, want 3", n)
	}
}

// Failures set through settings, for the mock run as a plugin subprocess.
func TestMockSettings(t *testing.T) {
	ctx := t.Context()
	p := plugintest.Connect(t, providertest.New())
	if err := p.Configure(ctx, providers.Config{Settings: []byte(`{"name":"m","fail":{"Get":"NotFound"}}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(ctx, "x"); !providers.IsNotFound(err) || !strings.Contains(err.Error(), "injected NotFound failure") {
		t.Errorf("Get: %v, want the injected NotFound", err)
	}
	err := p.Configure(ctx, providers.Config{Settings: []byte(`{"nmae":"m","fail":{"Get":"Nope"}}`)})
	var se *providers.SettingsError
	if !errors.As(err, &se) || providers.CodeOf(err) != providers.InvalidArgument {
		t.Fatalf("Configure with bad settings: %v, want a SettingsError with InvalidArgument", err)
	}
	var keys []string
	for _, pr := range se.Problems {
		keys = append(keys, pr.Key)
	}
	if !slices.Equal(keys, []string{"nmae"}) || !strings.Contains(se.Problems[0].Message, `did you mean "name"`) {
		t.Errorf("problems %+v, want nmae with a did-you-mean", se.Problems)
	}
}

func TestMockCommands(t *testing.T) {
	ctx := t.Context()
	m := providertest.New()
	m.Command("crawl", func(_ context.Context, id string, argv []string, req providers.ExecRequest) (providers.ExecResult, error) {
		_, err := req.Stdout.Write([]byte(id + " crawled " + strings.Join(argv[1:], ",")))
		return providers.ExecResult{ExitCode: 3}, err
	})
	p := plugintest.Connect(t, m)
	sb, err := p.Create(ctx, providers.CreateSpec{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	res, err := p.Exec(ctx, sb.ID, providers.ExecRequest{Shell: "crawl a b", Stdout: &out})
	if err != nil || res.ExitCode != 3 || out.String() != sb.ID+" crawled a,b" {
		t.Errorf("registered command: %+v, %q, %v", res, out.String(), err)
	}
	res, err = p.Exec(ctx, sb.ID, providers.ExecRequest{Argv: []string{"nosuch"}})
	if err != nil || res.ExitCode != 127 {
		t.Errorf("unknown command: %+v, %v; want exit 127", res, err)
	}
}

func TestMockCapabilitiesBoundCreate(t *testing.T) {
	ctx := t.Context()
	m := providertest.New()
	m.SetCapabilities(providers.Capabilities{NetworkModes: []providers.NetworkMode{providers.NetworkNone}})
	_, err := m.Create(ctx, providers.CreateSpec{Network: providers.NetworkPolicy{Mode: providers.NetworkAll}})
	if !providers.IsUnsupported(err) {
		t.Errorf("Create with a network mode the capabilities lack: %v, want Unsupported", err)
	}
	info, err := m.Info(ctx)
	if err != nil || info.Capabilities.Volumes {
		t.Errorf("Info after SetCapabilities: %+v, %v", info.Capabilities, err)
	}
}
