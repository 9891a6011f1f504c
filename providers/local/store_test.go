package local

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstep/sandstep/providers"
)

func TestVolumes(t *testing.T) {
	e := newEnv(t, nil)
	v, err := e.p.CreateVolume(e.ctx, providers.VolumeSpec{Slug: "session-1", Labels: map[string]string{providers.LabelSession: "1"}})
	if err != nil {
		t.Fatal(err)
	}
	again, err := e.p.CreateVolume(e.ctx, providers.VolumeSpec{Slug: "session-1", Labels: map[string]string{"other": "x"}})
	if err != nil || !again.CreatedAt.Equal(v.CreatedAt) || again.Labels[providers.LabelSession] != "1" {
		t.Errorf("second CreateVolume = %+v, %v; want the existing volume", again, err)
	}

	a := e.create(providers.CreateSpec{Mounts: []providers.Mount{{Volume: "session-1"}}})
	e.sh(a.ID, "mkdir -p /workspace/d && echo from-a > /workspace/d/note && chmod 600 /workspace/d/note")
	e.write(a.ID, "/workspace/bin", []byte{0, 1, 0xff})
	err = e.p.DeleteVolume(e.ctx, "session-1")
	wantCode(t, "DeleteVolume while mounted", err, providers.FailedPrecondition)
	_, err = e.p.Create(e.ctx, providers.CreateSpec{Mounts: []providers.Mount{{Volume: "session-1", Path: "/data"}}})
	wantCode(t, "a second sandbox mounting a mounted volume", err, providers.FailedPrecondition)
	if err := e.p.Terminate(e.ctx, a.ID); err != nil {
		t.Fatal(err)
	}

	// A later sandbox, with another uid, owns the files and can change them.
	b := e.create(providers.CreateSpec{Mounts: []providers.Mount{{Volume: "session-1", Path: "/data"}}})
	if out := e.sh(b.ID, "cat /data/d/note && echo more >> /data/d/note && stat -c %u /data/d/note && ls /workspace | wc -l"); out != "from-a\n1000\n0\n" {
		t.Errorf("sandbox b on the volume: %q", out)
	}
	if got := e.read(b.ID, providers.ReadFileRequest{Path: "/data/bin"}); !bytes.Equal(got, []byte{0, 1, 0xff}) {
		t.Errorf("binary file on the volume: %x", got)
	}
	if err := e.p.Terminate(e.ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	ro := e.create(providers.CreateSpec{Mounts: []providers.Mount{{Volume: "session-1", Path: "/data", ReadOnly: true}}})
	if r := e.exec(ro.ID, providers.ExecRequest{Shell: "cat /data/d/note; echo x > /data/new"}); r.stdout != "from-a\nmore\n" || r.ExitCode == 0 {
		t.Errorf("read-only mount: %+v %q", r.ExecResult, r.stdout)
	}
	if err := e.p.Terminate(e.ctx, ro.ID); err != nil {
		t.Fatal(err)
	}

	// An image volume counts the blocks its files and directories take:
	// two small files and a directory.
	got, err := e.p.GetVolume(e.ctx, "session-1")
	if err != nil || got.SizeBytes < int64(len("from-a\nmore\n")+3) || got.SizeBytes > 64<<10 || got.CapacityMB != 1024 {
		t.Errorf("GetVolume = %+v, %v", got, err)
	}
	vols, err := e.p.ListVolumes(e.ctx, map[string]string{providers.LabelSession: "1"})
	if err != nil || len(vols) != 1 || vols[0].Slug != "session-1" {
		t.Errorf("ListVolumes = %+v, %v", vols, err)
	}
	if vols, _ := e.p.ListVolumes(e.ctx, map[string]string{providers.LabelSession: "2"}); len(vols) != 0 {
		t.Errorf("ListVolumes with another label = %+v", vols)
	}
	for i := range 2 {
		if err := e.p.DeleteVolume(e.ctx, "session-1"); err != nil {
			t.Errorf("DeleteVolume #%d: %v", i+1, err)
		}
	}
	_, err = e.p.GetVolume(e.ctx, "session-1")
	wantCode(t, "GetVolume after delete", err, providers.NotFound)
	if names := dirNames(t, filepath.Join(e.dir, "volumes")); len(names) != 0 {
		t.Errorf("volumes dir after delete: %v", names)
	}

	for _, slug := range []string{"", "../x", "a/b", ".hidden", strings.Repeat("x", 129)} {
		_, err := e.p.CreateVolume(e.ctx, providers.VolumeSpec{Slug: slug})
		wantCode(t, "CreateVolume("+slug+")", err, providers.InvalidArgument)
	}
	_, err = e.p.Create(e.ctx, providers.CreateSpec{Mounts: []providers.Mount{{Volume: "no-such-volume"}}})
	wantCode(t, "mounting a missing volume", err, providers.NotFound)
	e.p.CreateVolume(e.ctx, providers.VolumeSpec{Slug: "v2"})
	for _, path := range []string{"relative", "/usr/local", "/proc", "/", "/opt/sandstep/snapshot", "/tmp"} {
		_, err = e.p.Create(e.ctx, providers.CreateSpec{Mounts: []providers.Mount{{Volume: "v2", Path: path}}})
		wantCode(t, "mount at "+path, err, providers.InvalidArgument)
	}
}

// snapshotSpec builds a tiny tool and data file into the snapshot.
func snapshotSpec(slug string) providers.SnapshotSpec {
	return providers.SnapshotSpec{
		Slug: slug,
		Setup: []string{
			"mkdir -p " + SnapshotPath + "/bin",
			`printf '#!/bin/sh\necho "tool says $GREETING"\n' > ` + SnapshotPath + "/bin/tool && chmod 700 " + SnapshotPath + "/bin/tool",
			"echo data > " + SnapshotPath + "/data.txt && chmod 600 " + SnapshotPath + "/data.txt",
		},
		Env:    map[string]string{"PATH": SnapshotPath + "/bin:$PATH", "GREETING": "hi"},
		Labels: map[string]string{"deps": "tool"},
	}
}

func TestSnapshotBuiltOnce(t *testing.T) {
	e := newEnv(t, nil)
	const n = 10
	snaps := make([]providers.Snapshot, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { snaps[i], errs[i] = e.p.EnsureSnapshot(e.ctx, snapshotSpec("deps-1")) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("EnsureSnapshot #%d: %v", i, errs[i])
		}
		if !snaps[i].CreatedAt.Equal(snaps[0].CreatedAt) {
			t.Errorf("EnsureSnapshot #%d returned another build (%s vs %s)", i, snaps[i].CreatedAt, snaps[0].CreatedAt)
		}
	}
	if b := e.p.builds.Load(); b != 1 {
		t.Errorf("%d concurrent EnsureSnapshot calls ran %d builds, want 1", n, b)
	}
	// Another plugin process on the same state_dir finds it built.
	p2 := e.newProvider()
	defer p2.Close()
	if s, err := p2.EnsureSnapshot(e.ctx, snapshotSpec("deps-1")); err != nil || !s.CreatedAt.Equal(snaps[0].CreatedAt) || p2.builds.Load() != 0 {
		t.Errorf("EnsureSnapshot in a second provider: %+v, %v, %d builds", s, err, p2.builds.Load())
	}
	got, err := e.p.GetSnapshot(e.ctx, "deps-1")
	if err != nil || got.Labels["deps"] != "tool" || got.SizeBytes == 0 {
		t.Errorf("GetSnapshot = %+v, %v", got, err)
	}
	if names := dirNames(t, filepath.Join(e.dir, "snapshots", "trees")); len(names) != 1 || !strings.HasPrefix(names[0], "deps-1@") {
		t.Errorf("snapshot trees: %v", names)
	}
	if list, _ := e.p.List(e.ctx, providers.ListFilter{}); len(list) != 0 {
		t.Errorf("builder sandboxes left running: %+v", list)
	}
}

func TestSnapshotUse(t *testing.T) {
	e := newEnv(t, nil)
	if _, err := e.p.EnsureSnapshot(e.ctx, snapshotSpec("deps-2")); err != nil {
		t.Fatal(err)
	}
	sb := e.create(providers.CreateSpec{Snapshot: "deps-2", Env: map[string]string{"GREETING": "hello"}})
	// The snapshot's env applies; the spec's env wins over it.
	if out := e.sh(sb.ID, "tool; cat "+SnapshotPath+"/data.txt; echo $PATH"); out != "tool says hello\ndata\n"+SnapshotPath+"/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/sandstep/tools\n" {
		t.Errorf("in a sandbox from the snapshot: %q", out)
	}
	for _, script := range []string{"touch " + SnapshotPath + "/new", "echo x >> " + SnapshotPath + "/data.txt", "rm " + SnapshotPath + "/bin/tool", "chmod 777 " + SnapshotPath + "/bin"} {
		if r := e.exec(sb.ID, providers.ExecRequest{Shell: script + " 2>/dev/null"}); r.ExitCode == 0 {
			t.Errorf("%q succeeded: the snapshot must be read-only", script)
		}
	}
	err := e.p.WriteFile(e.ctx, sb.ID, providers.WriteFileRequest{Path: SnapshotPath + "/data.txt", Content: strings.NewReader("x")})
	wantCode(t, "WriteFile into the snapshot", err, providers.PermissionDenied)
	plain := e.create(providers.CreateSpec{})
	if got := visible(e, plain.ID, SnapshotPath+"/data.txt"); got != "absent" {
		t.Errorf("a sandbox without a snapshot sees its files: %s", got)
	}
	_, err = e.p.Create(e.ctx, providers.CreateSpec{Snapshot: "no-such-snapshot"})
	wantCode(t, "Create from a missing snapshot", err, providers.NotFound)

	// Deleting a snapshot in use: the slug is gone at once, the sandbox
	// keeps the files until it ends.
	for i := range 2 {
		if err := e.p.DeleteSnapshot(e.ctx, "deps-2"); err != nil {
			t.Errorf("DeleteSnapshot #%d: %v", i+1, err)
		}
	}
	_, err = e.p.GetSnapshot(e.ctx, "deps-2")
	wantCode(t, "GetSnapshot after delete", err, providers.NotFound)
	_, err = e.p.Create(e.ctx, providers.CreateSpec{Snapshot: "deps-2"})
	wantCode(t, "Create from a deleted snapshot", err, providers.NotFound)
	if out := e.sh(sb.ID, "tool"); out != "tool says hello\n" {
		t.Errorf("after the snapshot was deleted its sandbox runs tool: %q", out)
	}
	trees := filepath.Join(e.dir, "snapshots", "trees")
	if names := dirNames(t, trees); len(names) != 1 {
		t.Errorf("while its sandbox runs, the deleted snapshot's tree should stay: %v", names)
	}
	// Rebuilt under the same slug while the old tree is still in use.
	if _, err := e.p.EnsureSnapshot(e.ctx, snapshotSpec("deps-2")); err != nil {
		t.Fatal(err)
	}
	if err := e.p.Terminate(e.ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if names := dirNames(t, trees); len(names) != 1 {
		t.Errorf("after its last sandbox ended, the deleted tree should be gone and the new one stay: %v", names)
	}
	if err := e.p.DeleteSnapshot(e.ctx, "deps-2"); err != nil {
		t.Fatal(err)
	}
	if names := dirNames(t, trees); len(names) != 0 {
		t.Errorf("an unused deleted snapshot left its tree: %v", names)
	}
}

func TestSnapshotBuildFailure(t *testing.T) {
	e := newEnv(t, nil)
	spec := providers.SnapshotSpec{Slug: "broken", Setup: []string{"echo partial > " + SnapshotPath + "/f", "echo 'it broke' >&2; exit 3", "echo never"}}
	_, err := e.p.EnsureSnapshot(e.ctx, spec)
	wantCode(t, "EnsureSnapshot with a failing command", err, providers.FailedPrecondition)
	if err == nil || !strings.Contains(err.Error(), "it broke") || !strings.Contains(err.Error(), "exited with 3") {
		t.Errorf("the error does not tell what failed: %v", err)
	}
	_, err = e.p.GetSnapshot(e.ctx, "broken")
	wantCode(t, "GetSnapshot after a failed build", err, providers.NotFound)
	if names := dirNames(t, filepath.Join(e.dir, "snapshots", "trees")); len(names) != 0 {
		t.Errorf("a failed build left %v", names)
	}
	if list, _ := e.p.List(e.ctx, providers.ListFilter{}); len(list) != 0 {
		t.Errorf("builder sandboxes left running: %+v", list)
	}

	spec = providers.SnapshotSpec{Slug: "slow", Setup: []string{"sleep 60"}, Timeout: time.Second}
	_, err = e.p.EnsureSnapshot(e.ctx, spec)
	wantCode(t, "EnsureSnapshot that times out", err, providers.DeadlineExceeded)
	if names := dirNames(t, filepath.Join(e.dir, "snapshots", "trees")); len(names) != 0 {
		t.Errorf("a timed-out build left %v", names)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "snapshots", "slow.json")); !os.IsNotExist(err) {
		t.Errorf("a timed-out build left its snapshot: %v", err)
	}
}
