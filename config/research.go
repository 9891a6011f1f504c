package config

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// ResearchConfig is [research]: how the deep-research job searches, crawls,
// summarizes and writes its report.
type ResearchConfig struct {
	// Render says when the crawler drives a headless browser: "auto" (when
	// the sandbox has one, plain HTTP otherwise), "always" (a page is only
	// read through the browser) or "never" (plain HTTP only).
	Render string `toml:"render"`
	// MaxCrawlDuration caps the crawl of every job whatever its mode says;
	// 0 leaves the mode's duration (12 or 18 minutes, scaled).
	MaxCrawlDuration Duration                `toml:"max_crawl_duration"`
	Search           ResearchSearchConfig    `toml:"search"`
	LLM              ResearchLLMConfig       `toml:"llm"`
	Agent            ResearchAgentConfig     `toml:"agent"`
	Citations        ResearchCitationsConfig `toml:"citations"`
}

// ResearchCitationsConfig is [research.citations]: the check of every
// cited sentence against the text of the sources it cites.
type ResearchCitationsConfig struct {
	// Threshold is the share of a sentence's content words (weighted by
	// rarity) that one passage of a cited source must hold, above 0 and at
	// most 1. Numbers and quoted phrases must be in a cited source
	// whatever it is.
	Threshold float64 `toml:"threshold"`
	// Action on an unsupported sentence: "annotate" marks it, "drop"
	// removes its citations, "revise" asks the model once to rewrite it
	// with the passages found, then checks again.
	Action string `toml:"action"`
}

// Actions of [research.citations] action.
const (
	CitationsAnnotate = "annotate"
	CitationsDrop     = "drop"
	CitationsRevise   = "revise"
)

// ResearchSearchConfig is [research.search]: the web search backends of the
// discover phase.
type ResearchSearchConfig struct {
	// Backends are tried in this order for every query; the first that
	// answers wins and the others are its fallbacks.
	Backends        []string `toml:"backends"`
	SearxNGURL      string   `toml:"searxng_url"`
	SerperURL       string   `toml:"serper_url"`
	SerperAPIKeyEnv string   `toml:"serper_api_key_env"`
	WikipediaLang   string   `toml:"wikipedia_lang"`
	// WikipediaURL is the wiki's base URL; check sets it to
	// https://<wikipedia_lang>.wikipedia.org when it is empty.
	WikipediaURL string   `toml:"wikipedia_url"`
	Timeout      Duration `toml:"timeout"`
}

// ResearchLLMConfig is [research.llm]: the OpenAI-compatible chat model
// that writes the report. No base URL means no model: the report is
// extractive.
type ResearchLLMConfig struct {
	BaseURL   string `toml:"base_url"`
	APIKeyEnv string `toml:"api_key_env"`
	// Models are the candidates, tried in order when one is rate limited
	// or failing before it has written anything.
	Models    []string `toml:"models"`
	Timeout   Duration `toml:"timeout"`
	MaxTokens int      `toml:"max_tokens"`
}

// ResearchAgentConfig is [research.agent]: the optional summarizing agent
// run inside the sandbox after the crawl.
type ResearchAgentConfig struct {
	Enabled bool `toml:"enabled"`
	// Command is run by sh -c in the sandbox with MODEL, PROMPT and
	// SYSTEM_PROMPT_FILE set; its standard output is the agent's answer.
	Command string `toml:"command"`
	// BaseURL is the agent's model endpoint (ANTHROPIC_BASE_URL for Claude
	// Code); "" leaves the agent's own default.
	BaseURL  string   `toml:"base_url"`
	Model    string   `toml:"model"`
	TokenEnv string   `toml:"token_env"`
	Timeout  Duration `toml:"timeout"`
}

// Search backend names in [research.search] backends.
const (
	BackendWikipedia = "wikipedia"
	BackendSearxNG   = "searxng"
	BackendSerper    = "serper"
)

// Render modes of [research] render.
const (
	RenderAuto   = "auto"
	RenderAlways = "always"
	RenderNever  = "never"
)

