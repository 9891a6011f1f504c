package main

// The run_code sessions from the command line: run-code runs code in a
// session of a server; reap runs one cleanup pass over this machine's
// local state.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/emulation/ddblocal"
	"github.com/sandstep/sandstep/internal/service/logging"
	"github.com/sandstep/sandstep/internal/service/providerhost"
	"github.com/sandstep/sandstep/internal/service/quota"
	"github.com/sandstep/sandstep/internal/service/reaper"
	"github.com/sandstep/sandstep/internal/service/sandboxes"
	"github.com/sandstep/sandstep/internal/service/sessions"
	"github.com/sandstep/sandstep/internal/service/store"
)

// runPollInterval paces waiting for a run that outlived the server's
// sync_wait; a variable so that tests can shorten it.
var runPollInterval = 500 * time.Millisecond

// runAnswer is a run as the API shows it.
type runAnswer struct {
	RunID    string          `json:"run_id"`
	Status   string          `json:"status"`
	Success  bool            `json:"success"`
	Result   json.RawMessage `json:"result"`
	Error    *string         `json:"error"`
	Stdout   string          `json:"stdout"`
	Stderr   string          `json:"stderr"`
	ExitCode int             `json:"exit_code"`
	Links    struct {
		Self string `json:"self"`
	} `json:"links"`
}

// languageOf tells a file's language from its extension.
func languageOf(path string) (string, bool) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".ts", ".mts", ".cts":
		return sessions.LangTypeScript, true
	case ".js", ".mjs", ".cjs":
		return sessions.LangJavaScript, true
	case ".py":
		return sessions.LangPython, true
	case ".sh", ".bash":
		return sessions.LangShell, true
	}
	return "", false
}

// stdin is where run-code reads code from when neither FILE nor -e is
// given; a variable so that tests can feed it.
var stdin io.Reader = os.Stdin

func runRunCode(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("run-code", stdout, stderr)
	cf := addClientFlags(fs)
	session := fs.String("session", "cli", "session id: runs in one session share /workspace")
	language := fs.String("language", "", "typescript, javascript, python or shell (default: from FILE's extension, else javascript)")
	code := fs.String("e", "", "code to run, instead of FILE or standard input")
	timeout := fs.Int("timeout", 0, "timeout of the run in seconds (default: the server's [sessions] timeout_seconds)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 1:
		return usageError(fs, "unexpected argument %q: one FILE at most", pos[1])
	case len(pos) == 1 && *code != "":
		return usageError(fs, "both FILE %q and -e given: pass one of them", pos[0])
	}
	langs := strings.Join(sessions.Languages, ", ")
	if *language != "" && !slices.Contains(sessions.Languages, *language) {
		return usageError(fs, "--language %q is not one of %s", *language, langs)
	}
	src, from := *code, "-e"
	switch {
	case len(pos) == 1 && pos[0] != "-":
		b, err := os.ReadFile(pos[0])
		if err != nil {
			return err
		}
		src, from = string(b), pos[0]
		if *language == "" {
			if lang, ok := languageOf(pos[0]); ok {
				*language = lang
			}
		}
	case src == "" && isTerminal(stdin):
		// Reading a terminal to its end would wait, silently, for a
		// Ctrl-D the user does not know to type.
		return usageError(fs, "missing the code: FILE, -e CODE, or code piped to standard input")
	case src == "":
		b, err := io.ReadAll(stdin)
		if err != nil {
			return fmt.Errorf("reading the code from standard input: %w", err)
		}
		src, from = string(b), "standard input"
	}
	if *language == "" {
		*language = sessions.LangJavaScript
		fmt.Fprintf(stderr, "running the code of %s as %s (--language sets another: %s)\n", from, *language, langs)
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	body := map[string]any{"code": src, "language": *language}
	if *timeout > 0 {
		body["timeout_seconds"] = *timeout
	}
	// The server answers by its sync_wait (under 30 s) at the latest.
	var ans runAnswer
	_, status, err := c.call(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(*session)+"/run", nil, body, &ans)
	if err != nil {
		return err
	}
	if status == http.StatusAccepted {
		fmt.Fprintf(stderr, "run %s goes on past the server's sync wait; waiting for it\n", ans.RunID)
		for ans.Status == string(sessions.RunRunning) {
			if err := sleep(ctx, runPollInterval); err != nil {
				return err
			}
			if _, _, err := c.call(ctx, http.MethodGet, ans.Links.Self, nil, nil, &ans); err != nil {
				return err
			}
		}
	}
	if *cf.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		var v any
		if _, _, err := c.call(ctx, http.MethodGet, ans.Links.Self, nil, nil, &v); err != nil {
			return err
		}
		if err := enc.Encode(v); err != nil {
			return err
		}
	} else {
		io.WriteString(stdout, ans.Stdout)
		io.WriteString(stderr, ans.Stderr)
		if len(ans.Result) > 0 && string(ans.Result) != "null" {
			fmt.Fprintf(stdout, "%s\n", ans.Result)
		}
	}
	if !ans.Success {
		msg := fmt.Sprintf("exit status %d", ans.ExitCode)
		if ans.Error != nil {
			msg = *ans.Error
		}
		return fmt.Errorf("the run failed: %s", msg)
	}
	return nil
}

