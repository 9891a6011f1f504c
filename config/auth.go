package config

import (
	"encoding/hex"
	"regexp"
	"strings"
)

// AuthConfig is [auth]: who may call the HTTP API. Every caller presents a
// bearer token; the token decides the tenant, and a tenant sees only its
// own jobs. The file holds SHA-256 hashes of tokens, never tokens.
type AuthConfig struct {
	// DevTokenEnv names the environment variable whose value, when set,
	// is a token of the tenant "dev": one secret for a developer's machine
	// without writing its hash anywhere. "" turns it off.
	DevTokenEnv string `toml:"dev_token_env"`
	// Tokens are the issued API tokens.
	Tokens []AuthToken `toml:"tokens"`
}

// AuthToken is one [[auth.tokens]] entry.
type AuthToken struct {
	Tenant string `toml:"tenant"`
	// SHA256 is the hex SHA-256 of the token; check leaves it lower-case.
	SHA256 string `toml:"sha256"`
}

// DevTenant is the tenant of the development token.
const DevTenant = "dev"

// tenantName keeps a tenant usable in labels, logs and key prefixes.
var tenantName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

func (a *AuthConfig) setDefaults() {
	a.DevTokenEnv = "SANDSTEP_DEV_TOKEN"
	a.Tokens = []AuthToken{}
}

func (a *AuthConfig) check(_ *Config, r *report) {
	seen := make(map[string]int, len(a.Tokens))
	for i := range a.Tokens {
		t := &a.Tokens[i]
		el := index("auth.tokens", i)
		if !tenantName.MatchString(t.Tenant) {
			r.add(join(el, "tenant"), "%s.tenant: %q is not a tenant name (1 to 64 letters, digits, '.', '_' and '-', starting with a letter or digit)", el, t.Tenant)
		}
		// The value is never echoed: a token pasted here by mistake must
		// not end up in an error message.
		sum, err := hex.DecodeString(t.SHA256)
		if err != nil || len(sum) != 32 {
			r.add(join(el, "sha256"), "%s.sha256: must be the hex SHA-256 of the token (64 hex digits, as printed by `printf %%s \"$TOKEN\" | sha256sum`); the value is not shown in case it is the token itself", el)
			continue
		}
		t.SHA256 = strings.ToLower(t.SHA256)
		if j, dup := seen[t.SHA256]; dup {
			r.add(join(el, "sha256"), "%s.sha256: the same token hash as auth.tokens[%d]; a token belongs to one tenant", el, j)
			continue
		}
		seen[t.SHA256] = i
	}
}
