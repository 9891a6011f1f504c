package conformance

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandstep/sandstep/providers"
)

// snapshotDir is where setup commands put what sandboxes booted from the
// snapshot must see.
func (f *fix) snapshotDir() string {
	if d := f.e.opts.SnapshotDir; d != "" {
		return d
	}
	return DefaultSnapshotDir
}

func caseSnapshots(t T, p providers.Provider) {
	f := newFix(t, p)
	dir := f.snapshotDir()
	slug := f.unique("snap")
	f.deleteSnapshotLater(slug)

	// Each build appends a line to a file in the snapshot and, where the
	// builder can reach the fixture, visits it: two builds would show as
	// two lines or two visits.
	fx := f.e.opts.Fixture
	buildToken := f.unique("build")
	setup := []string{
		fmt.Sprintf("mkdir -p %[1]s/bin && echo built >> %[1]s/builds.txt", dir),
		fmt.Sprintf(`printf '#!/bin/sh\necho "tool ran with $CF_SNAP_ENV"\n' > %[1]s/bin/cf-tool && chmod 755 %[1]s/bin/cf-tool`, dir),
	}
	if fx != nil {
		setup = append(setup, fetchScript("http://"+fx.Listed+"/"+buildToken))
	}
	spec := providers.SnapshotSpec{
		Slug:    slug,
		Setup:   setup,
		Env:     map[string]string{"CF_SNAP_ENV": "from-snapshot", "PATH": dir + "/bin:/usr/local/bin:/usr/bin:/bin"},
		Labels:  f.labels(),
		Timeout: f.e.scale(2 * time.Minute),
	}
	var (
		wg    sync.WaitGroup
		snaps [2]providers.Snapshot
		errs  [2]error
	)
	for i := range snaps {
		wg.Go(func() { snaps[i], errs[i] = p.EnsureSnapshot(f.ctx, spec) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent EnsureSnapshot #%d: %v", i+1, err)
		}
	}
	if snaps[0].Slug != slug || snaps[1].Slug != slug {
		t.Errorf("EnsureSnapshot returned slugs %q and %q, want %q", snaps[0].Slug, snaps[1].Slug, slug)
	}
	if !snaps[0].CreatedAt.Equal(snaps[1].CreatedAt) {
		t.Errorf("concurrent EnsureSnapshot calls returned different snapshots (created %s and %s)", snaps[0].CreatedAt, snaps[1].CreatedAt)
	}
	if fx != nil {
		switch n := fx.visitsOf("listed", buildToken); n {
		case 1:
		case 0:
			t.Logf("the snapshot builder could not reach the host; builds counted from the snapshot's contents only")
		default:
			t.Errorf("concurrent EnsureSnapshot calls for one slug ran the setup %d times", n)
		}
	}
	// Once built, a snapshot is not built again.
	if _, err := p.EnsureSnapshot(f.ctx, spec); err != nil {
		t.Fatalf("EnsureSnapshot of an existing snapshot: %v", err)
	}

	got, err := p.GetSnapshot(f.ctx, slug)
	if err != nil {
		t.Fatalf("GetSnapshot: %v", err)
	}
	if got.Slug != slug || !got.CreatedAt.Equal(snaps[0].CreatedAt) {
		t.Errorf("GetSnapshot = %+v, want the snapshot EnsureSnapshot returned (%+v)", got, snaps[0])
	}
	for k, v := range f.labels() {
		if got.Labels[k] != v {
			t.Errorf("GetSnapshot: label %s = %q, want %q", k, got.Labels[k], v)
		}
	}

	sb := f.create(providers.CreateSpec{Snapshot: slug})
	if sb.Snapshot != slug {
		t.Errorf("Create: Sandbox.Snapshot = %q, want %q", sb.Snapshot, slug)
	}
	if out := f.sh(sb.ID, "cat "+dir+"/builds.txt"); out != "built\n" {
		t.Errorf("the snapshot's setup ran %d times (builds.txt: %q), want once", strings.Count(out, "built"), out)
	}
	if r := f.exec(sb.ID, providers.ExecRequest{Argv: []string{"cf-tool"}}); r.Stdout != "tool ran with from-snapshot\n" {
		t.Errorf("the snapshot's env (PATH, CF_SNAP_ENV) is not applied: cf-tool printed %q (exit %d, stderr %s)", r.Stdout, r.ExitCode, clip(r.Stderr))
	}
	// A sandbox booted from a snapshot still has its own writable
	// workspace.
	if out := f.sh(sb.ID, "echo w > "+workspace+"/w && cat "+workspace+"/w"); out != "w\n" {
		t.Errorf("workspace of a sandbox booted from a snapshot: %q", out)
	}
	plain := f.sandbox()
	if out := f.sh(plain.ID, "test -e "+dir+"/builds.txt && echo present || echo absent"); out != "absent\n" {
		t.Errorf("a sandbox not booted from the snapshot sees its files: %q", out)
	}

	// Deleting is the subject of snapshot-delete-in-use; here no sandbox
	// uses the snapshot any more.
	for _, id := range []string{sb.ID, plain.ID} {
		if err := p.Terminate(f.ctx, id); err != nil {
			t.Fatalf("Terminate: %v", err)
		}
	}
	for i := range 2 {
		if err := p.DeleteSnapshot(f.ctx, slug); err != nil {
			t.Errorf("DeleteSnapshot #%d: %v", i+1, err)
		}
	}
	_, err = p.GetSnapshot(f.ctx, slug)
	f.wantCode("GetSnapshot after DeleteSnapshot", err, providers.NotFound)
	_, err = f.tryCreate(providers.CreateSpec{Snapshot: slug})
	f.wantCode("Create from a deleted snapshot", err, providers.NotFound)

	for _, bad := range []string{"", "../escape", "a/b"} {
		_, err := p.EnsureSnapshot(f.ctx, providers.SnapshotSpec{Slug: bad, Setup: []string{"true"}, Labels: f.labels()})
		f.wantCode("EnsureSnapshot with slug "+strconv.Quote(bad), err, providers.InvalidArgument)
		if err == nil {
			f.deleteSnapshotLater(bad)
		}
	}
}

func caseSnapshotFailedSetup(t T, p providers.Provider) {
	f := newFix(t, p)
	dir := f.snapshotDir()
	slug := f.unique("snap")
	f.deleteSnapshotLater(slug)
	_, err := p.EnsureSnapshot(f.ctx, providers.SnapshotSpec{
		Slug:    slug,
		Setup:   []string{"mkdir -p " + dir + " && echo partial > " + dir + "/partial", "echo cf-failing-step >&2; exit 7", "echo never > " + dir + "/never"},
		Labels:  f.labels(),
		Timeout: f.e.scale(2 * time.Minute),
	})
	f.wantCode("EnsureSnapshot whose setup fails", err, providers.FailedPrecondition)
	if err != nil && !strings.Contains(err.Error(), "cf-failing-step") {
		t.Errorf("the error of a failed setup does not carry the tail of its output: %v", err)
	}
	_, err = p.GetSnapshot(f.ctx, slug)
	f.wantCode("GetSnapshot after a failed build", err, providers.NotFound)
	_, err = f.tryCreate(providers.CreateSpec{Snapshot: slug})
	f.wantCode("Create from a snapshot whose build failed", err, providers.NotFound)
}

func caseSnapshotDeleteInUse(t T, p providers.Provider) {
	f := newFix(t, p)
	dir := f.snapshotDir()
	slug := f.unique("snap")
	f.deleteSnapshotLater(slug)
	_, err := p.EnsureSnapshot(f.ctx, providers.SnapshotSpec{
		Slug:    slug,
		Setup:   []string{fmt.Sprintf("mkdir -p %[1]s && echo kept > %[1]s/kept.txt", dir)},
		Labels:  f.labels(),
		Timeout: f.e.scale(2 * time.Minute),
	})
	if err != nil {
		t.Fatalf("EnsureSnapshot: %v", err)
	}
	sb := f.create(providers.CreateSpec{Snapshot: slug})
	// The protocol: sandboxes already booted from a snapshot keep running
	// when it is deleted, and keep its contents.
	if err := p.DeleteSnapshot(f.ctx, slug); err != nil {
		t.Fatalf("DeleteSnapshot while a sandbox booted from it runs: %v", err)
	}
	_, err = p.GetSnapshot(f.ctx, slug)
	f.wantCode("GetSnapshot after DeleteSnapshot", err, providers.NotFound)
	if out := f.sh(sb.ID, "cat "+dir+"/kept.txt"); out != "kept\n" {
		t.Errorf("a sandbox booted from a deleted snapshot lost its contents: %q", out)
	}
	_, err = f.tryCreate(providers.CreateSpec{Snapshot: slug})
	f.wantCode("Create from a deleted snapshot", err, providers.NotFound)
}

// caseSnapshotsList: ListSnapshots filters by every label given, returns
// each snapshot with its labels, and forgets a deleted snapshot at once.
// The snapshot cleanup of the host decides what to delete from this list.
func caseSnapshotsList(t T, p providers.Provider) {
	f := newFix(t, p)
	mine, other := f.unique("snap"), f.unique("snap")
	for _, slug := range []string{mine, other} {
		f.deleteSnapshotLater(slug)
		labels := f.labels()
		labels[labelKind] = slug
		if _, err := p.EnsureSnapshot(f.ctx, providers.SnapshotSpec{Slug: slug, Setup: []string{"true"}, Labels: labels}); err != nil {
			t.Fatalf("EnsureSnapshot(%s): %v", slug, err)
		}
	}
	list := func(sel map[string]string) []providers.Snapshot {
		t.Helper()
		snaps, err := p.ListSnapshots(f.ctx, sel)
		if err != nil {
			t.Fatalf("ListSnapshots(%v): %v", sel, err)
		}
		return snaps
	}
	run := map[string]string{labelRun: f.e.runID, labelCase: f.name}
	var all []string
	for _, s := range list(run) {
		all = append(all, s.Slug)
		if s.Labels[labelCase] != f.name || s.Labels[labelKind] != s.Slug {
			t.Errorf("ListSnapshots returned %s with labels %v, want the labels it was built with", s.Slug, s.Labels)
		}
	}
	slices.Sort(all)
	if want := []string{mine, other}; !slices.Equal(all, slices.Sorted(slices.Values(want))) {
		t.Errorf("ListSnapshots(run, case) = %v, want %v", all, want)
	}
	one := map[string]string{labelRun: f.e.runID, labelCase: f.name, labelKind: mine}
	if got := list(one); len(got) != 1 || got[0].Slug != mine {
		t.Errorf("ListSnapshots(with kind=%s) = %v, want only that snapshot", mine, got)
	}
	if err := p.DeleteSnapshot(f.ctx, mine); err != nil {
		t.Fatalf("DeleteSnapshot(%s): %v", mine, err)
	}
	if got := list(one); len(got) != 0 {
		t.Errorf("ListSnapshots after DeleteSnapshot = %v, want none", got)
	}
}
