package research

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/service/urlnorm"
	"github.com/sandstep/sandstep/providers"
)

// SummarizeInput is the Summarize state's input.
type SummarizeInput struct {
	JobID     string `json:"job_id"`
	SandboxID string `json:"sandbox_id"`
}

// SummarizeOutput says whether summaries were produced.
type SummarizeOutput struct {
	OK        bool `json:"ok"`
	Summaries int  `json:"summaries"`
}

// The agent's files in the sandbox.
const (
	agentDir          = "/tmp/sandstep-agent"
	agentPromptFile   = agentDir + "/agent-prompt.txt"
	agentSystemPrompt = agentDir + "/agent-system-prompt.txt"
)

// agentSourceChars is how much of a source the agent sees, as in
// chutes-search's contract.
const agentSourceChars = 2000

// agentSystem is the agent's system prompt.
const agentSystem = "You summarize research sources faithfully. You never invent facts or URLs, and you answer with JSON only."

// agentAnswer is the JSON the agent must return.
type agentAnswer struct {
	Sources []struct {
		Title     string   `json:"title"`
		URL       string   `json:"url"`
		Summary   string   `json:"summary"`
		KeyPoints []string `json:"keyPoints"`
	} `json:"sources"`
	OverallInsights []string `json:"overallInsights"`
}

// Summarize runs the configured summarizing agent inside the sandbox over the
// crawled sources and replaces each source's text with its summary, mapped
// back by URL. Any failure keeps the raw extracts: the job goes on.
func (p *Phases) Summarize(ctx context.Context, in SummarizeInput) (SummarizeOutput, error) {
	r, err := p.begin(ctx, "summarize", Input{JobID: in.JobID, SandboxID: in.SandboxID})
	if err != nil {
		return SummarizeOutput{}, err
	}
	out, err := r.summarize(in.SandboxID)
	return out, r.end(err)
}

func (r *run) summarize(id string) (SummarizeOutput, error) {
	if err := r.step(store.StepAnalysis, store.StepRunning, 0, 0); err != nil {
		return SummarizeOutput{}, err
	}
	// The agent's model spend is not metered (it runs in the sandbox): a
	// job already at its budget does not start it.
	over, err := r.overBudget(store.Usage{})
	if err != nil {
		return SummarizeOutput{}, err
	}
	if over != "" {
		if ferr := r.fallback(FallbackBudgetExhausted, string(store.StepAnalysis), "the job's budget is reached ("+over+"): the report uses the raw extracts, without the summarizing agent"); ferr != nil {
			return SummarizeOutput{}, ferr
		}
		return SummarizeOutput{}, r.step(store.StepAnalysis, store.StepComplete, 0, 0)
	}
	n, insights, err := r.runAgent(id)
	if err != nil {
		if cerr := r.checkCancel(); cerr != nil {
			return SummarizeOutput{}, cerr
		}
		r.log.Warn("summary failed, using raw extracts", "err", err)
		if ferr := r.fallback(FallbackRawExtracts, string(store.StepAnalysis), "the summarizing agent failed ("+err.Error()+"): the report uses the raw extracts"); ferr != nil {
			return SummarizeOutput{}, ferr
		}
		return SummarizeOutput{}, r.step(store.StepAnalysis, store.StepComplete, 0, 0)
	}
	msg := fmt.Sprintf("%d sources summarized", n)
	if len(insights) > 0 {
		msg += "; insights: " + strings.Join(insights, " | ")
	}
	if err := r.event("summarize:done", EventData{Stage: string(store.StepAnalysis), Status: "complete", Message: msg, Current: n, Total: n}); err != nil {
		return SummarizeOutput{}, err
	}
	return SummarizeOutput{OK: true, Summaries: n}, r.step(store.StepAnalysis, store.StepComplete, n, n)
}