// localTablePrefix is the table prefix `sandstep serve` gives DynamoDB
// Local (localstack's default).
const localTablePrefix = "sandstep-local-"

func runReap(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("reap", stdout, stderr)
	cfgPath := fs.String("config", config.DefaultPath(), "config file (env SANDSTEP_CONFIG)")
	dataDir := fs.String("data-dir", "", "the data dir `sandstep serve` uses (default: [server] data_dir)")
	asJSON := fs.Bool("json", false, "print the counts as JSON")
	logLevel := fs.String("log-level", "warn", "debug, info, warn or error")
	if _, err := positional(fs, args); err != nil {
		return err
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	if *dataDir != "" {
		if *dataDir, err = absDir(*dataDir); err != nil {
			return err
		}
		cfg.Server.DataDir = *dataDir
	}
	if serverAnswers(ctx, cfg.Server.Addr) {
		return fmt.Errorf("a sandstep server answers at http://%s: it runs the cleanup every %s itself, over the same state; stop it to reap by hand", cfg.Server.Addr, cfg.Sessions.ReaperInterval)
	}
	log, err := logging.New(stderr, *logLevel)
	if err != nil {
		return usageError(fs, "--log-level: %v", err)
	}
	// The DynamoDB `sandstep serve` uses: the one AWS_ENDPOINT_URL_DYNAMODB
	// names, or DynamoDB Local on the data dir.
	db, _ := ddblocal.FromEnv(os.Getenv)
	if db == nil {
		ddb, err := ddblocal.Start(ctx, ddblocal.Options{DBPath: filepath.Join(cfg.Server.DataDir, "dynamodb")})
		if err != nil {
			return fmt.Errorf("DynamoDB Local: %w", err)
		}
		defer ddb.Stop()
		db = ddb.Client()
	}
	if err := ddblocal.CreateTables(ctx, db, filepath.Join(cfg.Dir, "template.yaml"), localTablePrefix); err != nil {
		return fmt.Errorf("create tables: %w", err)
	}
	st := store.New(db, localTablePrefix)
	prov, err := providerhost.Open(ctx, cfg, "", log)
	if err != nil {
		return err
	}
	defer prov.Close()
	svc, err := sessions.New(sessions.Options{Config: cfg, Store: st, Provider: prov, Logger: log})
	if err != nil {
		return err
	}
	defer svc.Shutdown(context.WithoutCancel(ctx))
	sbx := sandboxes.New(sandboxes.Options{Store: st, Provider: prov, ProviderName: cfg.Provider.Name, Deployment: cfg.Provider.Deployment, Logger: log, Quotas: quota.New(st, &cfg.Quotas)})
	r := &reaper.Reaper{Store: st, Sandboxes: sbx, Sessions: svc, Logger: log}
	counts, passErr := r.Pass(ctx)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(counts); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		for _, row := range []struct {
			what string
			n    int
		}{
			{"sessions expired (volumes deleted)", counts.SessionsExpired},
			{"session deletions finished", counts.DeletionsResumed},
			{"idle session sandboxes closed", counts.SandboxesIdle},
			{"stale runs ended", counts.StaleRunsEnded},
			{"expiry warnings", counts.ExpiryWarnings},
			{"sandboxes reaped (deadline, owner ended)", counts.LedgerReaped},
			{"ledger entries of vanished sandboxes closed", counts.LedgerGone},
			{"unknown sandboxes terminated", counts.Orphans},
			{"errors", counts.Errors},
		} {
			fmt.Fprintf(tw, "%s\t%d\n", row.what, row.n)
		}
		tw.Flush()
	}
	if passErr != nil {
		return fmt.Errorf("the pass had errors: %w", passErr)
	}
	return nil
}

// serverAnswers reports whether a sandstep server answers /healthz at
// addr: it owns the local state while it runs.
func serverAnswers(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
	if err != nil {
		return false
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	res.Body.Close()
	return res.StatusCode == http.StatusOK
}
