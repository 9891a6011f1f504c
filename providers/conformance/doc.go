// Package conformance is the test suite every sandstep sandbox provider must
// pass, and the harness that runs it for authors of third-party provider
// plugins.
//
// The suite talks to a providers.Provider. Run it through the real plugin
// boundary: start your plugin binary with providers/plugin.Start and hand
// the client to Run. Then what is tested is what sandstep will see: codes
// that survive gRPC, streams that are chunked, contexts that are cancelled
// across the process boundary.
//
// Cases are data (Cases): a name, a capability requirement and a function.
// Every capability your provider claims in Info is tested; cases for those
// it does not claim are skipped, and the "unsupported" case checks that
// those calls fail with code Unsupported. Each case creates its own
// sandboxes, volumes and snapshots, labelled with the run's id
// (Options.RunID) and the case's name, and removes them when it ends,
// whether it passed or not; a final "no-leaks" check lists what is left.
// Lifetimes are set on every sandbox, so even a crashed run cleans up after
// itself eventually.
//
// # In a third-party module
//
// Build the plugin in TestMain or beforehand, then:
//
//	package mine_test
//
//	import (
//		"context"
//		"testing"
//
//		"github.com/sandstep/sandstep/providers/conformance"
//		"github.com/sandstep/sandstep/providers/plugin"
//	)
//
//	func TestConformance(t *testing.T) {
//		p, err := plugin.Start(context.Background(), plugin.Options{
//			Path:     "bin/sandstep-provider-mine",
//			Settings: []byte(`{"base_url": "http://127.0.0.1:8080"}`),
//			Secrets:  map[string]string{"api_key": "test-key"},
//		})
//		if err != nil {
//			t.Fatal(err)
//		}
//		t.Cleanup(func() { p.Close() })
//		conformance.Run(t, p, conformance.Options{
//			TimeoutScale: 3,     // a remote backend is slower than a local one
//			Short:        testing.Short(),
//		})
//	}
//
// Without a binary, the same gRPC server and client run inside the test
// process through go-plugin's test connection:
//
//	p := plugintest.Connect(t, mine.New()) // providers/plugin/plugintest
//
// Options.Core runs only the cases that check the protocol itself
// (lifecycle, names, labels, codes, refusals, the file and volume APIs):
// what a provider under construction, or an in-memory one such as
// providers/providertest, passes first. minimal_test.go is a whole
// provider of a few dozen lines, embedding the providers.Unsupported
// types, that does.
//
// go test -run 'TestConformance/cases/exec-' runs a subset, as do
// Options.Only and Options.Skip (path.Match patterns over case names).
//
// Options that depend on where sandboxes run:
//   - Fixture (and FixtureDNS): for a provider whose sandboxes run on
//     this machine, start a Fixture before configuring the provider, list
//     Fixture.Listed in its allow_private (and Fixture.DNS as its resolver
//     where it has such a setting). The network cases reach it and are
//     skipped without it, since from a remote sandbox a refused connection
//     proves nothing.
//   - SnapshotDir: where snapshot setup commands write files that
//     sandboxes booted from the snapshot must see.
//
// The same cases run outside go test through RunAll, which is what
// `sandstep conformance --provider NAME` uses: each case in its own
// goroutine with a T whose Fatalf and Skipf end it the way *testing.T's
// do, one "PASS|FAIL|SKIP name (duration)" line per case, and a Summary.
//
// Writing a case: T is the subset of *testing.T a case uses. Call Fatalf
// and Skipf only from the case's own goroutine, as with *testing.T. A case
// must not depend on timing: it proves order by events (output that must
// arrive before a file the suite writes in reaction to it) and bounds every
// wait with its context.
package conformance
