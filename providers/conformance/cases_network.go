package conformance

import (
	"github.com/sandstep/sandstep/providers"
)

// The network cases need Options.Fixture: servers on this machine's
// 127.0.0.1, one of them in the provider's allow_private. What they show,
// for every provider whose sandboxes run here: nothing reaches this
// machine's loopback directly; with "all" the listed fixture is reachable
// through the sandbox's way out and the unlisted one is not; "allowlist"
// admits exactly its hosts; "none" reaches nothing.

func caseNetworkNone(t T, p providers.Provider) {
	f := newFix(t, p)
	fx := f.e.opts.Fixture
	sb := f.create(providers.CreateSpec{Network: providers.NetworkPolicy{Mode: providers.NetworkNone}})
	token := f.unique("none")
	if got := f.direct(sb.ID, fx.Listed); got != "blocked" {
		t.Errorf("a sandbox with network none connected to this machine's %s", fx.Listed)
	}
	if got := f.fetch(sb.ID, "http://"+fx.Listed+"/"+token); got != "000" {
		t.Errorf("a sandbox with network none fetched http://%s: status %s", fx.Listed, got)
	}
	if n := fx.visitsOf("listed", token); n != 0 {
		t.Errorf("the fixture got %d visits from a sandbox with network none", n)
	}
}

func caseNetworkAll(t T, p providers.Provider) {
	f := newFix(t, p)
	fx := f.e.opts.Fixture
	sb := f.create(providers.CreateSpec{Network: providers.NetworkPolicy{Mode: providers.NetworkAll}})
	listed, unlisted, direct := f.unique("listed"), f.unique("unlisted"), f.unique("direct")
	if got := f.fetch(sb.ID, "http://"+fx.Listed+"/"+listed); got != "200" || fx.visitsOf("listed", listed) != 1 {
		t.Errorf("network all: the fixture in allow_private answered %s (visits %d), want 200 through the sandbox's way out", got, fx.visitsOf("listed", listed))
	}
	if got := f.fetch(sb.ID, "http://"+fx.Unlisted+"/"+unlisted); got == "200" || fx.visitsOf("unlisted", unlisted) != 0 {
		t.Errorf("network all: a service on this machine's loopback that allow_private does not list answered %s", got)
	}
	if got := f.direct(sb.ID, fx.Listed); got != "blocked" {
		t.Errorf("network all: a direct connection to this machine's %s succeeded: only the way out may reach it", fx.Listed)
	}
	if got := f.fetch(sb.ID, "http://169.254.169.254/latest/meta-data/"+direct); got == "200" {
		t.Errorf("network all: the metadata address answered %s", got)
	}
	if f.e.opts.FixtureDNS {
		name := f.unique("byname")
		if got := f.fetch(sb.ID, "http://unlisted."+FixtureDomain+":"+port(fx.Unlisted)+"/"+name); got == "200" || fx.visitsOf("unlisted", name) != 0 {
			t.Errorf("network all: a name that resolves to 127.0.0.1 reached the unlisted service (%s)", got)
		}
	}
}

func caseNetworkAllowlist(t T, p providers.Provider) {
	f := newFix(t, p)
	fx := f.e.opts.Fixture
	hosts := []string{fx.Listed}
	if f.e.opts.FixtureDNS {
		hosts = append(hosts, "exact."+FixtureDomain+":"+port(fx.Listed), "*.wild."+FixtureDomain)
	}
	sb := f.create(providers.CreateSpec{Network: providers.NetworkPolicy{Mode: providers.NetworkAllowlist, AllowHosts: hosts}})
	type probe struct {
		url, which string
		ok         bool
	}
	probes := []probe{
		{"http://" + fx.Listed, "listed", true},
		// The unlisted server is not in the allowlist (nor allow_private).
		{"http://" + fx.Unlisted, "unlisted", false},
	}
	if f.e.opts.FixtureDNS {
		lp, up := port(fx.Listed), port(fx.Unlisted)
		probes = append(probes,
			probe{"http://exact." + FixtureDomain + ":" + lp, "listed", true},
			probe{"http://a.wild." + FixtureDomain + ":" + lp, "listed", true},
			probe{"http://b.c.wild." + FixtureDomain + ":" + lp, "listed", true},
			// The wildcard is for subdomains, not the domain itself.
			probe{"http://wild." + FixtureDomain + ":" + lp, "listed", false},
			// Another name for the same address, and the listed name on
			// another port.
			probe{"http://other." + FixtureDomain + ":" + lp, "listed", false},
			probe{"http://exact." + FixtureDomain + ":" + up, "unlisted", false},
		)
	}
	for _, pr := range probes {
		token := f.unique("allow")
		got := f.fetch(sb.ID, pr.url+"/"+token)
		visited := fx.visitsOf(pr.which, token) == 1
		if pr.ok && (got != "200" || !visited) {
			t.Errorf("allowlist %v: %s answered %s (visited %v), want 200", hosts, pr.url, got, visited)
		}
		if !pr.ok && (got == "200" || visited) {
			t.Errorf("allowlist %v: %s answered %s (visited %v), want it refused", hosts, pr.url, got, visited)
		}
	}
}
