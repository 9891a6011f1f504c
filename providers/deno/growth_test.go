package deno

import (
	"fmt"
	"testing"
	"time"

	"github.com/sandstep/sandstep/providers"
)

// TestLongLivedProviderDoesNotGrow: a plugin lives as long as its host;
// what it keeps per sandbox, name, volume and slug goes when they do, and
// lookups of slugs add nothing.
func TestLongLivedProviderDoesNotGrow(t *testing.T) {
	_, configured := internalFake(t, "ddo_growth_test")
	p := configured()
	ctx := t.Context()
	for i := range 12 {
		// Longer than Deno's 32 characters: carried as a hash.
		slug := fmt.Sprintf("a-volume-slug-longer-than-deno-takes-%03d", i)
		if _, err := p.CreateVolume(ctx, providers.VolumeSpec{Slug: slug, Labels: map[string]string{"i": fmt.Sprint(i)}}); err != nil {
			t.Fatal(err)
		}
		sb, err := p.Create(ctx, providers.CreateSpec{Name: fmt.Sprintf("sb-%d", i), Lifetime: 10 * time.Minute, Mounts: []providers.Mount{{Volume: slug}}})
		if err != nil {
			t.Fatal(err)
		}
		if r, err := p.Exec(ctx, sb.ID, providers.ExecRequest{Argv: []string{"true"}}); err != nil || r.ExitCode != 0 {
			t.Fatalf("Exec: %+v, %v", r, err)
		}
		if err := p.Terminate(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		if err := p.DeleteVolume(ctx, slug); err != nil {
			t.Fatal(err)
		}
		if _, err := p.GetVolume(ctx, fmt.Sprintf("never-made-and-longer-than-32-characters-%d", i)); !providers.IsNotFound(err) {
			t.Fatalf("GetVolume of a slug never made: %v", err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	sizes := map[string]int{"conns": len(p.conns), "records": len(p.records), "naming": len(p.naming), "names": len(p.names),
		"volumes": len(p.volumes), "snaps": len(p.snaps), "building": len(p.building), "detaching": len(p.detaching)}
	for what, n := range sizes {
		if n != 0 {
			t.Errorf("after 12 sandboxes and volumes came and went the provider keeps %d %s", n, what)
		}
	}
}
