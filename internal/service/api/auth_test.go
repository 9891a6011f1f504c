package api_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/api"
)

func TestAuthenticator(t *testing.T) {
	cfg := config.AuthConfig{
		DevTokenEnv: "API_TEST_DEV_TOKEN",
		Tokens:      []config.AuthToken{{Tenant: "acme", SHA256: hashOf(tokenAcme)}, {Tenant: "globex", SHA256: hashOf(tokenGlobex)}},
	}
	env := map[string]string{"API_TEST_DEV_TOKEN": "from-the-environment"}
	a, err := api.NewAuthenticator(cfg, func(k string) string { return env[k] }, tokenDev)
	if err != nil {
		t.Fatal(err)
	}
	for token, want := range map[string]string{
		tokenAcme: "acme", tokenGlobex: "globex", "from-the-environment": "dev", tokenDev: "dev",
		"": "", "acme": "", hashOf(tokenAcme): "", tokenAcme + " ": "",
	} {
		got, ok := a.Tenant(token)
		if got != want || ok != (want != "") {
			t.Errorf("Tenant(%q) = %q, %v; want %q", token, got, ok, want)
		}
	}

	// With os.Getenv.
	t.Setenv("API_TEST_DEV_TOKEN", "set-in-os-env")
	a, err = api.NewAuthenticator(config.AuthConfig{DevTokenEnv: "API_TEST_DEV_TOKEN"}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := a.Tenant("set-in-os-env"); !ok || got != config.DevTenant {
		t.Fatalf("dev token from the environment: %q %v", got, ok)
	}

	// Turned off, or unset, the dev variable gives nothing: with no issued
	// token either, nobody could call the API.
	if _, err := api.NewAuthenticator(config.AuthConfig{DevTokenEnv: ""}, nil, ""); !errors.Is(err, api.ErrNoTokens) {
		t.Fatalf("no tokens: %v", err)
	}
	if _, err := api.NewAuthenticator(config.AuthConfig{DevTokenEnv: "API_TEST_UNSET"}, func(string) string { return "" }, ""); !errors.Is(err, api.ErrNoTokens) {
		t.Fatalf("unset dev variable: %v", err)
	}
	_, err = api.NewAuthenticator(config.AuthConfig{Tokens: []config.AuthToken{{Tenant: "acme", SHA256: "not-hex-" + tokenAcme}}}, nil, "")
	if err == nil || strings.Contains(err.Error(), tokenAcme) {
		t.Fatalf("bad hash: %v", err)
	}
}
