package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/testkit/fakesandy"
	"github.com/sandstep/sandstep/internal/testkit/fakesecrets"
	"github.com/sandstep/sandstep/providers"
)

// sandyKey is the provider key the secret stores hold; it must never reach
// a log line or an error.
const sandyKey = "sandy-live-7f3a9c1e5b2d8f4a6c0e9b1d3f5a7c9e"

// sandyWith is config.toml edited to run the Sandy provider against url
// with its key read through ref.
func sandyWith(t *testing.T, url, ref string) func([]byte) []byte {
	return func(raw []byte) []byte {
		raw = replaceLine(t, raw, `name = "local"`, `name = "sandy"`)
		raw = bytes.Replace(raw, []byte("\n"+`base_url = ""`+"\n"), []byte("\n"+`base_url = "`+url+`"`+"\n"), 1)
		return replaceLine(t, raw, `api_key_env = "SANDY_API_KEY"`, `api_key_env = "`+ref+`"`)
	}
}

func startSandy(t *testing.T) string {
	t.Helper()
	fs, err := fakesandy.New(fakesandy.Options{APIKey: sandyKey, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	srv := httptest.NewServer(fs)
	t.Cleanup(srv.Close)
	return srv.URL
}

// The ApiFunction reads the Sandy key at init from Secrets Manager (one
// key of a JSON secret, by ARN, through AWS_ENDPOINT_URL_SECRETS_MANAGER)
// and from SSM (a SecureString, through AWS_ENDPOINT_URL), once for the
// execution environment: the provider then authenticates with it on
// every call, the store is not asked again, and the key is in no log.
func TestProviderKeyFromSecretStores(t *testing.T) {
	sandy := startSandy(t)
	stores := fakesecrets.New()
	t.Cleanup(stores.Close)
	arn := stores.PutSecret("sandstep/sandy", `{"api_key":"`+sandyKey+`","note":"rotated quarterly"}`)
	stores.PutParameter("/sandstep/prod/sandy-api-key", "SecureString", sandyKey)

	for _, c := range []struct {
		name, ref string
		env       map[string]string
		target    string
	}{
		{"secrets manager", "secretsmanager:" + arn + "#api_key", map[string]string{"AWS_ENDPOINT_URL_SECRETS_MANAGER": stores.URL}, "GetSecretValue"},
		{"ssm", "ssm:/sandstep/prod/sandy-api-key", map[string]string{"AWS_ENDPOINT_URL": stores.URL}, "GetParameter"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := stores.Calls(c.target)
			// The key is in no variable of the function's environment.
			c.env["SANDY_API_KEY"] = ""
			e := newLambdaEnv(t, sandyWith(t, sandy, c.ref), c.env)
			if got := e.call(t, "GET", "/v1/providers", "", 200); got["active"].(map[string]any)["name"] != "sandy" {
				t.Fatalf("providers = %v", got)
			}
			// Sandy answers a lookup (404: no such sandbox) only to the
			// right key; a wrong one is refused with 401.
			for range 3 {
				if _, err := e.fn.provider.Get(e.ctx, "sbx-none"); !providers.IsNotFound(err) {
					t.Fatalf("Get through Sandy: %v, want NotFound (the key was accepted)", err)
				}
				e.call(t, "GET", "/v1/providers", "", 200)
			}
			if n := stores.Calls(c.target) - before; n != 1 {
				t.Fatalf("%s was called %d times, want once at init", c.target, n)
			}
			logs := e.logs()
			if strings.Contains(logs, sandyKey) {
				t.Fatalf("the key is in the function's logs:\n%s", logs)
			}
			if !strings.Contains(logs, "GET") && len(logs) == 0 {
				t.Fatal("the function logged nothing: the log check proves nothing")
			}
		})
	}
}

// A reference to a secret that does not exist fails the init with an
// error naming the config key and the reference, not any value.
func TestMissingSecretFailsInit(t *testing.T) {
	sandy := startSandy(t)
	stores := fakesecrets.New()
	t.Cleanup(stores.Close)
	stores.PutSecret("sandstep/sandy", `{"api_key":"`+sandyKey+`"}`)
	for ref, want := range map[string]string{
		"secretsmanager:sandstep/missing":     "provider.sandy.api_key_env: secretsmanager:sandstep/missing: not found (400 ResourceNotFoundException",
		"secretsmanager:sandstep/sandy#token": `provider.sandy.api_key_env: secretsmanager:sandstep/sandy#token: the secret has no JSON key "token"`,
		"ssm:/sandstep/missing":               "provider.sandy.api_key_env: ssm:/sandstep/missing: not found (400 ParameterNotFound",
	} {
		e, err := initLambda(t, sandyWith(t, sandy, ref), map[string]string{"AWS_ENDPOINT_URL": stores.URL})
		if err == nil {
			e.fn.provider.Close()
			t.Fatalf("%s: init succeeded", ref)
		}
		if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), sandyKey) {
			t.Errorf("%s: init error %q, want one with %q and no value", ref, err, want)
		}
		if logs := e.logs(); strings.Contains(logs, sandyKey) {
			t.Errorf("%s: the key is in the logs:\n%s", ref, logs)
		}
	}
}

// rotatingSandy is the fake Sandy behind a door that admits only the
// current key, which a test rotates as Secrets Manager's rotation would.
type rotatingSandy struct {
	mu  sync.Mutex
	key string
	h   http.Handler
}

func (s *rotatingSandy) rotate(key string) { s.mu.Lock(); s.key = key; s.mu.Unlock() }

func (s *rotatingSandy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	ok := r.Header.Get("Authorization") == "Bearer "+s.key
	s.mu.Unlock()
	if !ok {
		http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
		return
	}
	s.h.ServeHTTP(w, r)
}

// With [provider] secret_refresh set, a key rotated in Secrets Manager
// reaches the running provider without a new execution environment; until
// the next read the old key is used (the value is cached), and neither key
// is ever logged.
func TestRotatedKeyReachesTheProvider(t *testing.T) {
	fs, err := fakesandy.New(fakesandy.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	door := &rotatingSandy{key: sandyKey, h: fs}
	srv := httptest.NewServer(door)
	t.Cleanup(srv.Close)
	stores := fakesecrets.New()
	t.Cleanup(stores.Close)
	stores.PutSecret("sandstep/sandy", sandyKey)
	const rotated = "sandy-live-ROTATED-0b1c2d3e4f5a6b7c8d9e0f1a"

	edit := sandyWith(t, srv.URL, "secretsmanager:sandstep/sandy")
	e := newLambdaEnv(t, func(raw []byte) []byte {
		return replaceLine(t, edit(raw), `secret_refresh = "0s"`, `secret_refresh = "1s"`)
	}, map[string]string{"AWS_ENDPOINT_URL": stores.URL, "SANDY_API_KEY": ""})
	if _, err := e.fn.provider.Get(e.ctx, "sbx-none"); !providers.IsNotFound(err) {
		t.Fatalf("before the rotation: %v, want NotFound", err)
	}
	stores.PutSecret("sandstep/sandy", rotated)
	door.rotate(rotated)
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := e.fn.provider.Get(e.ctx, "sbx-none")
		if providers.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rotated key did not reach the provider: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	logs := e.logs()
	if strings.Contains(logs, sandyKey) || strings.Contains(logs, rotated) {
		t.Fatalf("a key is in the logs:\n%s", logs)
	}
	if !strings.Contains(logs, "provider secrets changed") {
		t.Fatalf("the refresh was not logged:\n%s", logs)
	}
}
