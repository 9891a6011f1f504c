package conformance

import (
	"bytes"
	"slices"
	"strconv"
	"strings"

	"github.com/sandstep/sandstep/providers"
)

func caseVolumesLifecycle(t T, p providers.Provider) {
	f := newFix(t, p)
	v := f.volume()
	again, err := p.CreateVolume(f.ctx, providers.VolumeSpec{Slug: v.Slug, Labels: f.labels()})
	if err != nil {
		t.Fatalf("second CreateVolume(%s): %v", v.Slug, err)
	}
	if again.Slug != v.Slug || !again.CreatedAt.Equal(v.CreatedAt) {
		t.Errorf("second CreateVolume did not return the existing volume: %+v, first %+v", again, v)
	}
	got, err := p.GetVolume(f.ctx, v.Slug)
	if err != nil {
		t.Fatalf("GetVolume(%s): %v", v.Slug, err)
	}
	if got.Slug != v.Slug {
		t.Errorf("GetVolume: slug %q, want %q", got.Slug, v.Slug)
	}
	for k, want := range f.labels() {
		if got.Labels[k] != want {
			t.Errorf("GetVolume: label %s = %q, want %q", k, got.Labels[k], want)
		}
	}
	sel := map[string]string{labelRun: f.e.runID, labelCase: f.name}
	listed := func() []string {
		t.Helper()
		vols, err := p.ListVolumes(f.ctx, sel)
		if err != nil {
			t.Fatalf("ListVolumes: %v", err)
		}
		var slugs []string
		for _, v := range vols {
			slugs = append(slugs, v.Slug)
			if v.Labels[labelCase] != f.name {
				t.Errorf("ListVolumes returned %s, which lacks the filter's labels", v.Slug)
			}
		}
		return slugs
	}
	if slugs := listed(); !slices.Equal(slugs, []string{v.Slug}) {
		t.Errorf("ListVolumes = %v, want [%s]", slugs, v.Slug)
	}
	for i := range 2 {
		if err := p.DeleteVolume(f.ctx, v.Slug); err != nil {
			t.Errorf("DeleteVolume #%d: %v", i+1, err)
		}
	}
	_, err = p.GetVolume(f.ctx, v.Slug)
	f.wantCode("GetVolume after DeleteVolume", err, providers.NotFound)
	if slugs := listed(); len(slugs) != 0 {
		t.Errorf("ListVolumes after DeleteVolume = %v, want none", slugs)
	}
	for _, slug := range []string{"", "../escape", "a/b"} {
		_, err := p.CreateVolume(f.ctx, providers.VolumeSpec{Slug: slug, Labels: f.labels()})
		f.wantCode("CreateVolume with slug "+strconv.Quote(slug), err, providers.InvalidArgument)
		if err == nil {
			if err := p.DeleteVolume(f.ctx, slug); err != nil {
				t.Errorf("DeleteVolume(%q): %v", slug, err)
			}
		}
	}
}

func caseVolumesPersist(t T, p providers.Provider) {
	f := newFix(t, p)
	v := f.volume()
	a := f.create(providers.CreateSpec{Mounts: []providers.Mount{{Volume: v.Slug}}}) // Path "" = /workspace
	if len(a.Mounts) != 1 || a.Mounts[0].Volume != v.Slug || (a.Mounts[0].Path != workspace && a.Mounts[0].Path != "") {
		t.Errorf("Create: Mounts %+v, want the volume at %s", a.Mounts, workspace)
	}
	f.sh(a.ID, "mkdir -p "+workspace+"/d && echo from-a > "+workspace+"/d/note.txt")
	bin := []byte{0, 1, 2, 0xfe, 0xff, '\n'}
	f.writeFile(a.ID, workspace+"/d/bin", bin)
	if err := p.Terminate(f.ctx, a.ID); err != nil {
		t.Fatalf("Terminate: %v", err)
	}

	b := f.create(providers.CreateSpec{Mounts: []providers.Mount{{Volume: v.Slug, Path: workspace}}})
	if out := f.sh(b.ID, "cat "+workspace+"/d/note.txt"); out != "from-a\n" {
		t.Errorf("a later sandbox reads %q from the volume, want %q", out, "from-a\n")
	}
	if got := f.readFile(b.ID, providers.ReadFileRequest{Path: workspace + "/d/bin"}); !bytes.Equal(got, bin) {
		t.Errorf("binary file on the volume reads back as %x, want %x", got, bin)
	}
	if err := p.Terminate(f.ctx, b.ID); err != nil {
		t.Fatalf("Terminate: %v", err)
	}

	c := f.sandbox()
	if out := f.sh(c.ID, "test -e "+workspace+"/d/note.txt && echo present || echo absent"); out != "absent\n" {
		t.Errorf("a sandbox without the volume sees its file: %q", out)
	}

	// A backend without read-only mounts (Deno attaches volumes read-write
	// only) refuses them as Unsupported rather than mount read-write.
	ro, err := f.tryCreate(providers.CreateSpec{Mounts: []providers.Mount{{Volume: v.Slug, Path: "/data", ReadOnly: true}}})
	switch {
	case providers.IsUnsupported(err):
		t.Logf("read-only mounts: %v", err)
	case err != nil:
		t.Fatalf("Create with a read-only mount: %v", err)
	default:
		if out := f.sh(ro.ID, "cat /data/d/note.txt"); out != "from-a\n" {
			t.Errorf("read-only mount at /data: read %q", out)
		}
		if r := f.exec(ro.ID, providers.ExecRequest{Shell: "echo x > /data/d/new.txt"}); r.ExitCode == 0 {
			t.Errorf("writing to a read-only mount succeeded")
		}
	}

	_, err = f.tryCreate(providers.CreateSpec{Mounts: []providers.Mount{{Volume: "cf-" + f.e.runID + "-nosuchvolume"}}})
	f.wantCode("Create mounting a volume that does not exist", err, providers.NotFound)
	_, err = f.tryCreate(providers.CreateSpec{Mounts: []providers.Mount{{Volume: v.Slug, Path: "relative/path"}}})
	f.wantCode("Create with a relative mount path", err, providers.InvalidArgument)
}

func caseVolumesDeleteMounted(t T, p providers.Provider) {
	f := newFix(t, p)
	v := f.volume()
	sb := f.create(providers.CreateSpec{Mounts: []providers.Mount{{Volume: v.Slug}}})
	f.sh(sb.ID, "echo keep > "+workspace+"/f")
	err := p.DeleteVolume(f.ctx, v.Slug)
	f.wantCode("DeleteVolume while a live sandbox mounts it", err, providers.FailedPrecondition)
	if _, err := p.GetVolume(f.ctx, v.Slug); err != nil {
		t.Errorf("GetVolume after a refused DeleteVolume: %v", err)
	}
	if out := f.sh(sb.ID, "cat "+workspace+"/f"); strings.TrimSpace(out) != "keep" {
		t.Errorf("after a refused DeleteVolume the mounted volume holds %q", out)
	}
	if err := p.Terminate(f.ctx, sb.ID); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	if err := p.DeleteVolume(f.ctx, v.Slug); err != nil {
		t.Errorf("DeleteVolume once no sandbox mounts it: %v", err)
	}
	_, err = p.GetVolume(f.ctx, v.Slug)
	f.wantCode("GetVolume after DeleteVolume", err, providers.NotFound)
}
