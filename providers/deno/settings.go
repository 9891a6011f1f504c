package deno

import (
	"errors"
	"net/url"
	"strings"
	"time"

	"github.com/sandstep/sandstep/providers"
)

// Settings is [provider.deno] of config.toml: Deno Sandbox, spoken to over
// its console REST API and the regional WebSocket JSON-RPC API. Configure
// decodes it over DefaultSettings and checks it (ParseSettings).
type Settings struct {
	// TokenEnv names the environment variable holding the token: an
	// organisation token (ddo_...) or a personal one (ddp_...) with Org.
	// The host resolves it into the secret "token"; no default, so the
	// host resolves what the file says.
	TokenEnv string `json:"token_env"`
	// Org is the organisation's slug, sent as X-Deno-Org; a personal token
	// needs it.
	Org string `json:"org"`
	// Region of sandboxes, volumes and snapshots: volumes and snapshots
	// exist only in "ord" today.
	Region string `json:"region"`
	// ConsoleURL is the console API; SandboxURL the regional sandbox API,
	// "" meaning https://<region>.sandbox-api.deno.net. Overrides are for
	// the fake (sandstep fake-deno) or a proxy.
	ConsoleURL string `json:"console_url"`
	SandboxURL string `json:"sandbox_url"`
	// MemoryMB of a sandbox whose spec asks for none, 768 to 4096.
	MemoryMB int `json:"memory_mb"`
	// VolumeCapacityMB is the capacity of a volume whose spec names none;
	// SnapshotCapacityMB that of the volume a snapshot is built on.
	VolumeCapacityMB   int `json:"volume_capacity_mb"`
	SnapshotCapacityMB int `json:"snapshot_capacity_mb"`
	// RequestTimeout bounds one REST request or RPC call that is not an
	// exec; CreateTimeout the whole create, waits for a free sandbox slot
	// (Deno runs 5 per organisation) and for a volume to detach included.
	RequestTimeout providers.Duration `json:"request_timeout"`
	CreateTimeout  providers.Duration `json:"create_timeout"`
}

// DefaultSettings returns the settings an empty table leaves; config.toml
// documents each.
func DefaultSettings() Settings {
	return Settings{
		Region:             "ord",
		ConsoleURL:         "https://console.deno.com",
		MemoryMB:           1280,
		VolumeCapacityMB:   1000,
		SnapshotCapacityMB: 10000,
		RequestTimeout:     providers.Duration(60 * time.Second),
		CreateTimeout:      providers.Duration(3 * time.Minute),
	}
}

// Regions Deno runs sandboxes in.
var regions = []string{"ord", "ams"}

// ParseSettings decodes settings JSON over DefaultSettings and checks it;
// every problem comes back at once in a *providers.SettingsError naming its
// key.
func ParseSettings(data []byte) (Settings, error) {
	s := DefaultSettings()
	var e providers.SettingsError
	if err := providers.DecodeSettings(data, &s); err != nil {
		var de *providers.SettingsError
		if !errors.As(err, &de) {
			return Settings{}, err
		}
		e.Problems = append(e.Problems, de.Problems...)
	}
	switch s.Region {
	case "ord", "ams":
	default:
		e.Add("region", "must be \"ord\" or \"ams\" (volumes and snapshots exist only in \"ord\"), not %q", s.Region)
	}
	checkURL := func(key, v string, required bool) string {
		if v == "" && !required {
			return ""
		}
		u, err := url.Parse(v)
		switch {
		case v == "":
			e.Add(key, "required: such as \"https://console.deno.com\"")
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			e.Add(key, "must be an http or https URL with a host")
		case u.User != nil || u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/"):
			e.Add(key, "must be an origin only: no credentials, path, query or fragment")
		}
		return strings.TrimRight(v, "/")
	}
	s.ConsoleURL = checkURL("console_url", s.ConsoleURL, true)
	s.SandboxURL = checkURL("sandbox_url", s.SandboxURL, false)
	if s.MemoryMB < 768 || s.MemoryMB > 4096 {
		e.Add("memory_mb", "must be from 768 to 4096 (MiB), not %d", s.MemoryMB)
	}
	for _, c := range []struct {
		key string
		v   int
	}{{"volume_capacity_mb", s.VolumeCapacityMB}, {"snapshot_capacity_mb", s.SnapshotCapacityMB}} {
		if c.v < 300 || c.v > 20000 {
			e.Add(c.key, "must be from 300 to 20000 (MB), Deno's volume sizes, not %d", c.v)
		}
	}
	for _, d := range []struct {
		key string
		v   providers.Duration
	}{{"request_timeout", s.RequestTimeout}, {"create_timeout", s.CreateTimeout}} {
		if d.v <= 0 {
			e.Add(d.key, "must be longer than zero, not %s", d.v)
		}
	}
	if err := e.Err(); err != nil {
		return Settings{}, err
	}
	return s, nil
}

// sandboxOrigin is the regional API's origin.
func (s Settings) sandboxOrigin() string {
	if s.SandboxURL != "" {
		return s.SandboxURL
	}
	return "https://" + s.Region + ".sandbox-api.deno.net"
}
