package localstack_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/emulation/asl"
	"github.com/sandstep/sandstep/internal/service/research"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/fakedeno"
	"github.com/sandstep/sandstep/internal/testkit/fakemodal"
	"github.com/sandstep/sandstep/internal/testkit/fakesandy"
	"github.com/sandstep/sandstep/internal/testkit/fixturesite"
)

// startFakeSandy runs the contract's fake Sandy on 127.0.0.1.
func startFakeSandy(t testing.TB) *fakesandy.Running {
	t.Helper()
	requireBwrap(t)
	fs, err := fakesandy.Start(fakesandy.Options{APIKey: sandyKey, Dir: t.TempDir()}, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	return fs
}

// denoToken is the organisation token of the fake Deno.
const denoToken = "ddo_localstack_test_0b7d2e"

// startFakeDeno runs the contract's fake Deno on 127.0.0.1.
func startFakeDeno(t testing.TB) *fakedeno.Running {
	t.Helper()
	requireBwrap(t)
	f, err := fakedeno.Start(fakedeno.Options{Token: denoToken, Dir: t.TempDir()}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// startFakeModal runs the fake Modal on 127.0.0.1; when the test ends no
// sandbox may be running on it.
func startFakeModal(t testing.TB) *fakemodal.Running {
	t.Helper()
	requireBwrap(t)
	fm, err := fakemodal.Start(fakemodal.Options{TokenID: modalTokenID, TokenSecret: modalTokenSecret, Dir: t.TempDir()}, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ids := fm.Sandboxes(); len(ids) > 0 {
			t.Errorf("sandboxes left running on the fake Modal: %v", ids)
		}
		fm.Close()
	})
	return fm
}

// The same deep-research job on every provider: the configurations differ
// in [provider] name alone.
func TestResearchOnEveryProvider(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{Hosts: 1})
	seeds := []string{site.Hosts[0].Page("/a"), site.Hosts[0].Page("/b")}
	for _, name := range []string{"local", "sandy", "deno", "modal"} {
		t.Run(name, func(t *testing.T) {
			o := stackOpts{provider: name, config: "[research]\nrender = \"never\"\n", allowPrivate: site.AllowPrivate()}
			var fake *fakesandy.Running
			fake = startFakeSandy(t)
			o.sandyURL = fake.URL
			if name == "deno" {
				o.deno = startFakeDeno(t)
			}
			if name == "modal" {
				o.modalURL = startFakeModal(t).URL
			}
			s := newStackWith(t, o)
			switch name {
			case "sandy":
				s.live = fake.Sandboxes
			case "deno":
				s.live = o.deno.Running
			}
			id := "job-on-" + name
			s.research(t, id, "light", "balanced", seeds)
			srcs := s.sources(t, id)
			crawled := 0
			for _, src := range srcs {
				if src.Origin == store.OriginCrawl {
					crawled++
				}
			}
			if crawled != len(seeds) {
				t.Errorf("%d pages crawled on %s, want %d", crawled, name, len(seeds))
			}
			md := s.reportMarkdown(t, id)
			citesOnly(t, md, srcs, store.OriginCrawl)
			evs := s.events(t, id)
			for _, secret := range []string{modalTokenID, modalTokenSecret, sandyKey} {
				if strings.Contains(md, secret) || strings.Contains(fmt.Sprint(evs), secret) {
					t.Errorf("a provider secret appears in the report or the events of the job on %s", name)
				}
			}
			var how string
			for _, e := range evs {
				if m := fmt.Sprint(e["message"]); strings.HasPrefix(m, "crawler ") && e["stage"] == "setup" {
					how = m
				}
			}
			t.Logf("%s: %s", name, how)
			if want := map[string]string{"local": "crawler mounted", "sandy": "crawler uploaded", "deno": "crawler uploaded", "modal": "crawler uploaded"}[name]; !strings.HasPrefix(how, want) {
				t.Errorf("crawler delivery on %s: %q, want %q", name, how, want)
			}
			s.noLiveSandboxes(t, id)
		})
	}
}

func TestPreemptedSandboxMidCrawlTakesTheFallback(t *testing.T) {
	// Slow pages keep the crawler busy long enough to lose its sandbox.
	site := fixturesite.Start(t, fixturesite.Options{Hosts: 1, Latency: 3 * time.Second})
	fake := startFakeSandy(t)
	id := "job-preempted"
	var s *stack
	seeds := []string{site.Hosts[0].Page("/a"), site.Hosts[0].Page("/b"), site.Hosts[0].Page("/c")}
	s = newStackWith(t, stackOpts{provider: "sandy", sandyURL: fake.URL, config: "[research]\nrender = \"never\"\n", searx: snippetSearx(t, seeds), allowPrivate: site.AllowPrivate(),
		wrap: func(inv asl.Invoker) asl.Invoker {
			return &phaseWrapper{inner: inv, fn: "CrawlFunction", before: func(ctx context.Context, n int) error {
				if n == 1 {
					go preemptWhenCrawling(t, s, fake.Preempt, id)
				}
				return nil
			}}
		}})
	s.live = fake.Sandboxes
	job := s.research(t, id, "light", "balanced", seeds)
	if fb := fallbacks(job); !slices.Contains(fb, research.FallbackSnippets) {
		t.Errorf("fallbacks %v, want %s", fb, research.FallbackSnippets)
	}
	citesOnly(t, s.reportMarkdown(t, id), s.sources(t, id), store.OriginSearch)
	s.noLiveSandboxes(t, id)
}

// TestStaleModalContainerMidCrawl: Modal removes the job's container while
// the crawler runs in it (router calls then answer NOT_FOUND, the stale
// container of the seed's deferred list); the job still ends with a
// report, and no sandbox is left running on the fake.
func TestStaleModalContainerMidCrawl(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{Hosts: 1, Latency: 3 * time.Second})
	fake := startFakeModal(t)
	id := "job-stale-modal"
	var s *stack
	seeds := []string{site.Hosts[0].Page("/a"), site.Hosts[0].Page("/b"), site.Hosts[0].Page("/c")}
	s = newStackWith(t, stackOpts{provider: "modal", modalURL: fake.URL, config: "[research]\nrender = \"never\"\n", searx: snippetSearx(t, seeds), allowPrivate: site.AllowPrivate(),
		wrap: func(inv asl.Invoker) asl.Invoker {
			return &phaseWrapper{inner: inv, fn: "CrawlFunction", before: func(ctx context.Context, n int) error {
				if n == 1 {
					go preemptWhenCrawling(t, s, fake.Vanish, id)
				}
				return nil
			}}
		}})
	// Never two live sandboxes for the job: the fake's running ones are
	// sampled for the whole job (it is the fake's only job).
	most := make(chan int, 1)
	stop := make(chan struct{})
	go func() {
		n := 0
		for {
			n = max(n, len(fake.Sandboxes()))
			select {
			case <-stop:
				most <- n
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	job := s.research(t, id, "light", "balanced", seeds)
	close(stop)
	switch n := <-most; {
	case n > 1:
		t.Errorf("%d sandboxes ran at once for one job", n)
	case n == 0:
		t.Errorf("the sampling never saw the job's sandbox")
	}
	t.Logf("fallbacks: %v", fallbacks(job))
	if len(fallbacks(job)) == 0 {
		t.Errorf("no fallback recorded after the container vanished")
	}
	if md := s.reportMarkdown(t, id); strings.TrimSpace(md) == "" {
		t.Error("no report")
	}
	s.noLiveSandboxes(t, id)
}

// preemptWhenCrawling makes the fake drop the job's sandbox once the
// crawler runs in it, as Sandy does under memory pressure.
func preemptWhenCrawling(t *testing.T, s *stack, drop func(string) bool, id string) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		job, err := s.st.GetJob(context.Background(), devKey(id))
		evs, _ := s.st.ListEvents(context.Background(), devKey(id), 0, 1000)
		started := slices.ContainsFunc(evs, func(e store.Event) bool { return strings.Contains(string(e.Data), "crawler started") })
		if err == nil && started && job.SandboxID != "" {
			if !drop(job.SandboxID) {
				t.Errorf("preempt %s: no such sandbox", job.SandboxID)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("the crawl never started")
}

// TestSameJobIDOneModalSandbox: two submits of one job id, at once, are one
// job on Modal: one sandbox made on the fake, a report, and nothing left
// running.
func TestSameJobIDOneModalSandbox(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{Hosts: 1})
	fake := startFakeModal(t)
	s := newStackWith(t, stackOpts{provider: "modal", modalURL: fake.URL, config: "[research]\nrender = \"never\"\n", allowPrivate: site.AllowPrivate()})
	id := "job-twice-modal"
	body := map[string]any{"query": "kestrel migration fixtures", "job_id": id, "mode": "light", "seed_urls": []string{site.Hosts[0].Page("/a")}}
	codes := make(chan int, 2)
	for range 2 {
		go func() {
			code, _ := s.do(t, "POST", "/v1/jobs", body)
			codes <- code
		}()
	}
	for range 2 {
		if code := <-codes; code != http.StatusAccepted && code != http.StatusOK {
			t.Errorf("submit: %d", code)
		}
	}
	if job := s.wait(t, id); job["status"] != "succeeded" {
		t.Fatalf("job: %v %v", job["status"], job["error"])
	}
	if st := fake.Stats(); st.Creates != 1 {
		t.Errorf("%d sandboxes made on the fake for one job id, want 1", st.Creates)
	}
	if md := s.reportMarkdown(t, id); strings.TrimSpace(md) == "" {
		t.Error("no report")
	}
	s.noLiveSandboxes(t, id)
}

// TestSessionOnModal: a run_code session on Modal, now that the provider
// has volumes and snapshots: the dependency snapshot is built once, the
// session's volume keeps /workspace from one run to the next, and deleting
// the session leaves nothing running on the fake.
func TestSessionOnModal(t *testing.T) {
	fake := startFakeModal(t)
	s := newStackWith(t, stackOpts{provider: "modal", modalURL: fake.URL, allowPrivate: []string{"127.0.0.1:1"}, config: "[sessions]\nenabled = true\n"})
	run := func(code string) map[string]any {
		t.Helper()
		status, out := s.do(t, "POST", "/v1/sessions/modal-s1/run", map[string]any{"code": code, "language": "shell"})
		if status != http.StatusOK || out["status"] != "succeeded" {
			t.Fatalf("session run %q: %d %v", code, status, out)
		}
		return out
	}
	run("echo kept > /workspace/note")
	if out := run("cat /workspace/note"); !strings.Contains(fmt.Sprint(out["stdout"]), "kept") {
		t.Errorf("the second run of the session reads %v", out["stdout"])
	}
	if code, out := s.do(t, "DELETE", "/v1/sessions/modal-s1", nil); code/100 != 2 {
		t.Fatalf("delete session: %d %v", code, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(fake.Sandboxes()) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if live := fake.Sandboxes(); len(live) > 0 {
		t.Errorf("running on the fake after the session ended: %v", live)
	}
}
