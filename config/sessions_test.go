package config_test

import (
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
)

func TestSessionsDefaults(t *testing.T) {
	s := mustParse(t, "", t.TempDir()).Sessions
	if s.Enabled || s.Mode != config.SessionModeLazy || s.VolumeTTL() != 30*time.Minute || s.SandboxIdle() != 5*time.Minute ||
		s.Timeout() != time.Minute || s.MaxTimeout() != 10*time.Minute || s.SyncWait.D() != 25*time.Second ||
		s.ReaperInterval.D() != time.Minute || s.MemoryMB != 1024 || s.VolumeCapacityMB != 1024 || s.Region != "" ||
		s.Dependencies == nil || len(s.Dependencies) != 0 || s.BuildEnv == nil || len(s.BuildEnv) != 0 || s.SnapshotRetryAfter.D() != 5*time.Minute {
		t.Fatalf("Sessions = %+v", s)
	}
}

func TestShippedSessionsAreTheDefaults(t *testing.T) {
	c, err := config.Load(filepath.Join("..", "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if empty := mustParse(t, "", c.Dir); !reflect.DeepEqual(c.Sessions, empty.Sessions) {
		t.Errorf("config.toml [sessions] differs from the defaults:\n%+v\n%+v", c.Sessions, empty.Sessions)
	}
}

func TestSessionsWithDependencies(t *testing.T) {
	s := mustParse(t, `[sessions]
enabled = true
mode = "warm"
volume_ttl_minutes = 60
sandbox_idle_minutes = 10
timeout_seconds = 30
max_timeout_seconds = 120
sync_wait = "10s"
reaper_interval = "30s"
region = "ord"
build_env = ["HTTPS_PROXY", "NODE_EXTRA_CA_CERTS"]
snapshot_retry_after = "0s"

[[sessions.dependencies]]
package = "@linear/sdk"
docs = ["https://linear.app/developers/sdk.md"]
secret_env = "LINEAR_API_KEY"
hosts = ["api.linear.app"]

[[sessions.dependencies]]
package = "pip:requests==2.32.3"
`, t.TempDir()).Sessions
	want := []config.SessionDependency{
		{Package: "@linear/sdk", Docs: []string{"https://linear.app/developers/sdk.md"}, SecretEnv: "LINEAR_API_KEY", Hosts: []string{"api.linear.app"}},
		{Package: "pip:requests==2.32.3", Docs: []string{}, Hosts: []string{}},
	}
	if !s.Enabled || s.Mode != "warm" || s.VolumeTTL() != time.Hour || s.SandboxIdle() != 10*time.Minute ||
		s.Timeout() != 30*time.Second || s.MaxTimeout() != 2*time.Minute || s.SyncWait.D() != 10*time.Second ||
		s.ReaperInterval.D() != 30*time.Second || s.Region != "ord" || !reflect.DeepEqual(s.Dependencies, want) ||
		!slices.Equal(s.BuildEnv, []string{"HTTPS_PROXY", "NODE_EXTRA_CA_CERTS"}) || s.SnapshotRetryAfter != 0 {
		t.Fatalf("Sessions = %+v", s)
	}
}

func TestSessionsProblems(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"[sessions]\nmode = \"eager\"\n", `config.toml:2: sessions.mode: must be "lazy" or "warm", not "eager"`},
		{"[sessions]\nvolume_ttl_minutes = 0\n", "config.toml:2: sessions.volume_ttl_minutes: must be at least 1, not 0"},
		{"[sessions]\nsandbox_idle_minutes = 0\n", "config.toml:2: sessions.sandbox_idle_minutes: must be at least 1, not 0"},
		{"[sessions]\nvolume_ttl_minutes = 5\nsandbox_idle_minutes = 6\n", "config.toml:3: sessions.sandbox_idle_minutes (6) must not be longer than sessions.volume_ttl_minutes (5): a kept sandbox holds its volume"},
		{"[sessions]\nmax_timeout_seconds = 900\n", "config.toml:2: sessions.max_timeout_seconds: must be from 1 to 840, not 900"},
		{"[sessions]\ntimeout_seconds = 700\n", "config.toml:2: sessions.timeout_seconds: must be from 1 to sessions.max_timeout_seconds (600), not 700"},
		{"[sessions]\nmemory_mb = 10\n", "config.toml:2: sessions.memory_mb: must be from 64 to 65536, not 10"},
		{"[sessions]\nvolume_capacity_mb = 0\n", "config.toml:2: sessions.volume_capacity_mb: must be at least 1, not 0"},
		{"[sessions]\nsync_wait = \"30s\"\n", "config.toml:2: sessions.sync_wait: must be longer than zero and at most 28s (API Gateway cuts requests at 30s), not 30s"},
		{"[sessions]\nsync_wait = \"0s\"\n", "config.toml:2: sessions.sync_wait: must be longer than zero and at most 28s (API Gateway cuts requests at 30s), not 0s"},
		{"[sessions]\nreaper_interval = \"10ms\"\n", "config.toml:2: sessions.reaper_interval: must be at least 1s, not 10ms"},
		{"[sessions]\nsnapshot_retry_after = \"-1s\"\n", "config.toml:2: sessions.snapshot_retry_after: must be 0s or more, not -1s"},
		{"[sessions]\nbuild_env = [\"http://user:pw@proxy:3128\"]\n", `config.toml:2: sessions.build_env[0]: must be the name of an environment variable (A-Z, 0-9 and _, such as "HTTPS_PROXY"); the value is not shown in case it is a secret`},
		{"[sessions]\nbuild_env = [\"HTTPS_PROXY\", \"HTTPS_PROXY\"]\n", "config.toml:2: sessions.build_env[1]: HTTPS_PROXY is already sessions.build_env[0]"},
		{"[sessions]\nbuild_envs = []\n", `config.toml:2: unknown key "sessions.build_envs" (did you mean "build_env"?)`},
		{"[[sessions.dependencies]]\npackage = \"\"\n", `config.toml:2: sessions.dependencies[0].package: must name a package, such as "lodash@4.17.21" (npm) or "pip:requests==2.32.3"`},
		{"[[sessions.dependencies]]\npackage = \"pip:\"\n", `config.toml:2: sessions.dependencies[0].package: must name a package, such as "lodash@4.17.21" (npm) or "pip:requests==2.32.3"`},
		{"[[sessions.dependencies]]\npackage = \"--registry=http://evil\"\n", "config.toml:2: sessions.dependencies[0].package: must not start with '-'"},
		{"[[sessions.dependencies]]\npackage = \"lodash; rm -rf /\"\n", "config.toml:2: sessions.dependencies[0].package: must not contain blanks or control characters"},
		{"[[sessions.dependencies]]\npackage = \"zod\"\ndocs = [\"ftp://x\"]\n", `config.toml:3: sessions.dependencies[0].docs[0]: "ftp://x" is not an http or https URL`},
		{"[[sessions.dependencies]]\npackage = \"zod\"\nhosts = [\"api.example.com\"]\n", "config.toml:3: sessions.dependencies[0].hosts: only used with secret_env (the hosts the secret may be sent to)"},
		{"[[sessions.dependencies]]\npackage = \"zod\"\nsecret_env = \"K\"\nhosts = [\"https://api.example.com/\"]\n", `config.toml:4: sessions.dependencies[0].hosts[0]: "https://api.example.com/" is not a host name (such as "api.linear.app" or "*.example.com", optionally with :port; no scheme or path)`},
		{"[[sessions.dependencies]]\npackage = \"zod\"\nsecret_env = \"sk-live-abc\"\n", `config.toml:3: sessions.dependencies[0].secret_env: must be the name of an environment variable (A-Z, 0-9 and _, such as "SANDY_API_KEY"); the value is not shown in case it is the secret itself`},
		{"[[sessions.dependencies]]\npackage = \"zod\"\nsecret = \"sk-live-abc\"\n", `config.toml:3: sessions.dependencies[0].secret: secrets are never written in the config file; put the value in an environment variable and name it: secret_env = "VARIABLE"`},
	} {
		if got := only(t, tc.src); got != tc.want {
			t.Errorf("%q:\n got  %s\n want %s", tc.src, got, tc.want)
		}
	}
}

// Both problems of one source are reported, in file order.
func TestSessionsDuplicateDependencies(t *testing.T) {
	ps := problems(t, `[[sessions.dependencies]]
package = "zod"
secret_env = "K"

[[sessions.dependencies]]
package = "zod"
secret_env = "K"
`)
	var got []string
	for _, p := range ps {
		got = append(got, p.Message)
	}
	want := []string{
		`sessions.dependencies[1].package: "zod" is already sessions.dependencies[0]`,
		"sessions.dependencies[1].secret_env: K is already the secret of sessions.dependencies[0]",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("problems = %q, want %q", got, want)
	}
}
