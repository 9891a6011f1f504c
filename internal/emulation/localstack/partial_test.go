package localstack_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/emulation/asl"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/fixturesite"
)

// A job cancelled while its crawler runs keeps the pages the crawler had:
// Cleanup stops the crawler (which writes them out), stores them and writes
// a partial report of them, which the API serves marked partial instead of
// a 404.
func TestCancelledCrawlKeepsAPartialReport(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{Hosts: 2, SlowLatency: 5 * time.Minute})
	alpha, beta := site.Hosts[0], site.Hosts[1]
	fast := []string{alpha.Page("/a"), alpha.Page("/b"), beta.Page(fixturesite.PathStudy)}
	// Pages that do not answer within the crawler's page timeout keep the
	// crawl running after the fast ones are in.
	slow := []string{alpha.Page(fixturesite.PathSlow + "?n=1"), beta.Page(fixturesite.PathSlow + "?n=2")}
	s := newStackWith(t, stackOpts{allowPrivate: site.AllowPrivate(), config: "[research]\nrender = \"never\"\n"})
	code, out := s.do(t, "POST", "/v1/jobs", map[string]any{"query": "kestrel migration fixtures", "job_id": "job-partial", "seed_urls": append(fast, slow...)})
	if code != http.StatusAccepted {
		t.Fatalf("submit: %d %v", code, out)
	}
	// Cancel once the crawl has fetched the fast pages.
	deadline := time.Now().Add(time.Minute)
	for {
		_, job := s.do(t, "GET", "/v1/jobs/job-partial", nil)
		if crawlCurrent(job) >= len(fast) {
			break
		}
		if st := fmt.Sprint(job["status"]); st != "queued" && st != "running" || time.Now().After(deadline) {
			t.Fatalf("the crawl did not reach the fast pages: %v", job)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, out := s.do(t, "POST", "/v1/jobs/job-partial/cancel", nil); code != http.StatusAccepted {
		t.Fatalf("cancel: %d %v", code, out)
	}
	if job := s.wait(t, "job-partial"); job["status"] != "cancelled" {
		t.Fatalf("status %v, error %v", job["status"], job["error"])
	}
	s.noLiveSandboxes(t, "job-partial")

	code, rep := s.do(t, "GET", "/v1/jobs/job-partial/report", nil)
	if code != http.StatusOK {
		t.Fatalf("report of the cancelled job: %d %v", code, rep)
	}
	md := fmt.Sprint(rep["markdown"])
	if rep["partial"] != true || rep["complete"] != false || rep["status"] != "cancelled" ||
		!strings.HasPrefix(md, "> **Partial report.** The job was cancelled during crawl; this report is built from the 3 pages crawled by then") {
		t.Fatalf("report: partial %v complete %v status %v\n%s", rep["partial"], rep["complete"], rep["status"], md)
	}
	sources := s.sources(t, "job-partial")
	crawled := 0
	for _, src := range sources {
		if src.Origin == store.OriginCrawl {
			crawled++
			if !strings.Contains(strings.Join(fast, " "), src.URL) {
				t.Errorf("crawled source %s is not a fast page", src.URL)
			}
		}
	}
	if crawled != len(fast) {
		t.Errorf("%d crawled sources kept, want %d: %+v", crawled, len(fast), sources)
	}
	citesOnly(t, md, sources, store.OriginCrawl)
	if !hasEvent(s.events(t, "job-partial"), "finalize", "partial report written from the 3 pages crawled") {
		t.Error("no event tells of the partial report")
	}

	// A job cancelled before it crawled anything still has no report.
	s.submit(t, "job-nothing")
	if code, out := s.do(t, "POST", "/v1/jobs/job-nothing/cancel", nil); code != http.StatusAccepted {
		t.Fatalf("cancel: %d %v", code, out)
	}
	s.wait(t, "job-nothing")
	if code, rep := s.do(t, "GET", "/v1/jobs/job-nothing/report", nil); code != http.StatusNotFound {
		t.Errorf("report of a job that crawled nothing: %d %v", code, rep)
	}
}

// crawlCurrent is the crawl step's progress in a job's status.
func crawlCurrent(job map[string]any) int {
	steps, _ := job["steps"].([]any)
	for _, s := range steps {
		if st, _ := s.(map[string]any); st["id"] == "crawl" {
			n, _ := st["current"].(float64)
			return int(n)
		}
	}
	return 0
}

// A job that fails after its crawl keeps a partial report of the pages,
// saying why it failed.
func TestFailedJobKeepsAPartialReport(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{Hosts: 1})
	seeds := []string{site.Hosts[0].Page("/a"), site.Hosts[0].Page("/b")}
	s := newStackWith(t, stackOpts{allowPrivate: site.AllowPrivate(), config: "[research]\nrender = \"never\"\n",
		wrap: func(inv asl.Invoker) asl.Invoker {
			return &phaseWrapper{inner: inv, fn: "ReportFunction", before: func(context.Context, int) error {
				return &InjectedFailure{Phase: "Report"}
			}}
		}})
	code, out := s.do(t, "POST", "/v1/jobs", map[string]any{"query": "kestrel migration fixtures", "job_id": "job-failed", "seed_urls": seeds})
	if code != http.StatusAccepted {
		t.Fatalf("submit: %d %v", code, out)
	}
	if job := s.wait(t, "job-failed"); job["status"] != "failed" {
		t.Fatalf("status %v, error %v", job["status"], job["error"])
	}
	code, rep := s.do(t, "GET", "/v1/jobs/job-failed/report", nil)
	md := fmt.Sprint(rep["markdown"])
	if code != http.StatusOK || rep["partial"] != true || rep["complete"] != false ||
		!strings.HasPrefix(md, "> **Partial report.** The job failed (InjectedFailure: injected failure in Report); this report is built from the 2 pages crawled by then") {
		t.Fatalf("report: %d partial %v complete %v\n%s", code, rep["partial"], rep["complete"], md)
	}
	citesOnly(t, md, s.sources(t, "job-failed"), store.OriginCrawl)
	s.noLiveSandboxes(t, "job-failed")
}
