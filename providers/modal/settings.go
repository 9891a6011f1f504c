package modal

import (
	"errors"
	"net/url"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/sandstep/sandstep/providers"
)

// Settings is [provider.modal] of config.toml. The host hands the table
// over as written; Configure decodes it over DefaultSettings and checks it
// (ParseSettings).
type Settings struct {
	// AppName is the Modal App the sandboxes belong to (created if missing);
	// Environment the Modal environment ("" = the workspace's default).
	AppName     string `json:"app_name"`
	Environment string `json:"environment"`
	// Image is a registry image ("python:3.12-slim"); ImageCommands are
	// Dockerfile commands run on top of it once, cached by Modal, such as
	// "RUN pip install httpx".
	Image         string   `json:"image"`
	ImageCommands []string `json:"image_commands"`
	// TokenIDEnv and TokenSecretEnv name the environment variables holding
	// the Modal token; the host resolves them into the secrets "token_id"
	// and "token_secret".
	TokenIDEnv     string `json:"token_id_env"`
	TokenSecretEnv string `json:"token_secret_env"`
	// Region places sandboxes ("us-east", "eu"); "" = anywhere.
	Region string `json:"region"`
	// CPU in cores and MemoryMB requested per sandbox; 0 = Modal's default
	// (for memory: [sandbox] memory_mb).
	CPU      float64 `json:"cpu"`
	MemoryMB int     `json:"memory_mb"`
	// Timeout and IdleTimeout are the lifetime and idle timeout of a
	// sandbox whose request and [sandbox] say nothing; Modal caps the
	// lifetime at 24 hours.
	Timeout     providers.Duration `json:"timeout"`
	IdleTimeout providers.Duration `json:"idle_timeout"`
	// Workdir is where commands run when they name no directory.
	Workdir string `json:"workdir"`
	// OpenPorts are container ports every sandbox exposes through a
	// Modal tunnel (PortURLs says where); Modal opens them at create only.
	OpenPorts []int `json:"open_ports"`
	// ServerURL is Modal's control plane; tests point it at a fake
	// (http:// only on loopback).
	ServerURL string `json:"server_url"`
	// RequestTimeout bounds one call; MaxRetries retries a transient
	// failure with exponential backoff from RetryBaseDelay; MaxThrottleWait
	// bounds how long a rate-limited create waits in all.
	RequestTimeout  providers.Duration `json:"request_timeout"`
	MaxRetries      int                `json:"max_retries"`
	RetryBaseDelay  providers.Duration `json:"retry_base_delay"`
	MaxThrottleWait providers.Duration `json:"max_throttle_wait"`
}

// DefaultSettings returns what an empty table leaves; config.toml
// documents each.
func DefaultSettings() Settings {
	return Settings{
		AppName:         "sandstep",
		Image:           "python:3.12-slim",
		Workdir:         "/workspace",
		ServerURL:       "https://api.modal.com:443",
		RequestTimeout:  providers.Duration(60 * time.Second),
		MaxRetries:      4,
		RetryBaseDelay:  providers.Duration(100 * time.Millisecond),
		MaxThrottleWait: providers.Duration(60 * time.Second),
	}
}

// maxLifetime is Modal's cap on a sandbox's timeout.
const maxLifetime = 24 * time.Hour

// appName is Modal's rule for object names.
var appName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// ParseSettings decodes settings JSON over DefaultSettings and checks it;
// every problem comes back at once, each naming its key.
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
	if !appName.MatchString(s.AppName) {
		e.Add("app_name", "must be 1 to 64 letters, digits, '.', '-' or '_', not %q", s.AppName)
	}
	if strings.TrimSpace(s.Image) == "" {
		e.Add("image", "required: a registry image such as \"python:3.12-slim\"")
	}
	for i, c := range s.ImageCommands {
		if strings.TrimSpace(c) == "" || strings.ContainsAny(c, "\n\r") {
			e.Add("image_commands["+itoa(i)+"]", "must be one Dockerfile command on one line, such as \"RUN pip install httpx\"")
		}
	}
	if s.CPU < 0 || s.CPU > 64 {
		e.Add("cpu", "must be from 0 (Modal's default) to 64 cores, not %g", s.CPU)
	}
	if s.MemoryMB < 0 || s.MemoryMB > 336*1024 {
		e.Add("memory_mb", "must be from 0 (the [sandbox] default) to 344064, not %d", s.MemoryMB)
	}
	if s.Timeout < 0 || s.Timeout.D() > maxLifetime {
		e.Add("timeout", "must be from 0 (the [sandbox] lifetime) to 24h, Modal's cap, not %s", s.Timeout)
	}
	if s.IdleTimeout < 0 || s.IdleTimeout.D() > maxLifetime {
		e.Add("idle_timeout", "must be from 0 (the [sandbox] idle timeout) to 24h, not %s", s.IdleTimeout)
	}
	for i, port := range s.OpenPorts {
		if port < 1 || port > 65535 {
			e.Add("open_ports["+itoa(i)+"]", "must be a port from 1 to 65535, not %d", port)
		}
	}
	if !path.IsAbs(s.Workdir) || path.Clean(s.Workdir) != s.Workdir {
		e.Add("workdir", "must be a clean absolute path, not %q", s.Workdir)
	}
	switch u, err := url.Parse(s.ServerURL); {
	case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		e.Add("server_url", "must be an https URL with a host, such as \"https://api.modal.com:443\"")
	case u.User != nil || u.RawQuery != "" || (u.Path != "" && u.Path != "/"):
		e.Add("server_url", "must be scheme, host and port only (name the token with token_id_env and token_secret_env)")
	case u.Scheme == "http" && !isLoopback(u.Hostname()):
		e.Add("server_url", "may be plain http only on a loopback address (a fake Modal in tests); use https")
	}
	for _, d := range []struct {
		key string
		v   providers.Duration
	}{{"request_timeout", s.RequestTimeout}, {"retry_base_delay", s.RetryBaseDelay}, {"max_throttle_wait", s.MaxThrottleWait}} {
		if d.v <= 0 {
			e.Add(d.key, "must be longer than zero, not %s", d.v)
		}
	}
	if s.MaxRetries < 0 || s.MaxRetries > 20 {
		e.Add("max_retries", "must be from 0 to 20, not %d", s.MaxRetries)
	}
	if err := e.Err(); err != nil {
		return Settings{}, err
	}
	return s, nil
}

func isLoopback(host string) bool {
	return host == "localhost" || host == "127.0.0.1" || host == "::1"
}
