package sandboxes_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/service/sandboxes"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/testhttp"
	"github.com/sandstep/sandstep/providers"
)

func need(t *testing.T, tool, why string) {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing: %s", tool, why)
		}
		t.Skipf("%s is missing: %s", tool, why)
	}
}

// Closing a ledger entry records the sandbox's time for owners that are
// not jobs (a job's Cleanup counts its own): once per entry, however
// often it is released; a sandbox that never ran records nothing.
func TestClosingAnEntryRecordsUsageOfSandboxesNoJobOwns(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	owners := map[string]sandboxes.Owner{
		"u-session": sandboxes.SessionOwner("s-1", "acme"),
		"u-direct":  sandboxes.TenantOwner("acme"),
		"u-child":   sandboxes.SandboxOwner("u-direct", "acme"),
		"u-job":     sandboxes.JobOwner("j-1", "acme"),
	}
	ids := map[string]string{}
	for name, o := range owners {
		ids[name] = e.acquire(t, o, name).ID
	}
	time.Sleep(20 * time.Millisecond)
	for name, o := range owners {
		for range 3 {
			if err := e.m.Release(ctx, o, sandboxes.Ref{Name: name, ID: ids[name]}, "done"); err != nil {
				t.Fatal(err)
			}
		}
	}
	recs, _, err := e.st.TenantSandboxUsageBetween(ctx, "acme", time.Now().Add(-time.Hour), time.Now().Add(time.Minute), 0)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, r := range recs {
		if _, dup := kinds[r.Name]; dup {
			t.Fatalf("%s recorded twice", r.Name)
		}
		kinds[r.Name] = r.OwnerKind
		ledger := e.entry(t, r.Name)
		if !r.RunningAt.Equal(ledger.RunningAt) || !r.TerminatedAt.Equal(ledger.TerminatedAt) || r.Seconds() <= 0 || r.Provider != "local" {
			t.Errorf("record %+v, ledger %+v", r, ledger)
		}
	}
	want := map[string]string{"u-session": "session", "u-direct": "tenant", "u-child": "sandbox"}
	if len(kinds) != len(want) || kinds["u-session"] != want["u-session"] || kinds["u-direct"] != want["u-direct"] || kinds["u-child"] != want["u-child"] {
		t.Fatalf("records by name %v, want %v (no job's)", kinds, want)
	}
}

// A sandbox's bytes out are what the provider measured when its owner
// terminated it, kept on its ledger entry and its usage record: exactly
// the bytes a server it talked to received. A provider that does not
// measure leaves them out (not 0).
func TestClosingAnEntryRecordsTheBytesOutTheServerReceived(t *testing.T) {
	need(t, "python3", "the sandbox sends its bytes with Python (Debian package python3)")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	counted := testhttp.Count(ln)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	})}
	go srv.Serve(counted)
	t.Cleanup(func() { srv.Close() })
	e := newEnvWith(t, fmt.Sprintf("[sandbox]\nnetwork = \"all\"\nallow_private = [%q]\n", ln.Addr().String()))
	ctx := ctxFor(t)
	// Through the sandbox's proxy: its NO_PROXY keeps 127.0.0.1 for the
	// sandbox's own loopback, and the host's loopback is reached through
	// the proxy (allow_private), so the command goes without it.
	send := fmt.Sprintf(`env -u NO_PROXY -u no_proxy python3 -c '
import urllib.request
for n in (50000, 70001):
    urllib.request.urlopen(urllib.request.Request("http://%s/upload", data=b"x" * n), timeout=30).read()
'`, ln.Addr().String())
	owner := sandboxes.TenantOwner("acme")
	sb := e.acquire(t, owner, "u-net")
	var stderr strings.Builder
	if res, err := e.prov.Exec(ctx, sb.ID, providers.ExecRequest{Shell: send, Stderr: &stderr}); err != nil || res.ExitCode != 0 {
		t.Fatalf("send: %+v %v %s", res, err, stderr.String())
	}
	if err := e.m.Release(ctx, owner, sandboxes.Ref{Name: "u-net", ID: sb.ID}, "done"); err != nil {
		t.Fatal(err)
	}
	got := counted.Received()
	if got < 120001 {
		t.Fatalf("the server received %d bytes, less than the bodies", got)
	}
	entry := e.entry(t, "u-net")
	if entry.BytesOut == nil || *entry.BytesOut != got {
		t.Fatalf("ledger bytes out %v, the server received %d", entry.BytesOut, got)
	}
	// A sandbox that sent nothing was measured all the same: 0, across
	// the plugin boundary.
	quiet := e.acquire(t, owner, "u-quiet")
	if err := e.m.Release(ctx, owner, sandboxes.Ref{Name: "u-quiet", ID: quiet.ID}, "done"); err != nil {
		t.Fatal(err)
	}
	if en := e.entry(t, "u-quiet"); en.BytesOut == nil || *en.BytesOut != 0 {
		t.Fatalf("a quiet sandbox's bytes out %v, want a measured 0", en.BytesOut)
	}
	// The same sandbox's traffic, from a provider that does not count it.
	e.prov.mu.Lock()
	e.prov.unmeasured = true
	e.prov.mu.Unlock()
	sb2 := e.acquire(t, owner, "u-unmeasured")
	if res, err := e.prov.Exec(ctx, sb2.ID, providers.ExecRequest{Shell: send}); err != nil || res.ExitCode != 0 {
		t.Fatalf("send: %+v %v", res, err)
	}
	if err := e.m.Release(ctx, owner, sandboxes.Ref{Name: "u-unmeasured", ID: sb2.ID}, "done"); err != nil {
		t.Fatal(err)
	}
	if en := e.entry(t, "u-unmeasured"); en.BytesOut != nil {
		t.Fatalf("unmeasured entry has bytes out %d", *en.BytesOut)
	}
	recs, _, err := e.st.TenantSandboxUsageBetween(ctx, "acme", time.Now().Add(-time.Hour), time.Now().Add(time.Minute), 0)
	if err != nil || len(recs) != 3 {
		t.Fatalf("records %+v %v", recs, err)
	}
	for _, r := range recs {
		switch r.Name {
		case "u-net":
			if r.BytesOut == nil || *r.BytesOut != got {
				t.Errorf("record of u-net: bytes out %v, the server received %d", r.BytesOut, got)
			}
		case "u-unmeasured":
			if r.BytesOut != nil {
				t.Errorf("record of u-unmeasured: bytes out %d", *r.BytesOut)
			}
		}
	}
}