// DefaultAgentCommand runs Claude Code once, without tools or a session,
// as chutes-search does.
const DefaultAgentCommand = `claude -p --output-format text --no-session-persistence --model "$MODEL" --append-system-prompt-file "$SYSTEM_PROMPT_FILE" "$PROMPT"`

func (c *ResearchConfig) setDefaults() {
	c.Render = RenderAuto
	c.MaxCrawlDuration = 0
	s := &c.Search
	s.Backends = []string{BackendWikipedia}
	s.SearxNGURL = ""
	s.SerperURL = "https://google.serper.dev"
	s.SerperAPIKeyEnv = "SERPER_API_KEY"
	s.WikipediaLang = "en"
	s.WikipediaURL = ""
	s.Timeout = Duration(20 * time.Second)
	l := &c.LLM
	l.BaseURL = ""
	l.APIKeyEnv = "SANDSTEP_LLM_API_KEY"
	l.Models = []string{}
	l.Timeout = Duration(5 * time.Minute)
	l.MaxTokens = 4096
	a := &c.Agent
	a.Enabled = false
	a.Command = DefaultAgentCommand
	a.BaseURL = ""
	a.Model = ""
	a.TokenEnv = "SANDSTEP_AGENT_TOKEN"
	a.Timeout = Duration(10 * time.Minute)
	c.Citations.Threshold = 0.5
	c.Citations.Action = CitationsAnnotate
}

// wikiLang is a Wikipedia language code as used in its host name: "en",
// "simple", "zh-min-nan".
var wikiLang = regexp.MustCompile(`^[a-z]{2,12}(-[a-z0-9]{1,12}){0,3}$`)

func (c *ResearchConfig) check(_ *Config, r *report) {
	switch c.Render {
	case RenderAuto, RenderAlways, RenderNever:
	default:
		r.add("research.render", "research.render: must be %q, %q or %q, not %q", RenderAuto, RenderAlways, RenderNever, c.Render)
	}
	if c.MaxCrawlDuration < 0 {
		r.add("research.max_crawl_duration", "research.max_crawl_duration: must not be negative")
	}
	c.Search.check(r)
	c.LLM.check(r)
	c.Agent.check(r)
	c.Citations.check(r, c.LLM.BaseURL != "")
}

func (c *ResearchCitationsConfig) check(r *report, model bool) {
	const t = "research.citations"
	if !(c.Threshold > 0 && c.Threshold <= 1) {
		r.add(t+".threshold", "%s.threshold: must be above 0 and at most 1, not %g", t, c.Threshold)
	}
	switch c.Action {
	case CitationsAnnotate, CitationsDrop:
	case CitationsRevise:
		if !model {
			r.add(t+".action", "%s.action: %q needs a model to revise with: set [research.llm] base_url, or choose %q or %q", t, c.Action, CitationsAnnotate, CitationsDrop)
		}
	default:
		r.add(t+".action", "%s.action: must be %q, %q or %q, not %q", t, CitationsAnnotate, CitationsDrop, CitationsRevise, c.Action)
	}
}

