package sandy_test

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/sandy"
)

// The provider's own checks come back as the config's did: key, line,
// every problem at once. The URL is never echoed.
func TestSettingsProblemsNameKeyAndLine(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"[provider]\nname = \"sandy\"\n", `config.toml:1: provider.sandy.base_url: required: the Sandy controller, such as "https://sandy.example.com"`},
		{"[provider]\nname = \"sandy\"\n\n[provider.sandy]\npriority = 2\n", `config.toml:4: provider.sandy.base_url: required: the Sandy controller, such as "https://sandy.example.com"`},
		{"[provider.sandy]\nbase_url = \"http://x\"\npreemptable = \"yes\"\n", `config.toml:3: provider.sandy.preemptable: must be true or false, not a string`},
		{"[provider.sandy]\nbase_url = \"http://x\"\npriority = 1.5\n", `config.toml:3: provider.sandy.priority: must be an integer, not a float`},
		{"[provider.sandy]\nbase_url = \"http://x\"\nrequest_timeout = \"0s\"\n", `config.toml:3: provider.sandy.request_timeout: must be longer than zero, not 0s`},
		{"[provider.sandy]\nbase_url = \"http://x\"\nrequest_timeout = \"soon\"\n", `config.toml:3: provider.sandy.request_timeout: invalid duration "soon" (want a number with a unit, e.g. "30s" or "5m")`},
		{"[provider.sandy]\nbase_url = \"http://x\"\npriority = 7\n", `config.toml:3: provider.sandy.priority: must be 0 (critical), 1 (high), 2 (normal) or 3 (low), not 7`},
		{"[provider.sandy]\nbase_url = \"http://x\"\nread_chunk_bytes = 10\ncolour = \"blue\"\n",
			"config.toml:3: provider.sandy.read_chunk_bytes: must be from 4096 (4 KiB) to 8388608 (8 MiB), not 10\n" +
				`config.toml:4: provider.sandy.colour: unknown key (known keys: api_key_env, base_url, create_timeout, flavor, max_retries, preemptable, priority, read_chunk_bytes, request_timeout, retry_base_delay, upstream, warmup_attempts, write_chunk_bytes)`},
		// The parser's position for a multi-line string is where it ends;
		// the problem points where the key is.
		{"[provider.sandy]\nflavor = \"\"\"\nagent-ready\n\"\"\"\nupstream = '''\nx'''\nbase_url = \"\"\"\nftp://x-secret\"\"\"\n",
			`config.toml:7: provider.sandy.base_url: must be an http or https URL with a host, such as "https://sandy.example.com"`},
	} {
		c, err := config.Parse([]byte(tc.src), "config.toml", t.TempDir())
		if err != nil {
			t.Fatalf("%q: %v", tc.src, err)
		}
		_, err = sandy.ParseSettings(c.ProviderSettings("sandy"))
		if err = c.ProviderError("sandy", err); err == nil || err.Error() != tc.want {
			t.Errorf("%q:\n got  %v\n want %s", tc.src, err, tc.want)
		}
	}
}

func TestSettingsDefaults(t *testing.T) {
	s, err := sandy.ParseSettings([]byte(`{"base_url": "https://sandy.example.com/"}`))
	if err != nil {
		t.Fatal(err)
	}
	if s.BaseURL != "https://sandy.example.com" || s.Priority != 1 || s.RetryBaseDelay.D() != 500*time.Millisecond || s.APIKeyEnv != "" {
		t.Errorf("settings %+v", s)
	}
}

// Without the secret the host resolves from api_key_env, Configure names
// that key, so the host points at the table.
func TestConfigureWithoutKeyNamesAPIKeyEnv(t *testing.T) {
	c, err := config.Parse([]byte("[provider]\nname = \"sandy\"\n[provider.sandy]\nbase_url = \"http://127.0.0.1:1\"\n"), "config.toml", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	err = sandy.New().Configure(t.Context(), providers.Config{Settings: c.ProviderSettings("sandy")})
	want := `config.toml:3: provider.sandy.api_key_env: the API key is missing: name the environment variable that holds it (api_key_env = "SANDY_API_KEY") and set that variable`
	if err = c.ProviderError("sandy", err); err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
}

// The shipped config.toml writes every key of the table, each at its
// default (api_key_env, which has none, at the variable the docs use).
func TestShippedConfigDocumentsSettings(t *testing.T) {
	c, err := config.Load(filepath.Join("..", "..", "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	raw := c.ProviderSettings("sandy")
	var table map[string]any
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	var keys []string
	rt := reflect.TypeFor[sandy.Settings]()
	for i := range rt.NumField() {
		keys = append(keys, rt.Field(i).Tag.Get("json"))
	}
	slices.Sort(keys)
	if got := slices.Sorted(maps.Keys(table)); !slices.Equal(got, keys) {
		t.Errorf("config.toml [provider.sandy] keys\n%s\nwant\n%s", strings.Join(got, " "), strings.Join(keys, " "))
	}
	table["base_url"] = "https://sandy.example.com"
	b, _ := json.Marshal(table)
	got, err := sandy.ParseSettings(b)
	if err != nil {
		t.Fatalf("the shipped [provider.sandy]: %v", err)
	}
	want := sandy.DefaultSettings()
	want.BaseURL, want.APIKeyEnv = "https://sandy.example.com", "SANDY_API_KEY"
	if got != want {
		t.Errorf("config.toml differs from the defaults:\n%+v\n%+v", got, want)
	}
}
