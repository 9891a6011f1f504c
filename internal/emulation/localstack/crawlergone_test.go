package localstack_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/lambda/messages"

	"github.com/sandstep/sandstep/internal/emulation/asl"
	"github.com/sandstep/sandstep/internal/emulation/localexec"
	"github.com/sandstep/sandstep/internal/service/research"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/fixturesite"
	"github.com/sandstep/sandstep/providers"
)

// A provider ends an exec's whole process tree when its caller goes away,
// so a plugin or server that dies while Crawl starts the crawler leaves
// the crawler's start marker and no crawler. The next Crawl must not wait
// for it until the job's timeout: it starts the crawler again.
func TestCrawlStartsAgainACrawlerKilledWithItsExec(t *testing.T) {
	site := fixturesite.Start(t, fixturesite.Options{Hosts: 1})
	var s *stack
	var faked atomic.Bool
	wrap := func(next asl.Invoker) asl.Invoker {
		return invokerFunc(func(ctx context.Context, arn string, payload []byte) ([]byte, error) {
			if arn != localexec.LocalARN("CrawlFunction") || !faked.CompareAndSwap(false, true) {
				return next.Invoke(ctx, arn, payload)
			}
			// What the killed start leaves: the marker, no pid, no crawler.
			var in research.CrawlInput
			json.Unmarshal(payload, &in)
			res, err := s.Provider.Exec(ctx, in.SandboxID, providers.ExecRequest{Shell: "mkdir -p /tmp/sandstep-crawl && date +%s > /tmp/sandstep-crawl/started"})
			if err != nil || res.ExitCode != 0 {
				t.Errorf("faking the start: %+v %v", res, err)
			}
			return nil, messages.InvokeResponse_Error{Type: "Lambda.ServiceException", Message: "the host died"}
		})
	}
	s = newStackWith(t, stackOpts{wrap: wrap, config: "[research]\nrender = \"never\"\n", allowPrivate: site.AllowPrivate()})
	job := s.research(t, "job-crawler-gone", "light", "speed", []string{site.Hosts[0].Page("/a")})
	if !faked.Load() {
		t.Fatal("Crawl never ran")
	}
	if fb := fallbacks(job); slices.Contains(fb, research.FallbackSnippets) {
		t.Errorf("the job fell back to snippets: %v", fb)
	}
	crawled := 0
	for _, src := range s.sources(t, "job-crawler-gone") {
		if src.Origin == store.OriginCrawl {
			crawled++
		}
	}
	if crawled == 0 {
		t.Fatal("nothing was crawled")
	}
	s.noLiveSandboxes(t, "job-crawler-gone")
}

type invokerFunc func(ctx context.Context, arn string, payload []byte) ([]byte, error)

func (f invokerFunc) Invoke(ctx context.Context, arn string, payload []byte) ([]byte, error) {
	return f(ctx, arn, payload)
}
