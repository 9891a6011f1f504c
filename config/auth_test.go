package config_test

import (
	"strings"
	"testing"

	"github.com/sandstep/sandstep/config"
)

const hashA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" // sha256("test")

func TestAuthDefaults(t *testing.T) {
	c := mustParse(t, "", t.TempDir())
	if c.Auth.DevTokenEnv != "SANDSTEP_DEV_TOKEN" || len(c.Auth.Tokens) != 0 {
		t.Fatalf("Auth = %+v", c.Auth)
	}
}

func TestAuthTokens(t *testing.T) {
	c := mustParse(t, `[auth]
dev_token_env = ""

[[auth.tokens]]
tenant = "acme"
sha256 = "`+strings.ToUpper(hashA)+`"

[[auth.tokens]]
tenant = "globex.eu-1"
sha256 = "`+strings.Repeat("ab", 32)+`"
`, t.TempDir())
	want := []config.AuthToken{{Tenant: "acme", SHA256: hashA}, {Tenant: "globex.eu-1", SHA256: strings.Repeat("ab", 32)}}
	if c.Auth.DevTokenEnv != "" || len(c.Auth.Tokens) != 2 || c.Auth.Tokens[0] != want[0] || c.Auth.Tokens[1] != want[1] {
		t.Fatalf("Auth = %+v, want tokens %+v (hashes lower-cased) and no dev token", c.Auth, want)
	}
}

func TestAuthProblems(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"[[auth.tokens]]\ntenant = \"\"\nsha256 = \"" + hashA + "\"\n",
			`config.toml:2: auth.tokens[0].tenant: "" is not a tenant name (1 to 64 letters, digits, '.', '_' and '-', starting with a letter or digit)`},
		{"[[auth.tokens]]\ntenant = \"a b\"\nsha256 = \"" + hashA + "\"\n",
			`config.toml:2: auth.tokens[0].tenant: "a b" is not a tenant name (1 to 64 letters, digits, '.', '_' and '-', starting with a letter or digit)`},
		{"[[auth.tokens]]\ntenant = \"acme\"\n",
			"config.toml:1: auth.tokens[0].sha256: must be the hex SHA-256 of the token (64 hex digits, as printed by `printf %s \"$TOKEN\" | sha256sum`); the value is not shown in case it is the token itself"},
		{"[auth]\ntokens = \"acme\"\n", `config.toml:2: auth.tokens: must be an array, not a string`},
		{"[auth]\ntokens = [{ tenant = \"acme\", sha256 = \"" + hashA + "\", note = 1 }]\n",
			`config.toml:2: unknown key "auth.tokens[0].note" (known keys in [auth.tokens[0]]: sha256, tenant)`},
		{"[auth]\ndev_token_env = \"sandstep_dev\"\n",
			`config.toml:2: auth.dev_token_env: must be the name of an environment variable (A-Z, 0-9 and _, such as "SANDY_API_KEY"); the value is not shown in case it is the secret itself`},
		{"[[auth.tokens]]\ntenant = \"acme\"\ntoken = \"s3cr3t\"\nsha256 = \"" + hashA + "\"\n",
			`config.toml:3: auth.tokens[0].token: secrets are never written in the config file; put the value in an environment variable and name it: token_env = "VARIABLE"`},
	} {
		if got := only(t, tc.src); got != tc.want {
			t.Errorf("%q:\n got  %s\n want %s", tc.src, got, tc.want)
		}
	}
}

// A token pasted where its hash belongs is refused without being echoed.
func TestAuthHashProblemHidesTheValue(t *testing.T) {
	const token = "sk-live-0123456789abcdef"
	ps := problems(t, "[[auth.tokens]]\ntenant = \"acme\"\nsha256 = \""+token+"\"\n")
	if len(ps) != 1 || ps[0].Key != "auth.tokens[0].sha256" {
		t.Fatalf("problems = %v", ps)
	}
	if strings.Contains(ps[0].String(), token) {
		t.Fatalf("the problem shows the value: %s", ps[0])
	}
}

func TestAuthDuplicateHash(t *testing.T) {
	ps := problems(t, `[[auth.tokens]]
tenant = "acme"
sha256 = "`+hashA+`"

[[auth.tokens]]
tenant = "globex"
sha256 = "`+strings.ToUpper(hashA)+`"
`)
	if len(ps) != 1 || ps[0].Key != "auth.tokens[1].sha256" ||
		ps[0].Message != "auth.tokens[1].sha256: the same token hash as auth.tokens[0]; a token belongs to one tenant" {
		t.Fatalf("problems = %v", ps)
	}
}
