package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/emulation/ddblocal"
	"github.com/sandstep/sandstep/internal/emulation/localstack"
	"github.com/sandstep/sandstep/internal/service/providerhost"
	"github.com/sandstep/sandstep/internal/service/reaper"
	"github.com/sandstep/sandstep/internal/service/sandboxes"
	"github.com/sandstep/sandstep/internal/service/store"
	"github.com/sandstep/sandstep/internal/testkit/apitest"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
	"github.com/sandstep/sandstep/providers"
)

func needBwrap(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("bwrap is missing (Debian package bubblewrap)")
		}
		t.Skip("bwrap is missing (Debian package bubblewrap)")
	}
}

// startSessionServer serves the local stack with sessions on, over the
// test's own tables, and returns its URL.
func startSessionServer(t *testing.T) string {
	t.Helper()
	needBwrap(t)
	db := testddb.ForTests(t)
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
[server]
data_dir = %q
[provider]
plugin_dir = %q
[auth]
dev_token_env = ""
[sessions]
enabled = true
sync_wait = "1s"
`, t.TempDir(), buildLocalPlugin(t))), "config.toml", "../..")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	stack, err := localstack.Start(ctx, localstack.Options{
		Config: cfg, Template: "../../template.yaml", Store: store.New(db.Client, db.Prefix),
		DevToken: devToken, ReaperInterval: -1, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(apitest.Validate(t, stack.Handler))
	t.Cleanup(func() {
		srv.Close()
		if err := stack.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return srv.URL
}

func TestRunCode(t *testing.T) {
	url := startSessionServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runPollInterval = 50 * time.Millisecond
	t.Setenv(envToken, devToken)
	runCode := func(args ...string) (string, string, error) {
		var out, errb bytes.Buffer
		err := runRunCode(ctx, append(args, "--server", url), &out, &errb)
		return out.String(), errb.String(), err
	}

	script := filepath.Join(t.TempDir(), "note.py")
	if err := os.WriteFile(script, []byte("open('/workspace/note', 'w').write('kept')\nprint('written')\n40 + 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := runCode(script, "--session", "cli1")
	if err != nil || out != "written\n42\n" || errOut != "" {
		t.Fatalf("file run: %q %q %v", out, errOut, err)
	}
	out, errOut, err = runCode("-e", "require('fs').readFileSync('/workspace/note', 'utf8')", "--session", "cli1")
	if err != nil || out != "\"kept\"\n" {
		t.Fatalf("-e run: %q %v", out, err)
	}
	// Without --language, -e is JavaScript, and run-code says so.
	if !strings.Contains(errOut, "running the code of -e as javascript (--language sets another") {
		t.Fatalf("-e run did not say which language it assumed: %q", errOut)
	}
	out, errOut, err = runCode("-e", "print(6 * 7)", "--language", "python", "--session", "cli1")
	if err != nil || out != "42\n" || errOut != "" {
		t.Fatalf("-e --language python: %q %q %v", out, errOut, err)
	}
	stdin = strings.NewReader("echo from stdin")
	defer func() { stdin = os.Stdin }()
	out, errOut, err = runCode("--language", "shell", "--session", "cli1")
	if err != nil || out != "from stdin\n" || errOut != "" {
		t.Fatalf("stdin --language shell: %q %q %v", out, errOut, err)
	}
	// Past the server's sync wait the CLI waits for the run.
	out, errOut, err = runCode("-e", "sleep 2; echo late", "--language", "shell", "--session", "cli1")
	if err != nil || out != "late\n" || !strings.Contains(errOut, "goes on past the server's sync wait") {
		t.Fatalf("long run: %q %q %v", out, errOut, err)
	}
	out, errOut, err = runCode("-e", "echo oops >&2; exit 3", "--language", "shell", "--session", "cli1")
	if err == nil || !strings.Contains(err.Error(), "the run failed: exit status 3") || errOut != "oops\n" || out != "" {
		t.Fatalf("failing run: %q %q %v", out, errOut, err)
	}
	out, _, err = runCode("-e", "1 + 1", "--session", "cli2", "--json")
	var v map[string]any
	if err != nil || json.Unmarshal([]byte(out), &v) != nil || v["result"] != float64(2) || v["session_id"] != "cli2" {
		t.Fatalf("--json: %q %v", out, err)
	}
	if _, _, err := runCode("-e", "1", "--session", "bad$id"); err == nil || !strings.Contains(err.Error(), "(session_id)") {
		t.Fatalf("bad session id: %v", err)
	}
}

// reap runs one pass over the state `sandstep serve` leaves on disk: here
// a sandbox the ledger never knew.
func TestReap(t *testing.T) {
	needBwrap(t)
	if _, err := testddb.Shared(); err != nil {
		t.Skipf("DynamoDB Local unavailable: %v", err)
	}
	dir := t.TempDir()
	cfgPath := writeConfig(t, fmt.Sprintf("[server]\naddr = \"127.0.0.1:1\"\ndata_dir = %q\n[provider]\nplugin_dir = %q\n", dir, buildLocalPlugin(t)))
	// template.yaml is read beside the config.
	tmpl, err := os.ReadFile("../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(cfgPath), "template.yaml"), tmpl, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prov, err := providerhost.Open(ctx, cfg, "", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := prov.Create(ctx, providers.CreateSpec{Name: "unknown", Labels: sandboxes.Labels(cfg.Provider.Deployment)})
	if err != nil {
		t.Fatal(err)
	}
	// Another deployment's sandbox on the same provider is not this
	// stack's to reap.
	theirs, err := prov.Create(ctx, providers.CreateSpec{Name: "theirs", Labels: sandboxes.Labels("another-stack")})
	if err != nil {
		t.Fatal(err)
	}
	prov.Close()

	var out, errb bytes.Buffer
	if err := runReap(ctx, []string{"--config", cfgPath, "--json"}, &out, &errb); err != nil {
		t.Fatalf("reap: %v\n%s", err, errb.String())
	}
	var c reaper.Counts
	if err := json.Unmarshal(out.Bytes(), &c); err != nil || c.Orphans != 1 || c.Errors != 0 {
		t.Fatalf("counts = %s (%v)", out.String(), err)
	}
	prov, err = providerhost.Open(ctx, cfg, "", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer prov.Close()
	if sb, err := prov.Get(ctx, orphan.ID); err == nil && sb.State == providers.StateRunning {
		t.Fatalf("the unknown sandbox is still running")
	}
	if sb, err := prov.Get(ctx, theirs.ID); err != nil || sb.State != providers.StateRunning {
		t.Fatalf("another deployment's sandbox was reaped: %+v, %v", sb, err)
	}
	_ = prov.Terminate(ctx, theirs.ID)
}

// sandstep sessions open, show and delete, through the real server.
func TestSessionsCommands(t *testing.T) {
	url := startSessionServer(t)
	ctx := testCtx(t)
	t.Setenv(envToken, devToken)
	cli := func(args ...string) result { return runCLI(ctx, append(args, "--server", url)...) }

	r := cli("sessions", "open", "s1")
	wantCode(t, r, 0)
	if !strings.Contains(r.stderr, "session s1 created") || !regexp.MustCompile(`(?m)^session\s+s1$`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^volume\s+\S+ at /workspace$`).MatchString(r.stdout) {
		t.Fatalf("open: %+v", r)
	}
	r = cli("sessions", "open", "s1")
	wantCode(t, r, 0)
	if !strings.Contains(r.stderr, "session s1 was open already") {
		t.Fatalf("open again: %+v", r)
	}
	r = cli("run-code", "-e", "echo hi > /workspace/f", "--language", "shell", "--session", "s1")
	wantCode(t, r, 0)
	r = cli("sessions", "show", "s1", "--json")
	wantCode(t, r, 0)
	var v struct {
		SessionID string `json:"session_id"`
		State     string `json:"state"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || v.SessionID != "s1" || v.State == "" || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("show --json: %q %v", r.stdout, err)
	}
	r = cli("sessions", "delete", "s1")
	wantCode(t, r, 0)
	if !strings.Contains(r.stderr, "session s1 deleted") {
		t.Fatalf("delete: %+v", r)
	}
	r = cli("run-code", "-e", "cat /workspace/f", "--language", "shell", "--session", "s1")
	wantCode(t, r, 1)
	if !strings.Contains(r.stderr, "gone") {
		t.Fatalf("a run in the deleted session: %+v", r)
	}
	r = cli("sessions", "show")
	wantCode(t, r, 2)
	if !strings.HasPrefix(r.stderr, "sandstep sessions: show: missing SID\n") {
		t.Fatalf("show without SID: %q", r.stderr)
	}
}

// With AWS_ENDPOINT_URL_DYNAMODB set, reap works on the DynamoDB it names
// (here the tests' shared DynamoDB Local) instead of starting its own on
// the data dir, and creates the tables there if they are missing.
func TestReapOnTheDynamoDBTheEnvironmentNames(t *testing.T) {
	needBwrap(t)
	inst, err := testddb.Shared()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("DynamoDB Local unavailable: %v", err)
	}
	dir := t.TempDir()
	cfgPath := writeConfig(t, fmt.Sprintf("[server]\naddr = \"127.0.0.1:1\"\ndata_dir = %q\n[provider]\nplugin_dir = %q\n", dir, buildLocalPlugin(t)))
	tmpl, err := os.ReadFile("../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tmplPath := filepath.Join(filepath.Dir(cfgPath), "template.yaml")
	if err := os.WriteFile(tmplPath, tmpl, 0o644); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"AWS_ENDPOINT_URL_DYNAMODB": inst.Endpoint(), "AWS_ENDPOINT_URL": "", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "",
		"AWS_REGION": "", "AWS_DEFAULT_REGION": "", "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "",
	} {
		t.Setenv(k, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		if err := ddblocal.DeleteTables(context.Background(), inst.Client(), tmplPath, localTablePrefix); err != nil {
			t.Error(err)
		}
	})

	var out, errb bytes.Buffer
	if err := runReap(ctx, []string{"--config", cfgPath, "--json"}, &out, &errb); err != nil {
		t.Fatalf("reap: %v\n%s", err, errb.String())
	}
	var c reaper.Counts
	if err := json.Unmarshal(out.Bytes(), &c); err != nil || c.Errors != 0 {
		t.Fatalf("counts = %s (%v)", out.String(), err)
	}
	tables, err := inst.Client().ListTables(ctx, &dynamodb.ListTablesInput{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"jobs", "sessions", "sandboxes"} {
		if !slices.Contains(tables.TableNames, localTablePrefix+want) {
			t.Errorf("no table %s%s on the DynamoDB the environment names: %v", localTablePrefix, want, tables.TableNames)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "dynamodb")); !os.IsNotExist(err) {
		t.Errorf("reap started a DynamoDB Local of its own on the data dir (%v)", err)
	}
}
