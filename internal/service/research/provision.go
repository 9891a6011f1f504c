package research

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/providers"
)

// ProvisionOutput says whether the job has a sandbox; without one the state
// machine goes straight to the report, built from the search snippets.
type ProvisionOutput struct {
	OK        bool   `json:"ok"`
	SandboxID string `json:"sandbox_id,omitempty"`
	Fallback  string `json:"fallback,omitempty"`
}

// Fallbacks a job records when it degrades.
const (
	FallbackSnippets         = "snippets"          // no sandbox or no crawl output: the search snippets
	FallbackSearchIncomplete = "search_incomplete" // some queries failed on every backend: the others' sources
	FallbackHTTPMode         = "http_mode"         // no browser in the sandbox: pages fetched over HTTP
	FallbackPartialCrawl     = "partial_crawl"     // the crawler ran out of time: what it collected
	FallbackChunkedRead      = "chunked_read"      // the output file came back truncated: re-read in chunks
	FallbackRawExtracts      = "raw_extracts"      // the summarizing agent failed: the pages' own text
	FallbackExtractive       = "extractive_report" // no model answered: a report built from the sources
)

// Where the crawler is found in a sandbox: mounted by providers that can
// (the local provider's tools_dir), else uploaded.
const (
	mountedCrawler  = "/opt/sandstep/tools/sandstep-crawler"
	uploadedCrawler = "/tmp/sandstep-tools/sandstep-crawler"
)

// Provision creates the job's sandbox (named after the job, recorded in the
// ledger first), warms it up, delivers the crawler and checks for a browser.
func (p *Phases) Provision(ctx context.Context, in Input) (ProvisionOutput, error) {
	r, err := p.begin(ctx, "provision", in)
	if err != nil {
		return ProvisionOutput{}, err
	}
	out, err := r.provision()
	return out, r.end(err)
}

func (r *run) provision() (ProvisionOutput, error) {
	b, err := r.budget()
	if err != nil {
		return ProvisionOutput{}, err
	}
	if err := r.step(store.StepSandbox, store.StepRunning, 0, 0); err != nil {
		return ProvisionOutput{}, err
	}
	// The sandbox outlives the crawl's own limit by enough to read its
	// output, summarize and clean up; the provider ends it past that.
	lifetime := max(r.p.Config.Sandbox.Lifetime.D(), b.Duration+15*time.Minute)
	sb, err := r.ensureSandbox(providers.CreateSpec{
		// Named after the job's key, which carries its tenant; the
		// labels carry the readable tenant and id, as a session's do.
		Name: r.job.ID,
		Labels: map[string]string{
			providers.LabelOwner:  "sandstep",
			providers.LabelTenant: r.job.Tenant,
			providers.LabelJob:    r.job.ClientID,
		},
		Network:     providers.NetworkPolicy{Mode: providers.NetworkAll},
		Secrets:     r.agentSecrets(),
		Lifetime:    lifetime,
		Resources:   providers.Resources{MemoryMB: r.p.Config.Sandbox.MemoryMB},
		Priority:    1,
		Preemptible: false,
	})
	if err == nil {
		_, err = r.p.Store.UpdateJob(r.ctx, r.job.ID, store.JobUpdate{SandboxID: &sb.ID})
		if err == nil {
			err = r.event("provision:created", EventData{Stage: string(store.StepSandbox), Status: "complete", Message: "sandbox " + sb.ID + " created"})
		}
		if err == nil {
			err = r.step(store.StepSandbox, store.StepComplete, 0, 0)
		}
		if err == nil {
			if err = r.step(store.StepSetup, store.StepRunning, 0, 0); err == nil {
				err = r.warmup(sb.ID)
			}
		}
		if err == nil {
			err = r.deliverCrawler(sb.ID)
		}
	}
	if err != nil {
		if cerr := r.checkCancel(); cerr != nil {
			return ProvisionOutput{}, cerr
		}
		var jc *JobCancelled
		if errors.As(err, &jc) {
			return ProvisionOutput{}, err
		}
		// No usable sandbox: the job goes on with the search snippets. The
		// sandbox, if one was made, is terminated by Cleanup.
		r.log.Warn("no sandbox, falling back to snippets", "err", err)
		if serr := r.step(store.StepSandbox, store.StepError, 0, 0); serr != nil {
			return ProvisionOutput{}, serr
		}
		if ferr := r.fallback(FallbackSnippets, string(store.StepSandbox), "no sandbox ("+err.Error()+"): the report is built from the search snippets"); ferr != nil {
			return ProvisionOutput{}, ferr
		}
		return ProvisionOutput{OK: false, Fallback: FallbackSnippets}, nil
	}
	if err := r.step(store.StepSetup, store.StepComplete, 0, 0); err != nil {
		return ProvisionOutput{}, err
	}
	if err := r.checkBrowser(sb.ID); err != nil {
		return ProvisionOutput{}, err
	}
	return ProvisionOutput{OK: true, SandboxID: sb.ID}, nil
}

