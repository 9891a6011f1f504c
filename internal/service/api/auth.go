package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/sandstep/sandstep/config"
)

// Authenticator maps bearer tokens to tenants. It holds only SHA-256
// hashes, so a token never sits in memory longer than one request.
type Authenticator struct {
	keys []tokenKey
}

type tokenKey struct {
	sum    [sha256.Size]byte
	tenant string
}

// ErrNoTokens: the configuration lets nobody in, which is never what an
// operator wants from an API that answers 401 to everything. The error
// NewAuthenticator returns wraps it with what the configuration lacks.
var ErrNoTokens = errors.New("no API token of any kind")

// NewAuthenticator builds an Authenticator from the [auth] section: every
// [[auth.tokens]] entry, plus the tenant "dev" for the token in the variable
// named by cfg.DevTokenEnv (read through getenv, os.Getenv when nil) and for
// extraDevToken (one the serve command generated), when they are not empty.
func NewAuthenticator(cfg config.AuthConfig, getenv func(string) string, extraDevToken string) (*Authenticator, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	a := &Authenticator{}
	for i, t := range cfg.Tokens {
		sum, err := hex.DecodeString(t.SHA256)
		if err != nil || len(sum) != sha256.Size {
			return nil, fmt.Errorf("auth.tokens[%d].sha256 is not a hex SHA-256", i)
		}
		if t.Tenant == "" {
			return nil, fmt.Errorf("auth.tokens[%d].tenant is empty", i)
		}
		a.keys = append(a.keys, tokenKey{sum: [sha256.Size]byte(sum), tenant: t.Tenant})
	}
	if cfg.DevTokenEnv != "" {
		if tok := getenv(cfg.DevTokenEnv); tok != "" {
			a.keys = append(a.keys, tokenKey{sum: sha256.Sum256([]byte(tok)), tenant: config.DevTenant})
		}
	}
	if extraDevToken != "" {
		a.keys = append(a.keys, tokenKey{sum: sha256.Sum256([]byte(extraDevToken)), tenant: config.DevTenant})
	}
	if len(a.keys) == 0 {
		dev := "the development token is off ([auth] dev_token_env = \"\")"
		if cfg.DevTokenEnv != "" {
			dev = "$" + cfg.DevTokenEnv + " (the development token, [auth] dev_token_env) is not set"
		}
		return nil, fmt.Errorf("%w: %s and [[auth.tokens]] lists none; add an [[auth.tokens]] entry (a tenant and the sha256 of its token)", ErrNoTokens, dev)
	}
	return a, nil
}

// Tenant returns the tenant of token. Every configured hash is compared, in
// constant time, whether or not an earlier one matched, so the answer time
// does not tell how close a guess was or which entry it hit.
func (a *Authenticator) Tenant(token string) (string, bool) {
	if a == nil || token == "" {
		return "", false
	}
	sum := sha256.Sum256([]byte(token))
	tenant := ""
	for _, k := range a.keys {
		if subtle.ConstantTimeCompare(sum[:], k.sum[:]) == 1 && tenant == "" {
			tenant = k.tenant
		}
	}
	return tenant, tenant != ""
}

// bearerToken extracts the token of an "Authorization: Bearer <token>"
// header; the scheme is case-insensitive (RFC 7235).
func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}
