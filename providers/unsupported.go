package providers

import (
	"context"
	"io"
	"slices"
)

// The Unsupported types implement the optional groups of Provider by
// refusing them with code Unsupported, so that a provider with fewer
// capabilities embeds the groups it lacks instead of writing them out:
//
//	type mine struct {
//		providers.UnsupportedSnapshots
//		providers.UnsupportedVolumes
//		// Configure, Info, Create, Get, List, Terminate, Exec, files ...
//	}
//
// Capabilities stay truthful: TruthfulCapabilities clears what an embedded
// Unsupported type refuses, and the plugin server applies it to every Info
// answer, so a provider that embeds UnsupportedSnapshots reports no
// snapshots even if its Info says otherwise.

// UnsupportedSnapshots refuses EnsureSnapshot, GetSnapshot, DeleteSnapshot
// and ListSnapshots (Capabilities.Snapshots and ListSnapshots = false).
type UnsupportedSnapshots struct{}

func (UnsupportedSnapshots) EnsureSnapshot(context.Context, SnapshotSpec) (Snapshot, error) {
	return Snapshot{}, lacks("ensure snapshot", "snapshots")
}

func (UnsupportedSnapshots) GetSnapshot(context.Context, string) (Snapshot, error) {
	return Snapshot{}, lacks("get snapshot", "snapshots")
}

func (UnsupportedSnapshots) DeleteSnapshot(context.Context, string) error {
	return lacks("delete snapshot", "snapshots")
}

func (UnsupportedSnapshots) ListSnapshots(context.Context, map[string]string) ([]Snapshot, error) {
	return nil, lacks("list snapshots", "snapshots")
}

func (UnsupportedSnapshots) lacksSnapshots() {}

// UnsupportedListSnapshots refuses ListSnapshots alone
// (Capabilities.ListSnapshots = false), for a provider that builds
// snapshots but cannot list them: the host then never collects old ones.
type UnsupportedListSnapshots struct{}

func (UnsupportedListSnapshots) ListSnapshots(context.Context, map[string]string) ([]Snapshot, error) {
	return nil, lacks("list snapshots", "listing snapshots")
}

func (UnsupportedListSnapshots) lacksListSnapshots() {}

// UnsupportedVolumes refuses CreateVolume, GetVolume, DeleteVolume and
// ListVolumes (Capabilities.Volumes = false).
type UnsupportedVolumes struct{}

func (UnsupportedVolumes) CreateVolume(context.Context, VolumeSpec) (Volume, error) {
	return Volume{}, lacks("create volume", "volumes")
}

func (UnsupportedVolumes) GetVolume(context.Context, string) (Volume, error) {
	return Volume{}, lacks("get volume", "volumes")
}

func (UnsupportedVolumes) DeleteVolume(context.Context, string) error {
	return lacks("delete volume", "volumes")
}

func (UnsupportedVolumes) ListVolumes(context.Context, map[string]string) ([]Volume, error) {
	return nil, lacks("list volumes", "volumes")
}

func (UnsupportedVolumes) lacksVolumes() {}

// UnsupportedList refuses List (Capabilities.ListByLabels = false): the
// host then keeps to its ledger, and a sandbox whose create answer was lost
// is left to its lifetime.
type UnsupportedList struct{}

func (UnsupportedList) List(context.Context, ListFilter) ([]Sandbox, error) {
	return nil, lacks("list", "listing sandboxes")
}

func (UnsupportedList) lacksList() {}

// UnsupportedFiles refuses WriteFile, ReadFile and ListFiles
// (Capabilities.FileAPI = false): the host moves files through Exec.
type UnsupportedFiles struct{}

func (UnsupportedFiles) WriteFile(context.Context, string, WriteFileRequest) error {
	return lacks("write file", "a file API")
}

func (UnsupportedFiles) ReadFile(context.Context, string, ReadFileRequest, io.Writer) (int64, error) {
	return 0, lacks("read file", "a file API")
}

func (UnsupportedFiles) ListFiles(context.Context, string, string) ([]FileInfo, error) {
	return nil, lacks("list files", "a file API")
}

func (UnsupportedFiles) lacksFiles() {}

func lacks(op, what string) error {
	return Errorf(Unsupported, op, "this provider has no %s", what)
}

// The markers are unexported so that only embedding an Unsupported type
// declares a group missing.
type (
	lacksSnapshots interface{ lacksSnapshots() }
	lacksListSnaps interface{ lacksListSnapshots() }
	lacksVolumes   interface{ lacksVolumes() }
	lacksList      interface{ lacksList() }
	lacksFiles     interface{ lacksFiles() }
)

// TruthfulCapabilities returns c without the capabilities whose methods p
// (a provider, or anything embedding Unsupported types) refuses through an
// embedded Unsupported type. A provider that implements a group itself is
// taken at its word.
func TruthfulCapabilities(p any, c Capabilities) Capabilities {
	if _, ok := p.(lacksSnapshots); ok {
		c.Snapshots = false
	}
	if _, ok := p.(lacksListSnaps); ok || !c.Snapshots {
		c.ListSnapshots = false
	}
	if _, ok := p.(lacksVolumes); ok {
		c.Volumes = false
		c.Limits.Enforced = without(c.Limits.Enforced, LimitVolumeCapacity)
	}
	if _, ok := p.(lacksList); ok {
		c.ListByLabels = false
	}
	if _, ok := p.(lacksFiles); ok {
		c.FileAPI = false
	}
	return c
}

func without(list []string, v string) []string {
	return slices.DeleteFunc(slices.Clone(list), func(e string) bool { return e == v })
}
