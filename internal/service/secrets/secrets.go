// Package secrets reads the secrets config.toml's *_env keys name: an
// environment variable, a Secrets Manager secret (by name or ARN, whole or
// one key of its JSON value) or an SSM parameter (a SecureString,
// decrypted). Values are read when a process starts (a Lambda's init) and
// kept for [secrets] refresh, "0s" meaning the process's life; they never
// reach a log, and an error names the reference, never a value.
//
// The two stores are called through awsenv.Client, the small signed JSON
// client Step Functions already uses, not the SDK's secretsmanager and ssm
// clients: those add 1.57 MB to the API Lambda, past its 12 MB budget
// (BENCHMARKS.md). The calls put on the wire what the SDK clients do
// (fakesecrets.TestHandWrittenCallsMatchTheSDK), and the endpoints come
// from AWS_ENDPOINT_URL_SECRETS_MANAGER, AWS_ENDPOINT_URL_SSM or
// AWS_ENDPOINT_URL.
package secrets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/service/awsenv"
)

// Resolver reads secret references and caches their values.
type Resolver struct {
	// AWS is the environment the stores are reached through; its zero
	// value refuses references to them.
	AWS awsenv.Env
	// Getenv reads variables (default os.Getenv).
	Getenv func(string) string
	// Refresh is how long a value read from a store is kept; 0 keeps it
	// for the Resolver's life.
	Refresh time.Duration
	// Now is the cache's clock (default time.Now).
	Now func() time.Time

	mu    sync.Mutex
	cache map[config.SecretRef]cached
	// reads counts the calls to the stores, for tests of the cache.
	reads int
}

type cached struct {
	value string
	at    time.Time
}

// ErrNotFound is a reference whose secret or parameter does not exist (or
// has no such JSON key).
var ErrNotFound = errors.New("not found")

// Lookup is the Resolver as config.ProviderSecretsFrom reads secrets.
func (r *Resolver) Lookup(ctx context.Context) config.SecretLookup {
	return func(ref config.SecretRef) (string, error) { return r.Resolve(ctx, ref) }
}

// Resolve returns ref's value. Errors name ref, never a value.
func (r *Resolver) Resolve(ctx context.Context, ref config.SecretRef) (string, error) {
	if ref.Source == config.SourceEnv {
		getenv := r.Getenv
		if getenv == nil {
			getenv = os.Getenv
		}
		return config.EnvLookup(getenv)(ref)
	}
	now := r.now()
	r.mu.Lock()
	c, ok := r.cache[ref]
	r.mu.Unlock()
	if ok && (r.Refresh <= 0 || now.Sub(c.at) < r.Refresh) {
		return c.value, nil
	}
	v, err := r.read(ctx, ref)
	if err != nil {
		return "", fmt.Errorf("%s: %w", ref, err)
	}
	r.mu.Lock()
	if r.cache == nil {
		r.cache = map[config.SecretRef]cached{}
	}
	r.cache[ref] = cached{value: v, at: now}
	r.reads++
	r.mu.Unlock()
	return v, nil
}

func (r *Resolver) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Resolver) read(ctx context.Context, ref config.SecretRef) (string, error) {
	if r.AWS.Credentials == nil || r.AWS.Region == "" {
		return "", fmt.Errorf("reading %s needs an AWS region and credentials (AWS_REGION, AWS_ACCESS_KEY_ID, ...)", ref.Source)
	}
	switch ref.Source {
	case config.SourceSecretsManager:
		return r.secret(ctx, ref)
	case config.SourceSSM:
		return r.parameter(ctx, ref)
	}
	return "", fmt.Errorf("unknown secret source %q", ref.Source)
}

// secret calls Secrets Manager's GetSecretValue.
func (r *Resolver) secret(ctx context.Context, ref config.SecretRef) (string, error) {
	out, err := r.AWS.NewClient(awsenv.SecretsManager).GetSecretValue(ctx, ref.ID, "")
	if err != nil {
		return "", storeError(err)
	}
	value := out.String
	if value == "" {
		value = string(out.Binary)
	}
	if ref.Key == "" {
		if value == "" {
			return "", errors.New("the secret's value is empty")
		}
		return value, nil
	}
	var fields map[string]any
	if err := json.Unmarshal([]byte(value), &fields); err != nil {
		// The decoder's message may quote the value: say only what failed.
		return "", fmt.Errorf("the secret's value is not a JSON object, so it has no key %q", ref.Key)
	}
	f, ok := fields[ref.Key]
	if !ok {
		return "", fmt.Errorf("the secret has no JSON key %q: %w", ref.Key, ErrNotFound)
	}
	s, ok := f.(string)
	if !ok || s == "" {
		return "", fmt.Errorf("the secret's JSON key %q is not a non-empty string", ref.Key)
	}
	return s, nil
}

// parameter calls SSM's GetParameter with decryption.
func (r *Resolver) parameter(ctx context.Context, ref config.SecretRef) (string, error) {
	value, err := r.AWS.NewClient(awsenv.SSM).GetParameter(ctx, ref.ID)
	if err != nil {
		return "", storeError(err)
	}
	if value == "" {
		return "", errors.New("the parameter's value is empty")
	}
	return value, nil
}

// storeError keeps the store's error code and message (neither holds a
// value; the reference is named by the caller) and marks the absent ones.
func storeError(err error) error {
	var ae *awsenv.APIError
	if errors.As(err, &ae) {
		err = ae
	}
	switch awsenv.ErrorCode(err) {
	case "ResourceNotFoundException", "ParameterNotFound", "ParameterVersionNotFound":
		return fmt.Errorf("%w (%w)", ErrNotFound, err)
	}
	return err
}
