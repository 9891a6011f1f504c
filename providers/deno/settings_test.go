package deno_test

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/providers/deno"
)

// The provider's checks come back as the config's do: key and line.
func TestSettingsProblemsNameKeyAndLine(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"[provider.deno]\nregion = \"fra\"\n", `config.toml:2: provider.deno.region: must be "ord" or "ams" (volumes and snapshots exist only in "ord"), not "fra"`},
		{"[provider.deno]\nmemory_mb = 9000\n", `config.toml:2: provider.deno.memory_mb: must be from 768 to 4096 (MiB), not 9000`},
		{"[provider.deno]\nmemory = 1024\n", `config.toml:2: provider.deno.memory: unknown key (did you mean "memory_mb"?)`},
	} {
		c, err := config.Parse([]byte(tc.src), "config.toml", t.TempDir())
		if err != nil {
			t.Fatalf("%q: %v", tc.src, err)
		}
		_, err = deno.ParseSettings(c.ProviderSettings("deno"))
		if err = c.ProviderError("deno", err); err == nil || err.Error() != tc.want {
			t.Errorf("%q:\n got  %v\n want %s", tc.src, err, tc.want)
		}
	}
}

// The shipped config.toml writes every key of the table at its default
// (token_env, which has none, at the variable Deno's SDK reads).
func TestShippedConfigDocumentsSettings(t *testing.T) {
	c, err := config.Load(filepath.Join("..", "..", "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	var table map[string]any
	if err := json.Unmarshal(c.ProviderSettings("deno"), &table); err != nil {
		t.Fatal(err)
	}
	var keys []string
	rt := reflect.TypeFor[deno.Settings]()
	for i := range rt.NumField() {
		keys = append(keys, rt.Field(i).Tag.Get("json"))
	}
	slices.Sort(keys)
	if got := slices.Sorted(maps.Keys(table)); !slices.Equal(got, keys) {
		t.Errorf("config.toml [provider.deno] keys\n%s\nwant\n%s", strings.Join(got, " "), strings.Join(keys, " "))
	}
	b, _ := json.Marshal(table)
	got, err := deno.ParseSettings(b)
	if err != nil {
		t.Fatalf("the shipped [provider.deno]: %v", err)
	}
	want := deno.DefaultSettings()
	want.TokenEnv = "DENO_DEPLOY_TOKEN"
	if got != want {
		t.Errorf("config.toml differs from the defaults:\n%+v\n%+v", got, want)
	}
}