// The sandboxes of a job that is not their owner (an agent run's sandbox
// and the children it starts) count in the job only: their entries write
// no usage record of their own, and TreeUsage counts each of them once,
// from the ledger, with the execs counted on them; a sandbox of the tree
// that names no job is left to its own record. Every sandbox counts
// exactly once.
func TestAJobsSandboxesCountInTheJobOnly(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	const job = "acme#run-1"
	owner := sandboxes.TenantOwner("acme")
	acquire := func(o sandboxes.Owner, name, job string) providers.Sandbox {
		lease, err := e.m.Acquire(ctx, sandboxes.Request{Owner: o, Spec: spec(name, 10*time.Minute), Job: job})
		if err != nil {
			t.Fatalf("acquire %s: %v", name, err)
		}
		t.Cleanup(func() { _ = e.prov.Provider.Terminate(context.Background(), lease.Sandbox.ID) })
		return lease.Sandbox
	}
	acquire(owner, "t-run", job)
	acquire(sandboxes.SandboxOwner("t-run", "acme"), "t-child", job)
	acquire(sandboxes.SandboxOwner("t-child", "acme"), "t-grandchild", job)
	acquire(sandboxes.SandboxOwner("t-run", "acme"), "t-own", "")
	acquire(owner, "t-other", "")
	for name, n := range map[string]int{"t-run": 2, "t-child": 1, "t-own": 4} {
		for range n {
			if err := e.m.CountExec(ctx, name); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(20 * time.Millisecond)
	if _, err := e.m.ReleaseTree(ctx, owner, "t-run", "done"); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Release(ctx, owner, sandboxes.Ref{Name: "t-other"}, "done"); err != nil {
		t.Fatal(err)
	}
	u, err := e.m.TreeUsage(ctx, "t-run", job)
	if err != nil {
		t.Fatal(err)
	}
	var want float64
	for _, name := range []string{"t-run", "t-child", "t-grandchild"} {
		en := e.entry(t, name)
		if en.Job != job || en.State != store.LedgerTerminated {
			t.Fatalf("entry %s: %+v", name, en)
		}
		want += en.TerminatedAt.Sub(en.RunningAt).Seconds()
	}
	if got := u.SandboxSeconds["local/0"]; len(u.SandboxSeconds) != 1 || math.Abs(got-want) > 1e-9 || u.Execs != 3 {
		t.Fatalf("tree usage %+v, the ledger says %.3f s and 3 execs", u, want)
	}
	recs, _, err := e.st.TenantSandboxUsageBetween(ctx, "acme", time.Now().Add(-time.Hour), time.Now().Add(time.Minute), 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range recs {
		names = append(names, r.Name)
		if r.Name == "t-own" && r.Execs != 4 {
			t.Errorf("t-own's record has %d execs, want 4", r.Execs)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"t-other", "t-own"}) {
		t.Fatalf("records of %v, want only the sandboxes no job accounts for", names)
	}
	// Released again (a retried cleanup, a reaper pass): still none.
	if _, err := e.m.ReleaseTree(ctx, owner, "t-run", "again"); err != nil {
		t.Fatal(err)
	}
	if again, _, _ := e.st.TenantSandboxUsageBetween(ctx, "acme", time.Now().Add(-time.Hour), time.Now().Add(time.Minute), 0); len(again) != 2 {
		t.Fatalf("records after a second release: %+v", again)
	}
}
