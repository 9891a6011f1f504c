package config_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/providers"
)

// problems parses src and returns its problems, failing the test when it
// loads cleanly.
func problems(t *testing.T, src string) []config.Problem {
	t.Helper()
	_, err := config.Parse([]byte(src), "config.toml", t.TempDir())
	if err == nil {
		t.Fatalf("config loaded without problems:\n%s", src)
	}
	var ce *config.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error is %T, not *config.Error: %v", err, err)
	}
	return ce.Problems
}

// only asserts that src has exactly one problem and returns it as text.
func only(t *testing.T, src string) string {
	t.Helper()
	ps := problems(t, src)
	if len(ps) != 1 {
		t.Fatalf("want one problem, got %d:\n%v", len(ps), (&config.Error{Problems: ps}).Error())
	}
	return ps[0].String()
}

func mustParse(t *testing.T, src, dir string) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(src), "config.toml", dir)
	if err != nil {
		t.Fatalf("parse:\n%v", err)
	}
	return c
}

func TestTypoNamesKeyLineAndSuggestion(t *testing.T) {
	got := only(t, `[server]
addr = "127.0.0.1:9000"

[sandbox]
memory_mb = 512
memry_mb = 12
`)
	want := `config.toml:6: unknown key "sandbox.memry_mb" (did you mean "memory_mb"?)`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestUnknownKeyHints(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"[sever]\naddr = \"x:1\"\n", `config.toml:1: unknown key "sever" (did you mean "server"?)`},
		{"[server]\nAddr = \"x:1\"\n", `config.toml:2: unknown key "server.Addr" (did you mean "addr"?)`},
		{"[server]\n\nmemory_mb = 512\n", `config.toml:3: unknown key "server.memory_mb" (did you mean "sandbox.memory_mb"?)`},
		{"[sandbox]\ncolour = 1\n", `config.toml:2: unknown key "sandbox.colour" (known keys in [sandbox]: allow_hosts, allow_private, exec_timeout, idle_timeout, lifetime, memory_mb, network)`},
		// Dotted keys and inline tables get their own lines too.
		{"# c\n\nsandbox.memry_mb = 100\n", `config.toml:3: unknown key "sandbox.memry_mb" (did you mean "memory_mb"?)`},
		{"[server]\nadr = \"127.0.0.1:1\"\n[provider]\nname = \"local\"\nlocal = { max_processes = 3 }\n", `config.toml:2: unknown key "server.adr" (did you mean "addr"?)`},
	} {
		if got := only(t, tc.src); got != tc.want {
			t.Errorf("%q:\n got  %s\n want %s", tc.src, got, tc.want)
		}
	}
}

