package secrets_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/awsenv"
	"github.com/sandstep/sandstep/internal/service/secrets"
	"github.com/sandstep/sandstep/internal/testkit/fakesecrets"
)

const value = "sk-live-EXAMPLE-0123456789"

func resolverFor(f *fakesecrets.Server, vars map[string]string) *secrets.Resolver {
	env := map[string]string{"AWS_REGION": fakesecrets.Region, "AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "test"}
	for k, v := range vars {
		env[k] = v
	}
	return &secrets.Resolver{AWS: awsenv.FromEnv(func(k string) string { return env[k] }), Getenv: func(k string) string { return env[k] }}
}

func ref(t *testing.T, s string) config.SecretRef {
	t.Helper()
	r, err := config.ParseSecretRef(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Every form of reference reads its value, through the endpoint variable
// of its service; values read from a store are kept until Refresh.
func TestResolveEachForm(t *testing.T) {
	f := fakesecrets.New()
	t.Cleanup(f.Close)
	arn := f.PutSecret("sandy", `{"api_key":"`+value+`","other":1}`)
	f.PutSecret("plain", value)
	parn := f.PutParameter("/sandstep/key", "SecureString", value)
	r := resolverFor(f, map[string]string{
		"AWS_ENDPOINT_URL_SECRETS_MANAGER": f.URL, "AWS_ENDPOINT_URL_SSM": f.URL, "SANDY_API_KEY": value,
	})
	now := time.Now()
	r.Now = func() time.Time { return now }
	r.Refresh = time.Hour
	ctx := context.Background()
	for _, s := range []string{"SANDY_API_KEY", "secretsmanager:plain", "secretsmanager:sandy#api_key", "secretsmanager:" + arn + "#api_key",
		"ssm:/sandstep/key", "ssm:" + parn} {
		got, err := r.Resolve(ctx, ref(t, s))
		if err != nil || got != value {
			t.Errorf("Resolve(%s) = %q, %v", s, got, err)
		}
	}
	sm, ps := f.Calls("GetSecretValue"), f.Calls("GetParameter")
	if sm != 3 || ps != 2 {
		t.Fatalf("store calls = %d, %d; want one per reference", sm, ps)
	}
	if _, err := r.Resolve(ctx, ref(t, "secretsmanager:plain")); err != nil || f.Calls("GetSecretValue") != sm {
		t.Fatalf("a second read within Refresh asked the store again (%v)", err)
	}
	// A rotated value is read once Refresh has passed.
	f.PutSecret("plain", value+"-rotated")
	now = now.Add(time.Hour)
	if got, err := r.Resolve(ctx, ref(t, "secretsmanager:plain")); err != nil || got != value+"-rotated" {
		t.Fatalf("after Refresh: %q, %v", got, err)
	}
}

// Errors name the reference and never hold a value.
func TestErrorsNameTheReference(t *testing.T) {
	f := fakesecrets.New()
	t.Cleanup(f.Close)
	f.PutSecret("notjson", value)
	f.PutSecret("json", `{"api_key":"`+value+`"}`)
	r := resolverFor(f, map[string]string{"AWS_ENDPOINT_URL": f.URL})
	ctx := context.Background()
	for s, want := range map[string]string{
		"secretsmanager:missing":       "secretsmanager:missing: not found (400 ResourceNotFoundException",
		"ssm:/missing":                 "ssm:/missing: not found (400 ParameterNotFound",
		"secretsmanager:notjson#k":     `secretsmanager:notjson#k: the secret's value is not a JSON object, so it has no key "k"`,
		"secretsmanager:json#nokey":    `secretsmanager:json#nokey: the secret has no JSON key "nokey"`,
		"MISSING_VARIABLE_FOR_SECRETS": "environment variable MISSING_VARIABLE_FOR_SECRETS is not set or is empty",
	} {
		_, err := r.Resolve(ctx, ref(t, s))
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), value) {
			t.Errorf("Resolve(%s) = %v, want an error with %q and no value", s, err, want)
		}
		if strings.HasPrefix(want, s+": not found") && !errors.Is(err, secrets.ErrNotFound) {
			t.Errorf("Resolve(%s): %v is not ErrNotFound", s, err)
		}
	}
	// Without AWS credentials, a store reference says what is missing.
	bare := &secrets.Resolver{}
	if _, err := bare.Resolve(ctx, ref(t, "ssm:/x")); err == nil || !strings.Contains(err.Error(), "needs an AWS region and credentials") {
		t.Errorf("without AWS: %v", err)
	}
}

func TestParseSecretRef(t *testing.T) {
	for _, bad := range []string{"sk-live-abc", "vault:x", "secretsmanager:", "secretsmanager:x#", "ssm:", "ssm:a#b",
		"secretsmanager:arn:aws:ssm:us-east-1:0:parameter/x", "ssm:arn:aws:secretsmanager:us-east-1:0:secret:x"} {
		if _, err := config.ParseSecretRef(bad); err == nil {
			t.Errorf("ParseSecretRef(%q) succeeded", bad)
		} else if strings.Contains(err.Error(), "sk-live") && bad == "sk-live-abc" {
			t.Errorf("the error shows the value: %v", err)
		}
	}
	for s, want := range map[string]config.SecretRef{
		"SANDY_API_KEY":                 {Source: config.SourceEnv, ID: "SANDY_API_KEY"},
		"secretsmanager:prod/sandy#key": {Source: config.SourceSecretsManager, ID: "prod/sandy", Key: "key"},
		"ssm:/a/b":                      {Source: config.SourceSSM, ID: "/a/b"},
	} {
		got, err := config.ParseSecretRef(s)
		if err != nil || got != want || got.String() != s {
			t.Errorf("ParseSecretRef(%q) = %+v (%s), %v", s, got, got, err)
		}
	}
}
