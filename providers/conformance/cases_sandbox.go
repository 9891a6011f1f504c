package conformance

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandstep/sandstep/providers"
)

const labelPick = "sandstep.conformance.pick"

func caseInfo(t T, p providers.Provider) {
	info, err := p.Info(t.Context())
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	if info.Name == "" {
		t.Errorf("Info.Name is empty")
	}
	if info.Version == "" {
		t.Errorf("Info.Version is empty")
	}
	if info.APIVersion != providers.APIVersion {
		t.Errorf("Info.APIVersion = %d, want %d", info.APIVersion, providers.APIVersion)
	}
	c := info.Capabilities
	for _, m := range c.NetworkModes {
		switch m {
		case providers.NetworkNone, providers.NetworkAll, providers.NetworkAllowlist:
		default:
			t.Errorf("Capabilities.NetworkModes has unknown mode %q", m)
		}
	}
	if c.MaxLifetime < 0 {
		t.Errorf("Capabilities.MaxLifetime = %s, want >= 0", c.MaxLifetime)
	}
	again, err := p.Info(t.Context())
	if err != nil {
		t.Fatalf("second Info: %v", err)
	}
	if again.Name != info.Name || again.Version != info.Version || again.APIVersion != info.APIVersion {
		t.Errorf("Info changed between calls: %+v then %+v", info, again)
	}
	t.Logf("%s %s (API %d): %+v", info.Name, info.Version, info.APIVersion, c)
}

func caseLifecycle(t T, p providers.Provider) {
	f := newFix(t, p)
	const lifetime = 10 * time.Minute
	name := f.unique("s")
	before := time.Now()
	sb := f.create(providers.CreateSpec{Name: name, Labels: map[string]string{labelPick: "x"}, Lifetime: lifetime})
	want := f.labels()
	want[labelPick] = "x"
	checkSandbox := func(what string, got providers.Sandbox) {
		t.Helper()
		if got.ID != sb.ID {
			t.Errorf("%s: ID %q, want %q", what, got.ID, sb.ID)
		}
		if got.State != providers.StateRunning {
			t.Errorf("%s: State %q, want %q", what, got.State, providers.StateRunning)
		}
		for k, v := range want {
			if got.Labels[k] != v {
				t.Errorf("%s: label %s = %q, want %q", what, k, got.Labels[k], v)
			}
		}
		if f.caps().NamedSandboxes && got.Name != name {
			t.Errorf("%s: Name %q, want %q", what, got.Name, name)
		}
	}
	if sb.ID == "" {
		t.Fatalf("Create returned an empty ID")
	}
	checkSandbox("Create", sb)
	// Clocks of remote backends may be off by a little; a wrong lifetime
	// is off by much more.
	const skew = 5 * time.Minute
	if sb.ExpiresAt.IsZero() {
		t.Errorf("Create: ExpiresAt is not set although Lifetime is %s", lifetime)
	} else if sb.ExpiresAt.Before(before.Add(-skew)) || sb.ExpiresAt.After(before.Add(lifetime+skew)) {
		t.Errorf("Create: ExpiresAt %s is not about %s after %s", sb.ExpiresAt, lifetime, before)
	}

	got, err := p.Get(f.ctx, sb.ID)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	checkSandbox("Get", got)

	// Create returns once the sandbox accepts Exec.
	if r := f.exec(sb.ID, providers.ExecRequest{Argv: []string{"true"}}); r.ExitCode != 0 {
		t.Errorf("first exec of true: exit %d; stderr: %s", r.ExitCode, clip(r.Stderr))
	}

	if err := p.Terminate(f.ctx, sb.ID); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	f.wantGone(sb.ID)
}

