package sessions_test

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/internal/testkit/testdns"
	"github.com/sandstep/sandstep/internal/testkit/testhttp"
	"github.com/sandstep/sandstep/providers/egress"
)

// TestSecretScopedToItsHost: a dependency's secret with hosts is a
// placeholder in the session sandbox: printing the environment, even in
// base64, shows no value; a request to the secret's host arrives with the
// value (over TLS, the proxy re-originating it); a request to any other
// host carries the placeholder. What the allowed host echoes back is still
// redacted from the run's output.
func TestSecretScopedToItsHost(t *testing.T) {
	need(t, "curl", "the runs call the fixture APIs with curl")
	// It echoes what it got, which the run's output must redact.
	echo := func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "you sent %s\n", r.Header.Get("Authorization"))
	}
	api := testhttp.Start(t, testhttp.Options{TLS: true, Body: echo}) // httptest's certificate is for example.com
	other := testhttp.Start(t, testhttp.Options{Body: echo})
	dns := testdns.Start(t, map[string][]string{"example.com": {"127.0.0.1"}, "other.test": {"127.0.0.1"}})
	caFile := filepath.Join(t.TempDir(), "upstream.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, 12)
	_, _ = rand.Read(raw)
	secret := "sk-scoped-" + hex.EncodeToString(raw)
	t.Setenv("SANDSTEP_TEST_SECRET", secret)
	pkg := fixturePackage(t, "sandstep-fixture-a")
	e := newEnv(t, envConfig{
		deps:    fmt.Sprintf("[[sessions.dependencies]]\npackage = %q\nsecret_env = \"SANDSTEP_TEST_SECRET\"\nhosts = [\"example.com\"]\n", pkg),
		sandbox: fmt.Sprintf("network = \"all\"\nallow_private = [%q, %q]\n", api.Addr(), other.Addr()),
		local:   fmt.Sprintf("dns_servers = [%q]\nupstream_ca_files = [%q]\n", dns.Addr(), caFile),
	})
	apiPort, otherPort := api.Port(), other.Port()

	env := wantOK(t, e.run(tokenAcme, "scoped", "shell", "env"))
	placeholder := ""
	for _, l := range strings.Split(env, "\n") {
		if v, ok := strings.CutPrefix(l, "SANDSTEP_TEST_SECRET="); ok {
			placeholder = v
		}
	}
	if !strings.HasPrefix(placeholder, egress.PlaceholderPrefix) {
		t.Fatalf("the sandbox's environment shows SANDSTEP_TEST_SECRET=%q, want a placeholder:\n%s", placeholder, env)
	}
	for _, code := range []string{"env | base64 -w0", "base64 -w0 /proc/self/environ", "env | rev | base64 -w0"} {
		out := strings.TrimSpace(wantOK(t, e.run(tokenAcme, "scoped", "shell", code)))
		dec, err := base64.StdEncoding.DecodeString(out)
		if err != nil {
			t.Fatalf("%s: %v", code, err)
		}
		if strings.Contains(string(dec), secret) || strings.Contains(string(dec), reverse(secret)) {
			t.Errorf("%s reveals the secret", code)
		}
	}

	out := wantOK(t, e.run(tokenAcme, "scoped", "shell",
		`curl -sS --fail -H "Authorization: Bearer $SANDSTEP_TEST_SECRET" https://example.com:`+apiPort+`/with-curl`))
	if !strings.Contains(out, "[REDACTED:SANDSTEP_TEST_SECRET]") || strings.Contains(out, secret) {
		t.Errorf("what the API echoed came back as %q, want it redacted", out)
	}
	wantOK(t, e.run(tokenAcme, "scoped", "python",
		"import os, urllib.request as u\nu.urlopen(u.Request('https://example.com:"+apiPort+"/with-python', headers={'Authorization': 'Bearer ' + os.environ['SANDSTEP_TEST_SECRET']})).read()"))
	wantOK(t, e.run(tokenAcme, "scoped", "shell",
		`curl -sS --fail --noproxy '' -H "Authorization: Bearer $SANDSTEP_TEST_SECRET" http://other.test:`+otherPort+`/elsewhere`))

	for _, c := range []struct {
		svc        *testhttp.Recorder
		path, want string
	}{
		{api, "/with-curl", "Bearer " + secret},
		{api, "/with-python", "Bearer " + secret},
		{other, "/elsewhere", "Bearer " + placeholder},
	} {
		if got := c.svc.Header(c.path, "Authorization"); got != c.want {
			t.Errorf("%s arrived with %q, want %q", c.path, got, c.want)
		}
	}
	if n := len(api.Paths()) + len(other.Paths()); n != 3 {
		t.Errorf("the fixtures got %d requests, want 3", n)
	}
	if strings.Contains(e.logs.String(), secret) {
		t.Error("the secret is in the logs")
	}
}

func reverse(s string) string {
	r := []rune(s)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r)
}
