package local

import (
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/providers"
)

// parseFile loads src as config.toml and checks its [provider.local] table
// the way the plugin does when the host starts it, returning the problems
// as the host reports them.
func parseFile(t *testing.T, src string) (Settings, error) {
	t.Helper()
	c, err := config.Parse([]byte(src), "config.toml", t.TempDir())
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	s, err := ParseSettings(providers.Config{Settings: c.ProviderSettings("local"), BaseDir: c.Dir, DataDir: c.ProviderDataDir("local")})
	return s, c.ProviderError("local", err)
}

// The provider's own checks come back as the config's did: key, line,
// and a suggestion for a typo, every problem at once.
func TestSettingsProblemsNameKeyAndLine(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"[server]\naddr = \"127.0.0.1:9000\"\n\n[provider.local]\nmax_processes = 10\nmax_proces = 12\n",
			`config.toml:6: provider.local.max_proces: unknown key (did you mean "max_processes"?)`},
		{"[provider]\nname = \"local\"\nlocal = { max_processes = 3, bwrap = \"/usr/bin/bwrap\" }\n",
			`config.toml:3: provider.local.bwrap: unknown key (did you mean "bwrap_path"?)`},
		{"[provider.local]\ndns_servers = [\"dns.google\"]\n",
			`config.toml:2: provider.local.dns_servers[0]: "dns.google": not an IP address or IP:port (such as "1.1.1.1" or "127.0.0.1:5353")`},
		{"[provider.local]\nupstream_ca_files = [\"/nonexistent/ca.pem\"]\n",
			`config.toml:2: provider.local.upstream_ca_files[0]: open /nonexistent/ca.pem: no such file or directory`},
		{"[provider.local]\nro_paths = [\"usr\"]\n",
			`config.toml:2: provider.local.ro_paths[0]: "usr" must be an absolute, clean path other than /`},
		{"[provider.local]\nro_paths = [\"/usr\", \"/tmp/x\"]\n",
			`config.toml:2: provider.local.ro_paths[1]: "/tmp/x" overlaps a path the sandbox provides itself (/proc, /dev, /tmp, /home/sandbox, /.sandstep, /opt/sandstep)`},
		{"[provider.local]\nuid_range_start = 0\n",
			`config.toml:2: provider.local.uid_range_start: must be at least 1000, above system and login accounts`},
		{"[provider.local]\nuid_range_start = 2147483000\n",
			`config.toml:1: provider.local.uid_range_start + uid_range_size: the range must end at or below 2147483647`},
		{"[provider.local]\nmax_processes = 0\n",
			`config.toml:2: provider.local.max_processes: must be at least 1, not 0`},
		{"[provider.local]\nmax_processes = \"many\"\n",
			`config.toml:2: provider.local.max_processes: must be an integer, not a string`},
		{"[provider.local]\nunenforced_limits = [\"disk\"]\n",
			`config.toml:2: provider.local.unenforced_limits[0]: "disk" is not one of "memory", "processes", "cpu", "volume_capacity"`},
		{"[provider.local]\nbwrap_path = \"bwrap\"\nsnapshot_size_mb = 1\n",
			"config.toml:2: provider.local.bwrap_path: \"bwrap\" is not an absolute path (leave it empty to look bwrap up in PATH)\n" +
				"config.toml:3: provider.local.snapshot_size_mb: must be at least 16, not 1"},
	} {
		_, err := parseFile(t, tc.src)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q:\n got  %v\n want %s", tc.src, err, tc.want)
		}
		var se *providers.SettingsError
		if _, perr := ParseSettings(providers.Config{Settings: mustTable(t, tc.src), DataDir: "/x"}); !errors.As(perr, &se) || providers.CodeOf(perr) != providers.InvalidArgument {
			t.Errorf("%q: ParseSettings: %v, want a SettingsError", tc.src, perr)
		}
	}
}

func mustTable(t *testing.T, src string) []byte {
	t.Helper()
	c, err := config.Parse([]byte(src), "config.toml", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return c.ProviderSettings("local")
}

// Relative paths are relative to the config file's folder; state_dir
// defaults to the host's data folder for the provider.
func TestSettingsPaths(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "etc", "sandstep.toml")
	if err := os.WriteFile(path, []byte("[server]\ndata_dir = \"../var\"\n[provider.local]\ntools_dir = \"tools\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParseSettings(providers.Config{Settings: c.ProviderSettings("local"), BaseDir: c.Dir, DataDir: c.ProviderDataDir("local")})
	if err != nil {
		t.Fatal(err)
	}
	if s.StateDir != filepath.Join(dir, "var", "local") || s.ToolsDir != filepath.Join(dir, "etc", "tools") || s.MaxProcesses != defaultMaxProcesses {
		t.Errorf("state_dir %s, tools_dir %s, max_processes %d", s.StateDir, s.ToolsDir, s.MaxProcesses)
	}
	s, err = ParseSettings(providers.Config{Settings: []byte(`{"state_dir": "state"}`), BaseDir: "/etc/sandstep"})
	if err != nil || s.StateDir != "/etc/sandstep/state" {
		t.Errorf("relative state_dir: %s, %v", s.StateDir, err)
	}
	_, err = ParseSettings(providers.Config{})
	var se *providers.SettingsError
	if !errors.As(err, &se) || se.Problems[0].Key != "state_dir" {
		t.Errorf("no state_dir and no data folder: %v", err)
	}
}

// The shipped config.toml writes every key of the table, each at its
// default.
func TestShippedConfigDocumentsSettings(t *testing.T) {
	c, err := config.Load(filepath.Join("..", "..", "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	raw := c.ProviderSettings("local")
	var table map[string]any
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	var keys []string
	rt := reflect.TypeFor[Settings]()
	for i := range rt.NumField() {
		keys = append(keys, rt.Field(i).Tag.Get("json"))
	}
	slices.Sort(keys)
	if got := slices.Sorted(maps.Keys(table)); !slices.Equal(got, keys) {
		t.Errorf("config.toml [provider.local] keys\n%s\nwant\n%s", strings.Join(got, " "), strings.Join(keys, " "))
	}
	cfg := providers.Config{BaseDir: c.Dir, DataDir: c.ProviderDataDir("local")}
	want, err := ParseSettings(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Settings = raw
	got, err := ParseSettings(cfg)
	if err != nil {
		t.Fatalf("the shipped [provider.local]: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("config.toml differs from the defaults:\n%+v\n%+v", got, want)
	}
}