func caseListByLabels(t T, p providers.Provider) {
	f := newFix(t, p)
	a := f.create(providers.CreateSpec{Name: f.unique("s"), Labels: map[string]string{labelPick: "a"}})
	b := f.create(providers.CreateSpec{Name: f.unique("s"), Labels: map[string]string{labelPick: "b"}})
	sel := map[string]string{labelRun: f.e.runID, labelCase: f.name}
	with := func(k, v string) map[string]string {
		m := map[string]string{k: v}
		for k, v := range sel {
			m[k] = v
		}
		return m
	}
	list := func(what string, filter providers.ListFilter, want ...string) {
		t.Helper()
		sbs, err := p.List(f.ctx, filter)
		if err != nil {
			t.Fatalf("List(%s): %v", what, err)
		}
		var ids []string
		for _, sb := range sbs {
			ids = append(ids, sb.ID)
			for k, v := range filter.Labels {
				if sb.Labels[k] != v {
					t.Errorf("List(%s) returned %s whose label %s is %q, not %q", what, sb.ID, k, sb.Labels[k], v)
				}
			}
		}
		slices.Sort(ids)
		slices.Sort(want)
		if !slices.Equal(ids, want) {
			t.Errorf("List(%s) = %v, want %v", what, ids, want)
		}
	}

	list("case labels", providers.ListFilter{Labels: sel}, a.ID, b.ID)
	list("case labels + pick=a", providers.ListFilter{Labels: with(labelPick, "a")}, a.ID)
	list("a label value nobody has", providers.ListFilter{Labels: with(labelPick, "none")})
	if f.caps().NamedSandboxes {
		list("name of a", providers.ListFilter{Labels: sel, Name: a.Name}, a.ID)
	}
	if err := p.Terminate(f.ctx, b.ID); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	list("case labels after b is terminated", providers.ListFilter{Labels: sel}, a.ID)
}

func caseNameUnique(t T, p providers.Provider) {
	f := newFix(t, p)
	name := f.unique("s")
	a := f.create(providers.CreateSpec{Name: name})
	_, err := f.tryCreate(providers.CreateSpec{Name: name})
	f.wantCode("second Create with the same name", err, providers.AlreadyExists)
	if f.caps().ListByLabels {
		sbs, err := p.List(f.ctx, providers.ListFilter{Labels: map[string]string{labelRun: f.e.runID, labelCase: f.name}})
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if len(sbs) != 1 {
			t.Errorf("after a refused duplicate Create, List shows %d sandboxes, want 1", len(sbs))
		}
	}
	if err := p.Terminate(f.ctx, a.ID); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	// Names are unique among live sandboxes only.
	b, err := f.tryCreate(providers.CreateSpec{Name: name})
	if err != nil {
		t.Fatalf("Create with the name of a terminated sandbox: %v", err)
	}
	if b.ID == a.ID {
		t.Errorf("the new sandbox reuses the terminated one's ID %s", a.ID)
	}
}

func caseCreateInvalid(t T, p providers.Provider) {
	f := newFix(t, p)
	_, err := f.tryCreate(providers.CreateSpec{Network: providers.NetworkPolicy{Mode: "cf-bogus-mode"}})
	f.wantCode("Create with an unknown network mode", err, providers.InvalidArgument)
	if m := f.caps().MaxLifetime; m > 0 {
		_, err := f.tryCreate(providers.CreateSpec{Lifetime: m + time.Hour})
		f.wantCode("Create with a lifetime above MaxLifetime", err, providers.InvalidArgument)
	}
	if f.caps().Snapshots {
		_, err := f.tryCreate(providers.CreateSpec{Snapshot: "cf-" + f.e.runID + "-nosuchsnapshot"})
		f.wantCode("Create from a snapshot that does not exist", err, providers.NotFound)
	}
}

func caseTerminateTwice(t T, p providers.Provider) {
	f := newFix(t, p)
	sb := f.sandbox()
	for i := range 2 {
		if err := p.Terminate(f.ctx, sb.ID); err != nil {
			t.Errorf("Terminate #%d: %v", i+1, err)
		}
	}
	f.wantGone(sb.ID)
}

func caseAfterTerminate(t T, p providers.Provider) {
	f := newFix(t, p)
	sb := f.sandbox()
	f.writeFile(sb.ID, workspace+"/kept.txt", []byte("x"))
	if err := p.Terminate(f.ctx, sb.ID); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	// A provider may report a terminated sandbox for a while before it is
	// gone; calls into it then find it not running.
	checkGone(f, "terminated sandbox", sb.ID, providers.NotFound, providers.FailedPrecondition)
}