func TestEveryProblemIsReportedWithItsLine(t *testing.T) {
	ps := problems(t, `[server]
addr = "127.0.0.1:8080"

[sandbox]
lifetime = "30m"
memory_mb = 16
network = "internet"

[auth]
tokns = []
`)
	got := make([]string, len(ps))
	for i, p := range ps {
		got[i] = p.String()
	}
	want := []string{
		`config.toml:6: sandbox.memory_mb: must be from 64 to 65536, not 16`,
		`config.toml:7: sandbox.network: must be "none", "all" or "allowlist", not "internet"`,
		`config.toml:10: unknown key "auth.tokns" (did you mean "tokens"?)`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	keys := []string{ps[0].Key, ps[1].Key, ps[2].Key}
	if !slices.Equal(keys, []string{"sandbox.memory_mb", "sandbox.network", "auth.tokns"}) {
		t.Errorf("keys = %q", keys)
	}
	var err error = &config.Error{Problems: ps}
	if lines := strings.Split(err.Error(), "\n"); !slices.Equal(lines, want) {
		t.Errorf("Error() is not one problem a line:\n%s", err)
	}
}

func TestSyntaxErrorReportsItsLine(t *testing.T) {
	ps := problems(t, `[server]
addr = "127.0.0.1:8080"
data_dir = ".sandstep

[sandbox]
`)
	if len(ps) != 1 || ps[0].Line != 3 || !strings.Contains(ps[0].Message, "syntax error") {
		t.Fatalf("got %v", ps)
	}
	if got := ps[0].String(); !strings.HasPrefix(got, "config.toml:3: syntax error: ") {
		t.Errorf("got %s", got)
	}
}

// Windows line endings: the parser's own count is one short for a string
// cut by "\r\n"; the line comes from where the error starts.
func TestSyntaxErrorLineWithCRLF(t *testing.T) {
	for src, want := range map[string]int{
		"\"\r\n":                           1,
		"[server]\r\naddr = \"x\r\n\"\r\n": 2,
		"[server]\r\n\r\ndata_dir = \".sandstep\r\n": 3,
	} {
		ps := problems(t, src)
		if len(ps) != 1 || ps[0].Line != want || !strings.Contains(ps[0].Message, "syntax error") {
			t.Errorf("%q: got %v, want a syntax error on line %d", src, ps, want)
		}
	}
}

func TestWrongTypeMessages(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"[server]\naddr = 8080\n", `config.toml:2: server.addr: must be a string, not an integer`},
		{"[sandbox]\nallow_hosts = \"pypi.org\"\n", `config.toml:2: sandbox.allow_hosts: must be an array, not a string`},
		{"[sandbox]\nallow_hosts = [\"a.org\", 3]\n", `config.toml:2: sandbox.allow_hosts[1]: must be a string, not an integer`},
		{"sandbox = 3\n", `config.toml:1: sandbox: must be a table, not an integer`},
		{"[sandbox]\nlifetime = 30\n", `config.toml:2: sandbox.lifetime: must be a duration such as "30s" or "5m", not an integer`},
	} {
		if got := only(t, tc.src); got != tc.want {
			t.Errorf("%q:\n got  %s\n want %s", tc.src, got, tc.want)
		}
	}
}

func TestInvalidValues(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"[sandbox]\nexec_timeout = \"5 minutes\"\n", `config.toml:2: sandbox.exec_timeout: invalid duration "5 minutes" (want a number with a unit, e.g. "30s" or "5m")`},
		{"[sandbox]\nlifetime = \"-1m\"\nexec_timeout = \"1s\"\n", `config.toml:2: sandbox.lifetime: must be longer than zero, not -1m0s`},
		// A default that clashes with a value is reported at its table.
		{"\n[sandbox]\nlifetime = \"1m\"\n", `config.toml:2: sandbox.exec_timeout (5m0s) must not be longer than sandbox.lifetime (1m0s)`},
		{"[sandbox]\nnetwork = \"allowlist\"\n", `config.toml:2: sandbox.network = "allowlist" needs at least one host in sandbox.allow_hosts`},
		{"[sandbox]\nallow_hosts = [\"pypi.org\"]\n", `config.toml:2: sandbox.allow_hosts: only used when sandbox.network = "allowlist" (it is "none")`},
		{"[sandbox]\nnetwork = \"allowlist\"\nallow_hosts = [\n  \"pypi.org\",\n  \"https://x.org/\",\n]\n", `config.toml:3: sandbox.allow_hosts[1]: "https://x.org/" is not a host name (such as "pypi.org" or "*.github.com", optionally with :port; no scheme or path)`},
		{"[sandbox]\nallow_private = [\n  \"127.0.0.1:8443\",\n  \"fixture.local:80\",\n]\n", `config.toml:2: sandbox.allow_private[1]: "fixture.local:80": not an IP address or CIDR prefix (such as "127.0.0.1:8443" or "10.1.2.0/24"); host names are not allowed here`},
		{"[sandbox]\nallow_private = [\"10.1.2.3/24\"]\n", `config.toml:2: sandbox.allow_private[0]: "10.1.2.3/24": the prefix has host bits set (did you mean 10.1.2.0/24?)`},
		{"[server]\naddr = \"0.0.0.0:8080\"\n", `config.toml:2: server.addr: "0.0.0.0" is not a loopback address: the API would be reachable from other machines; use 127.0.0.1 (or ::1), or set server.allow_non_loopback = true to mean it`},
		{"[server]\naddr = \":8080\"\n", `config.toml:2: server.addr: an empty host listens on every interface: the API would be reachable from other machines; use 127.0.0.1 (or ::1), or set server.allow_non_loopback = true to mean it`},
		{"[server]\naddr = \"localhost\"\n", `config.toml:2: server.addr: "localhost" is not host:port (such as "127.0.0.1:8080")`},
		{"[provider]\nname = \"My Plugin\"\n", `config.toml:2: provider.name: "My Plugin" is not a plugin name (lower-case letters, digits, - and _)`},
	} {
		if got := only(t, tc.src); got != tc.want {
			t.Errorf("%q:\n got  %s\n want %s", tc.src, got, tc.want)
		}
	}
}

