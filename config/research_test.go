package config_test

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
)

func TestResearchDefaults(t *testing.T) {
	c := mustParse(t, "", t.TempDir())
	want := config.ResearchConfig{
		Render: "auto",
		Search: config.ResearchSearchConfig{
			Backends:        []string{"wikipedia"},
			SerperURL:       "https://google.serper.dev",
			SerperAPIKeyEnv: "SERPER_API_KEY",
			WikipediaLang:   "en",
			WikipediaURL:    "https://en.wikipedia.org",
			Timeout:         config.Duration(20 * time.Second),
		},
		LLM: config.ResearchLLMConfig{
			APIKeyEnv: "SANDSTEP_LLM_API_KEY",
			Models:    []string{},
			Timeout:   config.Duration(5 * time.Minute),
			MaxTokens: 4096,
		},
		Agent: config.ResearchAgentConfig{
			Command:  config.DefaultAgentCommand,
			TokenEnv: "SANDSTEP_AGENT_TOKEN",
			Timeout:  config.Duration(10 * time.Minute),
		},
		Citations: config.ResearchCitationsConfig{Threshold: 0.5, Action: "annotate"},
	}
	if !reflect.DeepEqual(c.Research, want) {
		t.Fatalf("Research =\n %+v\nwant\n %+v", c.Research, want)
	}
}

// config.toml documents the defaults of [research]: loading it or nothing
// gives the same.
func TestResearchShippedIsDefault(t *testing.T) {
	c, err := config.Load(filepath.Join("..", "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if empty := mustParse(t, "", c.Dir); !reflect.DeepEqual(c.Research, empty.Research) {
		t.Fatalf("config.toml [research] differs from the defaults:\n %+v\n %+v", c.Research, empty.Research)
	}
}

func TestResearchFullTable(t *testing.T) {
	c := mustParse(t, `[research]
render = "never"

[research.search]
backends = ["serper", "searxng", "wikipedia"]
searxng_url = "http://127.0.0.1:8888/"
serper_api_key_env = "MY_SERPER"
wikipedia_lang = "zh-min-nan"
timeout = "5s"

[research.llm]
base_url = "https://llm.example.com/v1/"
api_key_env = ""
models = ["a/b", "c/d"]
timeout = "90s"
max_tokens = 1000

[research.agent]
enabled = true
model = "janus-router"
base_url = "https://claude.example.com"
token_env = "AGENT_TOKEN"
`, t.TempDir())
	r := c.Research
	if r.Render != "never" {
		t.Errorf("render = %q", r.Render)
	}
	s := r.Search
	if !reflect.DeepEqual(s.Backends, []string{"serper", "searxng", "wikipedia"}) || s.SearxNGURL != "http://127.0.0.1:8888" ||
		s.SerperAPIKeyEnv != "MY_SERPER" || s.WikipediaURL != "https://zh-min-nan.wikipedia.org" || s.Timeout.D() != 5*time.Second {
		t.Errorf("search = %+v", s)
	}
	l := r.LLM
	if l.BaseURL != "https://llm.example.com/v1" || l.APIKeyEnv != "" || !reflect.DeepEqual(l.Models, []string{"a/b", "c/d"}) ||
		l.Timeout.D() != 90*time.Second || l.MaxTokens != 1000 {
		t.Errorf("llm = %+v", l)
	}
	a := r.Agent
	if !a.Enabled || a.Model != "janus-router" || a.BaseURL != "https://claude.example.com" || a.TokenEnv != "AGENT_TOKEN" || a.Command != config.DefaultAgentCommand {
		t.Errorf("agent = %+v", a)
	}
}

func TestResearchWikipediaURLOverride(t *testing.T) {
	c := mustParse(t, "[research.search]\nwikipedia_lang = \"de\"\nwikipedia_url = \"http://127.0.0.1:9/w/\"\n", t.TempDir())
	if got := c.Research.Search.WikipediaURL; got != "http://127.0.0.1:9/w" {
		t.Fatalf("wikipedia_url = %q", got)
	}
}

func TestResearchProblems(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"[research]\nrender = \"sometimes\"\n", `config.toml:2: research.render: must be "auto", "always" or "never", not "sometimes"`},
		{"[research.search]\nbackends = []\n", `config.toml:2: research.search.backends: must list at least one of "wikipedia", "searxng" and "serper"`},
		{"[research.search]\nbackends = [\"wikipedia\", \"google\"]\n", `config.toml:2: research.search.backends[1]: "google" is not a search backend ("wikipedia", "searxng" or "serper")`},
		{"[research.search]\nbackends = [\"wikipedia\", \"wikipedia\"]\n", `config.toml:2: research.search.backends[1]: "wikipedia" is listed twice`},
		{"[research.search]\nbackends = [\"searxng\"]\n", `config.toml:1: research.search.searxng_url is required when backends lists "searxng" (the instance, such as "http://127.0.0.1:8888", with format json enabled)`},
		{"[research.search]\nbackends = [\"serper\"]\nserper_api_key_env = \"\"\n", `config.toml:3: research.search.serper_api_key_env: must name the environment variable that holds the Serper API key when backends lists "serper"`},
		{"[research.search]\nsearxng_url = \"ftp://x\"\n", `config.toml:2: research.search.searxng_url: must be an http or https URL with a host, such as "https://example.com"`},
		{"[research.search]\nserper_url = \"\"\n", `config.toml:2: research.search.serper_url: must not be empty (default "https://google.serper.dev")`},
		{"[research.search]\nwikipedia_lang = \"English\"\n", `config.toml:2: research.search.wikipedia_lang: "English" is not a Wikipedia language code (such as "en", "de" or "simple")`},
		{"[research.search]\nwikipedia_lang = \"en/../x\"\n", `config.toml:2: research.search.wikipedia_lang: "en/../x" is not a Wikipedia language code (such as "en", "de" or "simple")`},
		{"[research.search]\ntimeout = \"0s\"\n", `config.toml:2: research.search.timeout: must be longer than zero, not 0s`},
		{"[research.llm]\nbase_url = \"https://llm.example.com/v1\"\n", `config.toml:1: research.llm.models: must list at least one model when base_url is set (such as ["deepseek-ai/DeepSeek-V3"])`},
		{"[research.llm]\nmodels = [\"a\", \" \"]\n", `config.toml:2: research.llm.models[1]: must not be empty`},
		{"[research.llm]\nmodels = [\"a\", \"a\"]\n", `config.toml:2: research.llm.models[1]: "a" is listed twice`},
		{"[research.llm]\nmax_tokens = 0\n", `config.toml:2: research.llm.max_tokens: must be from 1 to 1000000, not 0`},
		{"[research.llm]\napi_key = \"sk-x\"\n", `config.toml:2: research.llm.api_key: secrets are never written in the config file; put the value in an environment variable and name it: api_key_env = "VARIABLE"`},
		{"[research.llm]\napi_key_env = \"sk-live-abc\"\n", `config.toml:2: research.llm.api_key_env: must be the name of an environment variable (A-Z, 0-9 and _, such as "SANDY_API_KEY"); the value is not shown in case it is the secret itself`},
		{"[research.agent]\nenabled = true\n", `config.toml:1: research.agent.model: must name the agent's model when enabled = true (it is passed as $MODEL)`},
		{"[research.agent]\nenabled = true\nmodel = \"m\"\ncommand = \" \"\n", `config.toml:4: research.agent.command: must not be empty when enabled = true`},
		{"[research.agent]\nenabled = true\nmodel = \"m\"\ntoken_env = \"\"\n", `config.toml:4: research.agent.token_env: must name the environment variable that holds the agent's token when enabled = true`},
		{"[research.agent]\ntimeout = \"-1s\"\n", `config.toml:2: research.agent.timeout: must be longer than zero, not -1s`},
		{"[research.search]\nbackend = [\"wikipedia\"]\n", `config.toml:2: unknown key "research.search.backend" (did you mean "backends"?)`},
		{"[research.citations]\nthreshold = 0.0\n", `config.toml:2: research.citations.threshold: must be above 0 and at most 1, not 0`},
		{"[research.citations]\nthreshold = 1.5\n", `config.toml:2: research.citations.threshold: must be above 0 and at most 1, not 1.5`},
		{"[research.citations]\naction = \"delete\"\n", `config.toml:2: research.citations.action: must be "annotate", "drop" or "revise", not "delete"`},
		{"[research.citations]\naction = \"revise\"\n", `config.toml:2: research.citations.action: "revise" needs a model to revise with: set [research.llm] base_url, or choose "annotate" or "drop"`},
		{"[research.citations]\nthreshhold = 0.4\n", `config.toml:2: unknown key "research.citations.threshhold" (did you mean "threshold"?)`},
	} {
		if got := only(t, tc.src); got != tc.want {
			t.Errorf("%q:\n got  %s\n want %s", tc.src, got, tc.want)
		}
	}
}

