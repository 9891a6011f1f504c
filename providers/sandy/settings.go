package sandy

import (
	"errors"
	"net/url"
	"strings"
	"time"

	"github.com/sandstep/sandstep/providers"
)

// Settings is [provider.sandy] of config.toml: the Sandy sandbox service
// over HTTP. The host hands the table over as written; Configure decodes
// it over DefaultSettings and checks it (ParseSettings).
type Settings struct {
	// BaseURL is the Sandy controller, such as "https://sandy.example.com".
	BaseURL string `json:"base_url"`
	// APIKeyEnv names the environment variable holding the API key. The
	// host resolves it and passes the value as the secret "api_key", which
	// is what the provider uses; it has no default, so that the host, which
	// cannot know the provider's defaults, resolves what the file says.
	APIKeyEnv   string `json:"api_key_env"`
	Priority    int    `json:"priority"`
	Preemptable bool   `json:"preemptable"`
	Flavor      string `json:"flavor"`
	Upstream    string `json:"upstream"`
	// RequestTimeout bounds one HTTP request; MaxRetries retries a failed
	// one with exponential backoff from RetryBaseDelay.
	RequestTimeout providers.Duration `json:"request_timeout"`
	MaxRetries     int                `json:"max_retries"`
	RetryBaseDelay providers.Duration `json:"retry_base_delay"`
	// CreateTimeout bounds one create request: a cold start takes tens of
	// seconds.
	CreateTimeout providers.Duration `json:"create_timeout"`
	// WarmupAttempts is how often a new sandbox is probed (status, then a
	// trivial exec) before Create gives up on it.
	WarmupAttempts int `json:"warmup_attempts"`
	// ReadChunkBytes is how much file content or command output one exec
	// brings back; WriteChunkBytes how much one file upload carries.
	ReadChunkBytes  int `json:"read_chunk_bytes"`
	WriteChunkBytes int `json:"write_chunk_bytes"`
}

// DefaultSettings returns the settings an empty table leaves; config.toml
// documents each.
func DefaultSettings() Settings {
	return Settings{
		Priority:        1,
		RequestTimeout:  providers.Duration(60 * time.Second),
		MaxRetries:      4,
		RetryBaseDelay:  providers.Duration(500 * time.Millisecond),
		CreateTimeout:   providers.Duration(180 * time.Second),
		WarmupAttempts:  5,
		ReadChunkBytes:  1 << 20,
		WriteChunkBytes: 1 << 20,
	}
}

// Bounds of read_chunk_bytes and write_chunk_bytes: a chunk travels base64
// encoded inside one JSON body.
const (
	MinChunkBytes = 4 << 10
	MaxChunkBytes = 8 << 20
)

// ParseSettings decodes settings JSON over DefaultSettings and checks it.
// Every problem comes back at once in a *providers.SettingsError, each
// naming its key. The URL is never echoed: it could carry a token.
func ParseSettings(data []byte) (Settings, error) {
	s := DefaultSettings()
	// Values of the wrong type keep their defaults, so the checks below
	// still see every other problem.
	var e providers.SettingsError
	if err := providers.DecodeSettings(data, &s); err != nil {
		var de *providers.SettingsError
		if !errors.As(err, &de) {
			return Settings{}, err
		}
		e.Problems = append(e.Problems, de.Problems...)
	}
	switch u, err := url.Parse(s.BaseURL); {
	case s.BaseURL == "":
		e.Add("base_url", "required: the Sandy controller, such as \"https://sandy.example.com\"")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		e.Add("base_url", "must be an http or https URL with a host, such as \"https://sandy.example.com\"")
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		e.Add("base_url", "must not contain credentials, a query or a fragment (name the API key with api_key_env)")
	default:
		s.BaseURL = strings.TrimRight(s.BaseURL, "/")
	}
	if s.Priority < 0 || s.Priority > 3 {
		e.Add("priority", "must be 0 (critical), 1 (high), 2 (normal) or 3 (low), not %d", s.Priority)
	}
	for _, d := range []struct {
		key string
		v   providers.Duration
	}{{"request_timeout", s.RequestTimeout}, {"retry_base_delay", s.RetryBaseDelay}, {"create_timeout", s.CreateTimeout}} {
		if d.v <= 0 {
			e.Add(d.key, "must be longer than zero, not %s", d.v)
		}
	}
	if s.MaxRetries < 0 || s.MaxRetries > 20 {
		e.Add("max_retries", "must be from 0 to 20, not %d", s.MaxRetries)
	}
	if s.WarmupAttempts < 1 || s.WarmupAttempts > 20 {
		e.Add("warmup_attempts", "must be from 1 to 20, not %d", s.WarmupAttempts)
	}
	for _, c := range []struct {
		key string
		v   int
	}{{"read_chunk_bytes", s.ReadChunkBytes}, {"write_chunk_bytes", s.WriteChunkBytes}} {
		if c.v < MinChunkBytes || c.v > MaxChunkBytes {
			e.Add(c.key, "must be from %d (4 KiB) to %d (8 MiB), not %d", MinChunkBytes, MaxChunkBytes, c.v)
		}
	}
	if err := e.Err(); err != nil {
		return Settings{}, err
	}
	return s, nil
}