// A provider checks its own table; the problems it names by key come back
// with the file and line of each key, as problems found at load do.
func TestProviderErrorPointsAtLines(t *testing.T) {
	c := mustParse(t, `[provider]
name = "acme"

[provider.acme]
flavor = """
agent-ready
"""
zones = [
  "a",
  7,
]
[provider.acme.limits]
cpus = 4
`, t.TempDir())
	var se providers.SettingsError
	se.Add("flavor", "unknown flavor")
	se.Add("zones[1]", "must be a string")
	se.Add("limits.cpus", "must be at most 2, not 4")
	se.Add("region", "required")
	se.Problems = append(se.Problems, providers.SettingProblem{Message: "must be a table"})
	err := c.ProviderError("acme", providers.Wrap(providers.InvalidArgument, "configure", &se))
	var ce *config.Error
	if !errors.As(err, &ce) {
		t.Fatalf("ProviderError: %T %v, want a *config.Error", err, err)
	}
	got := strings.Split(ce.Error(), "\n")
	want := []string{
		// A key the file lacks points at its table; so does the table.
		`config.toml:4: provider.acme.region: required`,
		`config.toml:4: provider.acme: must be a table`,
		// The line where a multi-line value's key is, not where it ends.
		`config.toml:5: provider.acme.flavor: unknown flavor`,
		`config.toml:8: provider.acme.zones[1]: must be a string`,
		`config.toml:13: provider.acme.limits.cpus: must be at most 2, not 4`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if ce.Problems[2].Key != "provider.acme.flavor" {
		t.Errorf("key %q", ce.Problems[0].Key)
	}
	// Without a table, at [provider]; any other error is left alone.
	c = mustParse(t, "[server]\naddr = \"127.0.0.1:1\"\n[provider]\nname = \"sandy\"\n", t.TempDir())
	var missing providers.SettingsError
	missing.Add("base_url", "required")
	if err := c.ProviderError("sandy", &missing); err == nil || err.Error() != `config.toml:3: provider.sandy.base_url: required` {
		t.Errorf("got %v", err)
	}
	plain := errors.New("plugin crashed")
	if err := c.ProviderError("sandy", plain); err != plain {
		t.Errorf("a plain error became %v", err)
	}
}

func TestSecretsAreNeverWrittenInTheFile(t *testing.T) {
	const value = "sk-live-0123456789"
	ps := problems(t, `[provider.sandy]
api_key = "`+value+`"
[provider.acme]
region = "eu"
auth_token = "`+value+`"
[provider.acme.db]
password = "`+value+`"
`)
	var keys []string
	for _, p := range ps {
		keys = append(keys, p.Key)
		if strings.Contains(p.String(), value) {
			t.Errorf("problem echoes the secret: %s", p)
		}
		if !strings.Contains(p.Message, "_env = ") {
			t.Errorf("problem does not say how to name the variable: %s", p)
		}
	}
	if want := []string{"provider.sandy.api_key", "provider.acme.auth_token", "provider.acme.db.password"}; !slices.Equal(keys, want) {
		t.Errorf("keys = %q, want %q", keys, want)
	}

	// A secret pasted where its variable's name belongs is refused, unseen.
	for _, src := range []string{
		"[provider.sandy]\napi_key_env = \"" + value + "\"\n",
		"[provider.acme]\ntoken_env = \"" + value + "\"\n",
	} {
		got := only(t, src)
		if strings.Contains(got, value) || !strings.Contains(got, "must be the name of an environment variable") {
			t.Errorf("got %s", got)
		}
	}
}

// Every provider's table, local and sandy as much as a third party's,
// reaches its plugin as written: the provider owns its keys and defaults.
func TestProviderTablesPassThrough(t *testing.T) {
	c := mustParse(t, `[provider]
name = "acme"

[provider.acme]
endpoint = "https://acme.example"
zones = ["a", "b"]
weight = 0.5
token_env = "ACME_TOKEN"

[provider.acme.limits]
cpus = 4
`, t.TempDir())
	got := c.ProviderSettings("acme")
	var v map[string]any
	if err := json.Unmarshal(got, &v); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	want := map[string]any{
		"endpoint":  "https://acme.example",
		"zones":     []any{"a", "b"},
		"weight":    0.5,
		"token_env": "ACME_TOKEN",
		"limits":    map[string]any{"cpus": float64(4)},
	}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("settings = %s", got)
	}
	if p := c.PluginPath("acme"); p != filepath.Join(c.Dir, "bin", "plugins", "sandstep-provider-acme") {
		t.Errorf("PluginPath = %s", p)
	}
	// A plugin with no table gets an empty object.
	if got := c.ProviderSettings("other"); string(got) != "{}" {
		t.Errorf("settings without a table = %s", got)
	}
	// A non-table key in [provider] is still an unknown key.
	if got := only(t, "[provider]\nnmae = \"x\"\n"); got != `config.toml:2: unknown key "provider.nmae" (did you mean "name"?)` {
		t.Errorf("got %s", got)
	}
}