// A URL with a password in it is refused without being echoed.
func TestResearchURLProblemHidesTheValue(t *testing.T) {
	for _, key := range []string{"search.searxng_url", "llm.base_url", "agent.base_url"} {
		table, k, _ := strings.Cut(key, ".")
		src := "[research." + table + "]\n" + k + " = \"https://user:hunter2@example.com/?key=hunter2\"\n"
		found := false
		for _, p := range problems(t, src) {
			found = found || p.Key == "research."+key
			if strings.Contains(p.String(), "hunter2") {
				t.Errorf("%s: the problem shows the value: %s", key, p)
			}
		}
		if !found {
			t.Errorf("%s: no problem reported on the key", key)
		}
	}
}

// Agent settings are only required when the agent runs; the Serper key
// variable only when serper is listed.
func TestResearchRequirementsOnlyWhenUsed(t *testing.T) {
	mustParse(t, "[research.agent]\nmodel = \"\"\ntoken_env = \"\"\ncommand = \"\"\n[research.search]\nserper_api_key_env = \"\"\n", t.TempDir())
}

func TestResearchSecret(t *testing.T) {
	env := map[string]string{"SERPER_API_KEY": "s3cr3t-value"}
	getenv := func(k string) string { return env[k] }
	v, err := config.ResearchSecret("research.search.serper_api_key_env", "SERPER_API_KEY", getenv)
	if err != nil || v != "s3cr3t-value" {
		t.Fatalf("ResearchSecret = %q, %v", v, err)
	}
	_, err = config.ResearchSecret("research.llm.api_key_env", "SANDSTEP_LLM_API_KEY", getenv)
	if err == nil || err.Error() != "config: research.llm.api_key_env: environment variable SANDSTEP_LLM_API_KEY is not set or is empty" {
		t.Fatalf("missing variable: %v", err)
	}
	if _, err := config.ResearchSecret("research.llm.api_key_env", "", getenv); err == nil {
		t.Fatal("no variable name: no error")
	}
}
