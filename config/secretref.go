package config

import (
	"fmt"
	"strings"
)

// Where a secret reference points.
const (
	// SourceEnv: an environment variable ("SANDY_API_KEY").
	SourceEnv = "env"
	// SourceSecretsManager: a Secrets Manager secret by name or ARN,
	// optionally one key of its JSON value:
	// "secretsmanager:sandy-api-key", "secretsmanager:arn:aws:...#api_key".
	SourceSecretsManager = "secretsmanager"
	// SourceSSM: an SSM parameter (a SecureString, decrypted) by name or
	// ARN: "ssm:/sandstep/prod/sandy-api-key".
	SourceSSM = "ssm"
)

// SecretRef is the value of a *_env key: where the secret is read from.
// It names the secret; it never holds it.
type SecretRef struct {
	Source string
	// ID is the variable's name, the secret's name or ARN, or the
	// parameter's name or ARN.
	ID string
	// Key selects one key of a Secrets Manager secret's JSON object.
	Key string
}

// String is the reference as written in config.toml.
func (r SecretRef) String() string {
	switch r.Source {
	case SourceEnv:
		return r.ID
	case SourceSecretsManager:
		if r.Key != "" {
			return r.Source + ":" + r.ID + "#" + r.Key
		}
	}
	return r.Source + ":" + r.ID
}

// ParseSecretRef reads the value of a *_env key: a variable name as
// before, or "secretsmanager:<name or ARN>[#<json key>]", or
// "ssm:<parameter name or ARN>". A variable name has no colon, so the
// forms cannot be confused.
func ParseSecretRef(v string) (SecretRef, error) {
	source, id, ok := strings.Cut(v, ":")
	if !ok {
		if !envName.MatchString(v) {
			return SecretRef{}, fmt.Errorf("must be the name of an environment variable (A-Z, 0-9 and _, such as \"SANDY_API_KEY\"), \"secretsmanager:<name or ARN>[#key]\" or \"ssm:<parameter>\"; the value is not shown in case it is the secret itself")
		}
		return SecretRef{Source: SourceEnv, ID: v}, nil
	}
	switch source {
	case SourceSecretsManager:
		ref := SecretRef{Source: source, ID: id}
		if i := strings.LastIndexByte(id, '#'); i >= 0 {
			ref.ID, ref.Key = id[:i], id[i+1:]
			if ref.Key == "" {
				return SecretRef{}, fmt.Errorf("%q: the JSON key after # is empty", v)
			}
		}
		if ref.ID == "" || strings.ContainsAny(ref.ID, " \t\n") {
			return SecretRef{}, fmt.Errorf("%q: needs a secret's name or ARN after %s:", v, source)
		}
		if strings.HasPrefix(ref.ID, "arn:") && !strings.Contains(ref.ID, ":secretsmanager:") {
			return SecretRef{}, fmt.Errorf("%q: the ARN is not a Secrets Manager secret's", v)
		}
		return ref, nil
	case SourceSSM:
		if id == "" || strings.ContainsAny(id, " \t\n#") {
			return SecretRef{}, fmt.Errorf("%q: needs a parameter's name or ARN after ssm:", v)
		}
		if strings.HasPrefix(id, "arn:") && !strings.Contains(id, ":ssm:") {
			return SecretRef{}, fmt.Errorf("%q: the ARN is not an SSM parameter's", v)
		}
		return SecretRef{Source: source, ID: id}, nil
	}
	return SecretRef{}, fmt.Errorf("unknown secret source %q: use an environment variable's name, \"secretsmanager:...\" or \"ssm:...\"", source)
}

// SecretLookup reads a referenced secret's value.
type SecretLookup func(SecretRef) (string, error)

// EnvLookup reads references to environment variables through getenv and
// refuses the others: where no AWS secret store is configured (the CLI, a
// test).
func EnvLookup(getenv func(string) string) SecretLookup {
	return func(r SecretRef) (string, error) {
		if r.Source != SourceEnv {
			return "", fmt.Errorf("%s: reading %s needs the AWS environment of a Lambda or of `sandstep serve` with AWS credentials", r, r.Source)
		}
		v := getenv(r.ID)
		if v == "" {
			return "", fmt.Errorf("environment variable %s is not set or is empty", r.ID)
		}
		return v, nil
	}
}