func TestArrayOfTablesGivesNoWrongLine(t *testing.T) {
	// The parser keeps one position per key path, so the line of a key in
	// the first of two [[tables]] is unknown: the problem names the element
	// instead of pointing at the wrong one.
	ps := problems(t, `[provider.acme]
[[provider.acme.pools]]
password = "x"
[[provider.acme.pools]]
size = 2
`)
	if len(ps) != 1 || ps[0].Key != "provider.acme.pools[0].password" || ps[0].Line != 0 {
		t.Errorf("got %+v", ps)
	}
	ps = problems(t, "[provider.acme]\n[[provider.acme.pools]]\n\npassword = \"x\"\n")
	if len(ps) != 1 || ps[0].Key != "provider.acme.pools[0].password" || ps[0].Line != 4 {
		t.Errorf("got %+v", ps)
	}
}

func TestProviderSecrets(t *testing.T) {
	c := mustParse(t, `[provider]
name = "sandy"
[provider.sandy]
base_url = "https://sandy.example.com"
api_key_env = "MY_SANDY_KEY"
[provider.acme]
token_env = "ACME_TOKEN"
signing_key_env = "ACME_SIGNING_KEY"
unused_env = ""
`, t.TempDir())
	const sandyKey, acmeToken = "sandy-secret-1", "acme-secret-2"
	env := map[string]string{"MY_SANDY_KEY": sandyKey, "ACME_TOKEN": acmeToken}
	getenv := func(k string) string { return env[k] }

	got, err := c.ProviderSecrets("sandy", getenv)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, map[string]string{"api_key": sandyKey}) {
		t.Errorf("sandy secrets = %v", got)
	}

	_, err = c.ProviderSecrets("acme", getenv)
	var ce *config.Error
	if !errors.As(err, &ce) || len(ce.Problems) != 1 {
		t.Fatalf("err = %v", err)
	}
	want := `config.toml:8: provider.acme.signing_key_env: environment variable ACME_SIGNING_KEY is not set or is empty`
	if ce.Problems[0].String() != want {
		t.Errorf("got  %s\nwant %s", ce.Problems[0], want)
	}
	if strings.Contains(err.Error(), acmeToken) || strings.Contains(err.Error(), sandyKey) {
		t.Errorf("error shows a secret: %v", err)
	}

	env["ACME_SIGNING_KEY"] = "k"
	got, err = c.ProviderSecrets("acme", getenv)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, map[string]string{"token": acmeToken, "signing_key": "k"}) {
		t.Errorf("acme secrets = %v", got)
	}

	// A variable that is named must be set.
	_, err = c.ProviderSecrets("sandy", func(string) string { return "" })
	if err == nil || err.Error() != `config.toml:5: provider.sandy.api_key_env: environment variable MY_SANDY_KEY is not set or is empty` {
		t.Errorf("err = %v", err)
	}
	// The local provider has no secrets.
	if got, err := c.ProviderSecrets("local", getenv); err != nil || len(got) != 0 {
		t.Errorf("local secrets = %v, %v", got, err)
	}
}

