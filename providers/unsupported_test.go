package providers_test

import (
	"io"
	"testing"

	"github.com/sandstep/sandstep/providers"
)

// Every method of every Unsupported type refuses with code Unsupported.
func TestUnsupportedTypesRefuse(t *testing.T) {
	ctx := t.Context()
	var (
		s providers.UnsupportedSnapshots
		v providers.UnsupportedVolumes
		l providers.UnsupportedList
		f providers.UnsupportedFiles
		n providers.UnsupportedListSnapshots
	)
	errs := map[string]error{}
	_, errs["EnsureSnapshot"] = s.EnsureSnapshot(ctx, providers.SnapshotSpec{Slug: "x"})
	_, errs["GetSnapshot"] = s.GetSnapshot(ctx, "x")
	errs["DeleteSnapshot"] = s.DeleteSnapshot(ctx, "x")
	_, errs["ListSnapshots"] = s.ListSnapshots(ctx, nil)
	_, errs["ListSnapshots (alone)"] = n.ListSnapshots(ctx, nil)
	_, errs["CreateVolume"] = v.CreateVolume(ctx, providers.VolumeSpec{Slug: "x"})
	_, errs["GetVolume"] = v.GetVolume(ctx, "x")
	errs["DeleteVolume"] = v.DeleteVolume(ctx, "x")
	_, errs["ListVolumes"] = v.ListVolumes(ctx, nil)
	_, errs["List"] = l.List(ctx, providers.ListFilter{})
	errs["WriteFile"] = f.WriteFile(ctx, "sb", providers.WriteFileRequest{Path: "/x"})
	_, errs["ReadFile"] = f.ReadFile(ctx, "sb", providers.ReadFileRequest{Path: "/x"}, io.Discard)
	_, errs["ListFiles"] = f.ListFiles(ctx, "sb", "/")
	for m, err := range errs {
		if !providers.IsUnsupported(err) {
			t.Errorf("%s: %v, want code Unsupported", m, err)
		}
	}
}

type noSnapshots struct {
	providers.UnsupportedSnapshots
}

type noSnapshotList struct {
	providers.UnsupportedListSnapshots
}

func TestTruthfulCapabilities(t *testing.T) {
	all := providers.Capabilities{Snapshots: true, ListSnapshots: true, Volumes: true, ListByLabels: true, FileAPI: true}
	got := providers.TruthfulCapabilities(noSnapshots{}, all)
	if got.Snapshots || got.ListSnapshots || !got.Volumes || !got.ListByLabels || !got.FileAPI {
		t.Errorf("embedding UnsupportedSnapshots only: %+v", got)
	}
	got = providers.TruthfulCapabilities(noSnapshotList{}, all)
	if !got.Snapshots || got.ListSnapshots {
		t.Errorf("embedding UnsupportedListSnapshots only: %+v", got)
	}
	// Listing snapshots without having any is not a capability.
	got = providers.TruthfulCapabilities(struct{}{}, providers.Capabilities{ListSnapshots: true})
	if got.ListSnapshots {
		t.Errorf("ListSnapshots without Snapshots survived: %+v", got)
	}
}