func (r *run) runAgent(id string) (int, []string, error) {
	cfg := r.p.Config.Research.Agent
	b, err := r.budget()
	if err != nil {
		return 0, nil, err
	}
	all, err := r.p.Store.ListSources(r.ctx, r.job.ID)
	if err != nil {
		return 0, nil, fmt.Errorf("list sources: %w", err)
	}
	var sources []store.Source
	for _, s := range all {
		if s.Origin == store.OriginCrawl && len(sources) < b.SummarySources {
			sources = append(sources, s)
		}
	}
	if len(sources) == 0 {
		return 0, nil, errors.New("no crawled source to summarize")
	}
	prompt, err := agentPrompt(r.req.Query, sources)
	if err != nil {
		return 0, nil, err
	}
	for path, text := range map[string]string{agentPromptFile: prompt, agentSystemPrompt: agentSystem} {
		if err := r.p.Provider.WriteFile(r.ctx, id, providers.WriteFileRequest{Path: path, Content: strings.NewReader(text)}); err != nil {
			return 0, nil, fmt.Errorf("write %s: %w", path, err)
		}
	}
	env := map[string]string{
		"MODEL":              cfg.Model,
		"PROMPT":             prompt,
		"SYSTEM_PROMPT_FILE": agentSystemPrompt,
		"API_TIMEOUT_MS":     fmt.Sprint(cfg.Timeout.D().Milliseconds()),
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
	}
	if cfg.BaseURL != "" {
		env["ANTHROPIC_BASE_URL"] = cfg.BaseURL
	}
	// The token is not passed here: the sandbox got it when it was made,
	// scoped to the agent's host (see agentSecrets).
	var stdout, stderr bytes.Buffer
	timeout := cfg.Timeout.D()
	if timeout <= 0 {
		timeout = 10 * time.Minute
	}
	res, err := r.exec(id, providers.ExecRequest{
		Shell: cfg.Command, Cwd: agentDir, Env: env, Timeout: timeout,
		Stdout: &limitedBuffer{buf: &stdout, max: 4 << 20}, Stderr: &limitedBuffer{buf: &stderr, max: 64 << 10},
	})
	if err != nil {
		return 0, nil, fmt.Errorf("run agent: %w", err)
	}
	if res.TimedOut {
		return 0, nil, fmt.Errorf("agent timed out after %s", timeout)
	}
	if res.OOM {
		return 0, nil, fmt.Errorf("agent ran out of memory (the sandbox's memory limit, %d MiB)", r.p.Config.Sandbox.MemoryMB)
	}
	if res.ExitCode != 0 {
		return 0, nil, fmt.Errorf("agent exited %d: %s", res.ExitCode, firstLine(stderr.String()))
	}
	ans, err := parseAgentAnswer(stdout.String())
	if err != nil {
		return 0, nil, err
	}
	byKey := map[string]store.Source{}
	for _, s := range sources {
		if u, err := urlnorm.Normalize(s.URL); err == nil {
			byKey[urlnorm.Key(u)] = s
		}
	}
	var put []store.Source
	for _, a := range ans.Sources {
		u, err := urlnorm.Normalize(a.URL)
		if err != nil || strings.TrimSpace(a.Summary) == "" {
			continue
		}
		s, ok := byKey[urlnorm.Key(u)]
		if !ok {
			continue // a URL the agent invented
		}
		var text strings.Builder
		text.WriteString(strings.TrimSpace(a.Summary))
		for _, kp := range a.KeyPoints {
			text.WriteString("\n- " + strings.TrimSpace(kp))
		}
		s.Content = text.String()
		put = append(put, s)
		delete(byKey, urlnorm.Key(u))
	}
	if len(put) == 0 {
		return 0, nil, errors.New("the agent's answer matched none of the sources")
	}
	if err := r.p.Store.PutSources(r.ctx, r.job.ID, put); err != nil {
		return 0, nil, fmt.Errorf("store summaries: %w", err)
	}
	return len(put), ans.OverallInsights, nil
}

// agentPrompt is chutes-search's summary prompt.
func agentPrompt(query string, sources []store.Source) (string, error) {
	type trimmed struct {
		Title   string `json:"title"`
		URL     string `json:"url"`
		Content string `json:"content"`
	}
	list := make([]trimmed, len(sources))
	for i, s := range sources {
		c := s.Content
		if len([]rune(c)) > agentSourceChars {
			c = string([]rune(c)[:agentSourceChars])
		}
		list[i] = trimmed{Title: s.Title, URL: s.URL, Content: c}
	}
	data, err := json.Marshal(list)
	if err != nil {
		return "", err
	}
	return `You are a research analyst. Summarize the sources for the query below.
Return ONLY valid JSON with this shape:
{ "sources": [{ "title": string, "url": string, "summary": string, "keyPoints": string[] }],
  "overallInsights": string[] }
Keep each summary under 120 words. Keep keyPoints to 3-5 bullets.
Do not use tools or modify files. Do not include markdown fences.

Query: ` + query + `

Sources:
` + string(data), nil
}

// parseAgentAnswer takes the JSON object out of the agent's output, which
// may be wrapped in prose or code fences despite the instructions.
func parseAgentAnswer(out string) (agentAnswer, error) {
	var ans agentAnswer
	start, end := strings.Index(out, "{"), strings.LastIndex(out, "}")
	if start < 0 || end <= start {
		return ans, fmt.Errorf("the agent's answer has no JSON object: %q", firstLine(out))
	}
	if err := json.Unmarshal([]byte(out[start:end+1]), &ans); err != nil {
		return ans, fmt.Errorf("the agent's answer is not the expected JSON: %w", err)
	}
	if len(ans.Sources) == 0 {
		return ans, errors.New("the agent's answer has no sources")
	}
	return ans, nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// limitedBuffer keeps the first max bytes written and drops the rest, so an
// agent that prints without end cannot exhaust the phase's memory.
type limitedBuffer struct {
	buf *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.buf.Len(); room > 0 {
		l.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