// checkGone checks that every call into sandbox id fails with one of
// codes; Get may instead report the sandbox as terminated when
// FailedPrecondition is among them.
func checkGone(f *fix, what, id string, codes ...providers.Code) {
	f.t.Helper()
	want := func(op string, err error) {
		f.t.Helper()
		if err == nil {
			f.t.Errorf("%s on %s %q: succeeded, want %v", op, what, id, codes)
		} else if c := providers.CodeOf(err); !slices.Contains(codes, c) {
			f.t.Errorf("%s on %s %q: code %s, want one of %v (error: %v)", op, what, id, c, codes, err)
		}
	}
	sb, err := f.p.Get(f.ctx, id)
	if err == nil && sb.State == providers.StateTerminated && slices.Contains(codes, providers.FailedPrecondition) {
		f.t.Logf("Get on %s %q reports state %q", what, id, sb.State)
	} else {
		want("Get", err)
	}
	_, err = f.p.Exec(f.ctx, id, providers.ExecRequest{Argv: []string{"true"}, Timeout: f.e.scale(30 * time.Second)})
	want("Exec", err)
	if !f.caps().FileAPI {
		return
	}
	_, err = f.p.ReadFile(f.ctx, id, providers.ReadFileRequest{Path: workspace + "/kept.txt"}, &strings.Builder{})
	want("ReadFile", err)
	err = f.p.WriteFile(f.ctx, id, providers.WriteFileRequest{Path: workspace + "/new.txt", Content: strings.NewReader("x")})
	want("WriteFile", err)
	_, err = f.p.ListFiles(f.ctx, id, workspace)
	want("ListFiles", err)
}

func caseUnknownIDs(t T, p providers.Provider) {
	f := newFix(t, p)
	unknown := "cf-" + f.e.runID + "-nosuchsandbox"
	checkGone(f, "unknown sandbox", unknown, providers.NotFound)
	if err := p.Terminate(f.ctx, unknown); err != nil {
		t.Errorf("Terminate of an unknown sandbox: %v (want success: Terminate is idempotent)", err)
	}
	// Identifiers may end up in paths or URLs; ones that would walk out of
	// place must be refused, never resolved. Terminate is left out: a
	// provider that got it wrong would destroy what other cases use.
	for _, id := range []string{"", ".", "..", "../..", "../../../etc", "a/../../b"} {
		checkGone(f, "malformed sandbox id", id, providers.NotFound, providers.InvalidArgument)
	}

	if f.caps().Snapshots {
		slug := "cf-" + f.e.runID + "-nosuchsnapshot"
		_, err := p.GetSnapshot(f.ctx, slug)
		f.wantCode("GetSnapshot of an unknown slug", err, providers.NotFound)
		if err := p.DeleteSnapshot(f.ctx, slug); err != nil {
			t.Errorf("DeleteSnapshot of an unknown slug: %v (want success)", err)
		}
	}
	if f.caps().Volumes {
		slug := "cf-" + f.e.runID + "-nosuchvolume"
		_, err := p.GetVolume(f.ctx, slug)
		f.wantCode("GetVolume of an unknown slug", err, providers.NotFound)
		if err := p.DeleteVolume(f.ctx, slug); err != nil {
			t.Errorf("DeleteVolume of an unknown slug: %v (want success)", err)
		}
	}
}

