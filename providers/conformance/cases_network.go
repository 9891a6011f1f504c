package conformance

import (
	"strings"

	"github.com/sandstep/sandstep/providers"
)

// probe runs probeScript in sandbox id and returns its verdict. A sandbox
// without any TCP client skips the case: nothing can be concluded.
func (f *fix) probe(id string, h *hostListener, token string) (connected bool) {
	f.t.Helper()
	out := strings.TrimSpace(f.sh(id, probeScript(h.port, token)))
	switch {
	case out == "no-client":
		f.t.Skipf("the sandbox has no TCP client (bash, python3, perl or curl) to test the network with")
	case strings.HasPrefix(out, "connected via "):
		return true
	case strings.HasPrefix(out, "blocked via "):
		return false
	}
	f.t.Fatalf("network probe printed %q", out)
	return false
}

// controlReach shows that a sandbox with full network reaches the host
// listener, so that a failed connection elsewhere means "blocked", not
// "this method cannot work here". Without the "all" mode it only logs.
func (f *fix) controlReach(h *hostListener) {
	f.t.Helper()
	if !f.caps().Supports(providers.NetworkAll) {
		f.t.Logf("no %q network mode: no control sandbox, a blocked connection is taken at its word", providers.NetworkAll)
		return
	}
	ctl := f.create(providers.CreateSpec{Network: providers.NetworkPolicy{Mode: providers.NetworkAll}})
	token := f.unique("ctl")
	if !f.probe(ctl.ID, h, token) || h.visits(token) != 1 {
		f.t.Fatalf("a sandbox with network %q cannot reach the listener on the host's 127.0.0.1:%d (visits %d); Options.HostReachable should be false for this provider", providers.NetworkAll, h.port, h.visits(token))
	}
}

func caseNetworkNone(t T, p providers.Provider) {
	f := newFix(t, p)
	h := f.hostListener()
	f.controlReach(h)
	sb := f.create(providers.CreateSpec{Network: providers.NetworkPolicy{Mode: providers.NetworkNone}})
	token := f.unique("none")
	if f.probe(sb.ID, h, token) || h.visits(token) != 0 {
		t.Errorf("a sandbox with network %q reached the host's 127.0.0.1:%d", providers.NetworkNone, h.port)
	}
}

func caseNetworkAllowlist(t T, p providers.Provider) {
	f := newFix(t, p)
	h := f.hostListener()
	f.controlReach(h)
	sb := f.create(providers.CreateSpec{Network: providers.NetworkPolicy{Mode: providers.NetworkAllowlist, AllowHosts: []string{"cf-only-this-host.invalid"}}})
	token := f.unique("allow")
	if f.probe(sb.ID, h, token) || h.visits(token) != 0 {
		t.Errorf("a sandbox whose allowlist holds only another host reached the host's 127.0.0.1:%d", h.port)
	}
}