// deliverCrawler makes the crawler runnable in the sandbox the cheapest way
// the provider allows: already mounted, or uploaded from the host.
func (r *run) deliverCrawler(id string) error {
	start := time.Now()
	res, err := r.exec(id, providers.ExecRequest{Argv: []string{"test", "-x", mountedCrawler}, Timeout: 30 * time.Second})
	if err != nil {
		return fmt.Errorf("look for the crawler: %w", err)
	}
	msg := fmt.Sprintf("crawler mounted at %s (checked in %d ms)", mountedCrawler, time.Since(start).Milliseconds())
	if res.ExitCode != 0 {
		f, err := os.Open(r.p.CrawlerBinary)
		if err != nil {
			return fmt.Errorf("crawler binary on the host (make sandbox-tools builds it): %w", err)
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if err := r.p.Provider.WriteFile(r.ctx, id, providers.WriteFileRequest{Path: uploadedCrawler, Mode: 0o755, Content: f}); err != nil {
			return fmt.Errorf("upload the crawler: %w", err)
		}
		msg = fmt.Sprintf("crawler uploaded (%.1f MB in %d ms)", float64(fi.Size())/1e6, time.Since(start).Milliseconds())
	}
	return r.event("provision:crawler", EventData{Stage: string(store.StepSetup), Status: "complete", Message: msg})
}

// checkBrowser looks for a headless browser in the sandbox; without one the
// crawler fetches pages over plain HTTP.
func (r *run) checkBrowser(id string) error {
	if err := r.step(store.StepBrowser, store.StepRunning, 0, 0); err != nil {
		return err
	}
	var out bytes.Buffer
	res, err := r.exec(id, providers.ExecRequest{
		Shell:   "command -v chromium || command -v chromium-browser || command -v google-chrome || true",
		Stdout:  &out,
		Timeout: 30 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("check browser: %w", err)
	}
	path := strings.TrimSpace(out.String())
	if res.ExitCode != 0 || path == "" || r.p.Config.Research.Render == "never" {
		why := "no browser in the sandbox"
		if r.p.Config.Research.Render == "never" {
			why = "rendering is off (research.render = never)"
		}
		if err := r.fallback(FallbackHTTPMode, string(store.StepBrowser), why+": pages are fetched over HTTP"); err != nil {
			return err
		}
	} else if err := r.event("provision:browser", EventData{Stage: string(store.StepBrowser), Status: "complete", Message: "browser found at " + path}); err != nil {
		return err
	}
	return r.step(store.StepBrowser, store.StepComplete, 0, 0)
}

// agentSecrets gives the summarizing agent its token when the sandbox is
// made, scoped to the host of [research.agent] base_url (Claude Code's own
// endpoint, api.anthropic.com, when that is empty). On a provider with
// host-scoped secrets the sandbox, and the pages its browser runs, only
// ever see a placeholder, which the provider's way out replaces in requests
// to that host; elsewhere it is a plain environment variable, as a log
// line says.
func (r *run) agentSecrets() []providers.Secret {
	cfg := r.p.Config.Research.Agent
	if !cfg.Enabled || cfg.TokenEnv == "" {
		return nil
	}
	tok := os.Getenv(cfg.TokenEnv)
	if tok == "" {
		return nil
	}
	host := defaultAgentHost
	if u, err := url.Parse(cfg.BaseURL); err == nil && u.Host != "" {
		host = u.Host
	}
	if info, err := r.p.Provider.Info(r.ctx); err == nil && !info.Capabilities.HostScopedSecrets {
		r.log.Warn("the provider cannot scope secrets to hosts: the agent's token is a plain environment variable in the sandbox", "provider", info.Name)
	}
	var out []providers.Secret
	for _, name := range agentTokenVars {
		out = append(out, providers.Secret{Name: name, Value: tok, Hosts: []string{host}})
	}
	return out
}

// The agent's token reaches Claude Code under both names it reads;
// defaultAgentHost is where it sends them without ANTHROPIC_BASE_URL.
var agentTokenVars = []string{"ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY"}

const defaultAgentHost = "api.anthropic.com"