func (s *ResearchSearchConfig) check(r *report) {
	const t = "research.search"
	if len(s.Backends) == 0 {
		r.add(t+".backends", "%s.backends: must list at least one of %q, %q and %q", t, BackendWikipedia, BackendSearxNG, BackendSerper)
	}
	seen := map[string]bool{}
	for i, b := range s.Backends {
		switch {
		case b != BackendWikipedia && b != BackendSearxNG && b != BackendSerper:
			r.add(index(t+".backends", i), "%s.backends[%d]: %q is not a search backend (%q, %q or %q)", t, i, b, BackendWikipedia, BackendSearxNG, BackendSerper)
		case seen[b]:
			r.add(index(t+".backends", i), "%s.backends[%d]: %q is listed twice", t, i, b)
		}
		seen[b] = true
	}
	if seen[BackendSearxNG] && s.SearxNGURL == "" {
		r.add(t+".searxng_url", "%s.searxng_url is required when backends lists %q (the instance, such as \"http://127.0.0.1:8888\", with format json enabled)", t, BackendSearxNG)
	}
	s.SearxNGURL = baseURL(r, t+".searxng_url", s.SearxNGURL)
	if s.SerperURL == "" {
		r.add(t+".serper_url", "%s.serper_url: must not be empty (default \"https://google.serper.dev\")", t)
	}
	s.SerperURL = baseURL(r, t+".serper_url", s.SerperURL)
	if seen[BackendSerper] && s.SerperAPIKeyEnv == "" {
		r.add(t+".serper_api_key_env", "%s.serper_api_key_env: must name the environment variable that holds the Serper API key when backends lists %q", t, BackendSerper)
	}
	if !wikiLang.MatchString(s.WikipediaLang) {
		r.add(t+".wikipedia_lang", "%s.wikipedia_lang: %q is not a Wikipedia language code (such as \"en\", \"de\" or \"simple\")", t, s.WikipediaLang)
	} else if s.WikipediaURL == "" {
		s.WikipediaURL = "https://" + s.WikipediaLang + ".wikipedia.org"
	}
	s.WikipediaURL = baseURL(r, t+".wikipedia_url", s.WikipediaURL)
	positive(r, t+".timeout", s.Timeout)
}

func (l *ResearchLLMConfig) check(r *report) {
	const t = "research.llm"
	l.BaseURL = baseURL(r, t+".base_url", l.BaseURL)
	if l.BaseURL != "" && len(l.Models) == 0 {
		r.add(t+".models", "%s.models: must list at least one model when base_url is set (such as [\"deepseek-ai/DeepSeek-V3\"])", t)
	}
	seen := map[string]bool{}
	for i, m := range l.Models {
		switch {
		case strings.TrimSpace(m) == "":
			r.add(index(t+".models", i), "%s.models[%d]: must not be empty", t, i)
		case seen[m]:
			r.add(index(t+".models", i), "%s.models[%d]: %q is listed twice", t, i, m)
		}
		seen[m] = true
	}
	positive(r, t+".timeout", l.Timeout)
	if l.MaxTokens < 1 || l.MaxTokens > 1_000_000 {
		r.add(t+".max_tokens", "%s.max_tokens: must be from 1 to 1000000, not %d", t, l.MaxTokens)
	}
}

func (a *ResearchAgentConfig) check(r *report) {
	const t = "research.agent"
	a.BaseURL = baseURL(r, t+".base_url", a.BaseURL)
	if a.Enabled {
		if strings.TrimSpace(a.Command) == "" {
			r.add(t+".command", "%s.command: must not be empty when enabled = true", t)
		}
		if a.Model == "" {
			r.add(t+".model", "%s.model: must name the agent's model when enabled = true (it is passed as $MODEL)", t)
		}
		if a.TokenEnv == "" {
			r.add(t+".token_env", "%s.token_env: must name the environment variable that holds the agent's token when enabled = true", t)
		}
	}
	positive(r, t+".timeout", a.Timeout)
}

// baseURL checks an optional http(s) base URL and returns it without a
// trailing slash. The value is never echoed: it could carry a token.
func baseURL(r *report, key, v string) string {
	if v == "" {
		return ""
	}
	u, err := url.Parse(v)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		r.add(key, "%s: must be an http or https URL with a host, such as \"https://example.com\"", key)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(v, "?"):
		r.add(key, "%s: must not contain credentials, a query or a fragment (secrets go in environment variables named by *_env keys)", key)
	default:
		return strings.TrimRight(v, "/")
	}
	return v
}

// ResearchSecret returns the value of the environment variable named by an
// *_env key of [research] through getenv, with an error naming the variable
// (never a value) when it is unset or empty.
func ResearchSecret(key, variable string, getenv func(string) string) (string, error) {
	if variable == "" {
		return "", fmt.Errorf("config: %s names no environment variable", key)
	}
	v := getenv(variable)
	if v == "" {
		return "", fmt.Errorf("config: %s: environment variable %s is not set or is empty", key, variable)
	}
	return v, nil
}