func TestRelativePathsResolveAgainstTheConfigFolder(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "etc", "sandstep.toml")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(src string) {
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("[server]\ndata_dir = \"../var\"\n[provider]\nplugin_dir = \"plugins\"\n")
	// From another working directory, to show it does not matter.
	t.Chdir(t.TempDir())
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	etc := filepath.Join(dir, "etc")
	for _, tc := range []struct{ name, got, want string }{
		{"Dir", c.Dir, etc},
		{"data_dir", c.Server.DataDir, filepath.Join(dir, "var")},
		{"plugin_dir", c.Provider.PluginDir, filepath.Join(etc, "plugins")},
		{"ProviderDataDir", c.ProviderDataDir("local"), filepath.Join(dir, "var", "local")},
		{"PluginPath", c.PluginPath("local"), filepath.Join(etc, "plugins", "sandstep-provider-local")},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %s, want %s", tc.name, tc.got, tc.want)
		}
	}

	// A provider's own relative paths are the provider's to resolve: it
	// gets the folder they are relative to (providers.Config.BaseDir).
	write("[provider.local]\nstate_dir = \"state\"\n")
	if c, err = config.Load(path); err != nil {
		t.Fatal(err)
	}
	if got := string(c.ProviderSettings("local")); got != `{"state_dir":"state"}` || c.Dir != etc {
		t.Errorf("settings %s, Dir %s", got, c.Dir)
	}
}

func TestLoadUsesSandstepConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "other.toml")
	if err := os.WriteFile(path, []byte("[server]\naddr = \"127.0.0.1:9999\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(config.EnvPath, path)
	c, err := config.Load("")
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.Addr != "127.0.0.1:9999" || c.File != path {
		t.Errorf("loaded %s with addr %s", c.File, c.Server.Addr)
	}
	// Problems name the file as given.
	if err := os.WriteFile(path, []byte("[server]\nport = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(""); err == nil || !strings.HasPrefix(err.Error(), path+":2: ") {
		t.Errorf("err = %v", err)
	}
	t.Setenv(config.EnvPath, filepath.Join(t.TempDir(), "missing.toml"))
	if _, err := config.Load(""); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v", err)
	}
}

func TestListenAddrs(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:8080", "[::1]:0", "localhost:9000", "127.1.2.3:80"} {
		if _, err := config.Parse([]byte("[server]\naddr = \""+ok+"\"\n"), "config.toml", t.TempDir()); err != nil {
			t.Errorf("addr %s: %v", ok, err)
		}
	}
	c, err := config.Parse([]byte("[server]\naddr = \"0.0.0.0:8080\"\nallow_non_loopback = true\n"), "config.toml", t.TempDir())
	if err != nil || c.Server.Addr != "0.0.0.0:8080" {
		t.Errorf("a non-loopback address with allow_non_loopback: %v", err)
	}
	if err := config.CheckListenAddr("192.0.2.2:8080", false); err == nil {
		t.Error("CheckListenAddr accepted a non-loopback address")
	}
}

