package deno_test

import (
	"context"
	"maps"
	"testing"

	"github.com/sandstep/sandstep/internal/testkit/fakedeno"
	"github.com/sandstep/sandstep/providers"
)

// TestCreateExposesPorts: CreateSpec.ExposePorts become Deno exposeHttp
// domains at create, through the plugin boundary; Sandbox.PortURLs names
// them from Create and Get; a bad port is refused before any sandbox is
// made.
func TestCreateExposesPorts(t *testing.T) {
	f := startFake(t, fakedeno.Options{})
	p := startPlugin(t, f, providers.SandboxDefaults{})
	ctx := t.Context()
	info, err := p.Info(ctx)
	if err != nil || !info.Capabilities.PublicURL {
		t.Fatalf("Info = %+v, %v; want the public-url capability", info.Capabilities, err)
	}
	sb, err := p.Create(ctx, providers.CreateSpec{ExposePorts: []int{8000, 5173}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Terminate(context.WithoutCancel(ctx), sb.ID)
	want := map[int]string{}
	for domain, target := range f.Exposed(sb.ID) {
		switch target {
		case "port:8000":
			want[8000] = "https://" + domain
		case "port:5173":
			want[5173] = "https://" + domain
		default:
			t.Errorf("the fake has %s exposed to %s", domain, target)
		}
	}
	if len(want) != 2 || !maps.Equal(sb.PortURLs, want) {
		t.Fatalf("Create's PortURLs = %v; the fake issued %v", sb.PortURLs, want)
	}
	got, err := p.Get(ctx, sb.ID)
	if err != nil || !maps.Equal(got.PortURLs, want) {
		t.Fatalf("Get's PortURLs = %v, %v; want %v", got.PortURLs, err, want)
	}

	before := len(f.Running())
	for _, bad := range [][]int{{0}, {70000}, {8000, 8000}} {
		if _, err := p.Create(ctx, providers.CreateSpec{ExposePorts: bad}); providers.CodeOf(err) != providers.InvalidArgument {
			t.Errorf("ports %v: %v, want InvalidArgument", bad, err)
		}
	}
	if n := len(f.Running()); n != before {
		t.Fatalf("%d sandboxes run after the refused creates, want %d", n, before)
	}
}