func caseUnsupported(t T, p providers.Provider) {
	f := newFix(t, p)
	checked := 0
	if !f.caps().Snapshots {
		checked++
		slug := f.unique("snap")
		f.deleteSnapshotLaterIfSupported(slug)
		_, err := p.EnsureSnapshot(f.ctx, providers.SnapshotSpec{Slug: slug, Setup: []string{"true"}, Labels: f.labels()})
		f.wantCode("EnsureSnapshot without the Snapshots capability", err, providers.Unsupported)
		_, err = p.GetSnapshot(f.ctx, slug)
		f.wantCode("GetSnapshot without the Snapshots capability", err, providers.Unsupported)
	}
	if !f.caps().ListSnapshots {
		checked++
		_, err := p.ListSnapshots(f.ctx, f.labels())
		f.wantCode("ListSnapshots without the ListSnapshots capability", err, providers.Unsupported)
	}
	if !f.caps().Volumes {
		checked++
		slug := f.unique("v")
		_, err := p.CreateVolume(f.ctx, providers.VolumeSpec{Slug: slug, Labels: f.labels()})
		f.wantCode("CreateVolume without the Volumes capability", err, providers.Unsupported)
		_, err = p.GetVolume(f.ctx, slug)
		f.wantCode("GetVolume without the Volumes capability", err, providers.Unsupported)
	}
	// A network policy the provider cannot enforce must be refused, never
	// quietly replaced by more network than asked for.
	for _, mode := range []providers.NetworkMode{providers.NetworkNone, providers.NetworkAll, providers.NetworkAllowlist} {
		if f.caps().Supports(mode) {
			continue
		}
		checked++
		pol := providers.NetworkPolicy{Mode: mode}
		if mode == providers.NetworkAllowlist {
			pol.AllowHosts = []string{"example.com"}
		}
		_, err := f.tryCreate(providers.CreateSpec{Network: pol})
		f.wantCode(fmt.Sprintf("Create with unsupported network mode %q", mode), err, providers.Unsupported)
	}
	if !f.caps().FileAPI {
		checked++
		sb := f.sandbox()
		err := p.WriteFile(f.ctx, sb.ID, providers.WriteFileRequest{Path: workspace + "/x", Content: strings.NewReader("x")})
		f.wantCode("WriteFile without the FileAPI capability", err, providers.Unsupported)
		_, err = p.ReadFile(f.ctx, sb.ID, providers.ReadFileRequest{Path: workspace + "/x"}, io.Discard)
		f.wantCode("ReadFile without the FileAPI capability", err, providers.Unsupported)
		_, err = p.ListFiles(f.ctx, sb.ID, workspace)
		f.wantCode("ListFiles without the FileAPI capability", err, providers.Unsupported)
	}
	if checked == 0 {
		t.Skipf("the provider claims every capability this case checks")
	}
}

// deleteSnapshotLaterIfSupported cleans up after a provider that wrongly
// built a snapshot it says it cannot build.
func (f *fix) deleteSnapshotLaterIfSupported(slug string) {
	f.t.Cleanup(func() {
		ctx, cancel := f.cleanupCtx()
		defer cancel()
		if err := f.p.DeleteSnapshot(ctx, slug); err != nil && !providers.IsUnsupported(err) {
			f.t.Errorf("cleanup: DeleteSnapshot(%s): %v", slug, err)
		}
	})
}

func caseConcurrency(t T, p providers.Provider) {
	f := newFix(t, p)
	const n = 20
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sb, err := f.tryCreate(providers.CreateSpec{Name: f.unique("s")})
			if err != nil {
				t.Errorf("sandbox %d: Create: %v", i, err)
				return
			}
			ids[i] = sb.ID
			r, err := f.tryExec(sb.ID, providers.ExecRequest{Shell: `echo "$((N * 2))"`, Env: map[string]string{"N": strconv.Itoa(i)}})
			if err != nil {
				t.Errorf("sandbox %d: Exec: %v", i, err)
			} else if got, want := strings.TrimSpace(r.Stdout), strconv.Itoa(2*i); r.ExitCode != 0 || got != want {
				t.Errorf("sandbox %d: exec printed %q (exit %d), want %q; stderr: %s", i, got, r.ExitCode, want, clip(r.Stderr))
			}
			if err := p.Terminate(f.ctx, sb.ID); err != nil {
				t.Errorf("sandbox %d: Terminate: %v", i, err)
			}
		})
	}
	wg.Wait()
	seen := map[string]int{}
	for i, id := range ids {
		if id == "" {
			continue
		}
		if j, ok := seen[id]; ok {
			t.Errorf("sandboxes %d and %d got the same ID %s", j, i, id)
		}
		seen[id] = i
	}
	if f.caps().ListByLabels {
		sbs, err := p.List(f.ctx, providers.ListFilter{Labels: map[string]string{labelRun: f.e.runID, labelCase: f.name}})
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		for _, sb := range sbs {
			t.Errorf("sandbox %s is still listed after Terminate", sb.ID)
		}
	}
}

// wantGone checks that Get no longer finds a terminated sandbox, or reports
// it as terminated (which the protocol allows for a while).
func (f *fix) wantGone(id string) {
	f.t.Helper()
	sb, err := f.p.Get(f.ctx, id)
	if err == nil && sb.State == providers.StateTerminated {
		return
	}
	f.wantCode("Get after Terminate", err, providers.NotFound)
}