func TestSandboxDefaults(t *testing.T) {
	c := mustParse(t, "[sandbox]\nlifetime = \"1h\"\nidle_timeout = \"0s\"\nnetwork = \"allowlist\"\nallow_hosts = [\"pypi.org\", \"*.github.com:443\"]\nallow_private = [\"127.0.0.1:8443\", \"10.1.2.0/24\"]\n", t.TempDir())
	want := providers.SandboxDefaults{
		Lifetime:     time.Hour,
		IdleTimeout:  0,
		ExecTimeout:  5 * time.Minute,
		MemoryMB:     1024,
		Network:      providers.NetworkPolicy{Mode: providers.NetworkAllowlist, AllowHosts: []string{"pypi.org", "*.github.com:443"}},
		AllowPrivate: []string{"127.0.0.1:8443", "10.1.2.0/24"},
	}
	if got := c.SandboxDefaults(); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

func TestEmptyFileGetsDefaults(t *testing.T) {
	c := mustParse(t, "", t.TempDir())
	if c.Provider.Name != "local" || c.Server.Addr != "127.0.0.1:8080" || c.Sandbox.Network != providers.NetworkNone ||
		string(c.ProviderSettings("local")) != "{}" {
		t.Errorf("defaults = %+v", c)
	}
}

func TestShippedConfigLoads(t *testing.T) {
	c, err := config.Load(filepath.Join("..", "config.toml"))
	if err != nil {
		t.Fatalf("the shipped config.toml has problems:\n%v", err)
	}
	// It documents the defaults: loading it or nothing gives the same.
	empty := mustParse(t, "", c.Dir)
	c.File, empty.File = "", ""
	if !reflect.DeepEqual(c.Server, empty.Server) || !reflect.DeepEqual(c.Provider, empty.Provider) || !reflect.DeepEqual(c.Sandbox, empty.Sandbox) {
		t.Errorf("config.toml differs from the defaults:\n%+v\n%+v", c, empty)
	}
}

// BenchmarkLoadShipped measures what a Lambda cold start pays to load the
// configuration.
func BenchmarkLoadShipped(b *testing.B) {
	path := filepath.Join("..", "config.toml")
	for b.Loop() {
		if _, err := config.Load(path); err != nil {
			b.Fatal(err)
		}
	}
}

// A misspelt provider name gets a suggestion, as an unknown key does: a
// name sandstep ships, one with a table in the file, or one whose plugin
// is built. A name near none of them may be a plugin not built yet.
func TestProviderNameTypo(t *testing.T) {
	dir := t.TempDir()
	plugins := filepath.Join(dir, "bin", "plugins")
	if err := os.MkdirAll(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(plugins, "sandstep-provider-modal"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	parse := func(src string) string {
		_, err := config.Parse([]byte(src), "config.toml", dir)
		if err == nil {
			return ""
		}
		return err.Error()
	}
	for src, want := range map[string]string{
		"[provider]\nname = \"lcoal\"\n":                        `config.toml:2: provider.name: unknown provider "lcoal" (did you mean "local"?): there is no sandstep-provider-lcoal in ` + plugins,
		"\n[provider]\nname = \"sandyy\"\n":                     `config.toml:3: provider.name: unknown provider "sandyy" (did you mean "sandy"?)`,
		"[provider]\nname = \"modl\"\n":                         `config.toml:2: provider.name: unknown provider "modl" (did you mean "modal"?)`,
		"[provider]\nname = \"acne\"\n[provider.acme]\nx = 1\n": `config.toml:2: provider.name: unknown provider "acne" (did you mean "acme"?)`,
		"[provider]\nname = \"modal\"\n":                        "",
		"[provider]\nname = \"local\"\n":                        "",
		"[provider]\nname = \"acme\"\n[provider.acme]\nx = 1\n": "",
		"[provider]\nname = \"firecracker\"\n":                  "",
	} {
		if got := parse(src); (want == "") != (got == "") || !strings.HasPrefix(got, want) {
			t.Errorf("%q: got %q, want %q", src, got, want)
		}
	}
}
