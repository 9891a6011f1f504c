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
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sandstep/sandstep/config"
	"github.com/sandstep/sandstep/internal/emulation/ddblocal"
	"github.com/sandstep/sandstep/internal/service/providerhost"
	"github.com/sandstep/sandstep/internal/service/reaper"
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

// languageOf guesses a file's language from its extension.
func languageOf(path string) string {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".ts", ".mts":
		return sessions.LangTypeScript
	case ".py":
		return sessions.LangPython
	case ".sh":
		return sessions.LangShell
	}
	return sessions.LangJavaScript
}

func runRunCode(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("run-code", stderr)
	setUsage(fs, "run-code [FILE] [flags]\n\nRuns code in a session of a sandstep server: from FILE, from -e, or from standard input.\nThe code's output goes to stdout and stderr, then the value of its last expression as JSON.\nFiles written to /workspace stay in the session for its next runs")
	cf := addClientFlags(fs)
	session := fs.String("session", "cli", "session id: runs in one session share /workspace")
	language := fs.String("language", "", "typescript, javascript, python or shell (default: from FILE's extension, else javascript)")
	code := fs.String("e", "", "code to run, instead of FILE or standard input")
	timeout := fs.Int("timeout", 0, "timeout of the run in seconds (default: the server's [sessions] timeout_seconds)")
	asJSON := fs.Bool("json", false, "print the whole run as JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 || (len(pos) == 1 && *code != "") {
		fs.Usage()
		return errUsage
	}
	src := *code
	switch {
	case len(pos) == 1 && pos[0] != "-":
		b, err := os.ReadFile(pos[0])
		if err != nil {
			return err
		}
		src = string(b)
		if *language == "" {
			*language = languageOf(pos[0])
		}
	case src == "":
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			return fmt.Errorf("reading the code from standard input: %w", err)
		}
		src = string(b)
	}
	if *language == "" {
		*language = sessions.LangJavaScript
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
	if *asJSON {
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
	fs := newFlags("reap", stderr)
	setUsage(fs, "reap [flags]\n\nRuns one cleanup pass over this machine's local state, as `sandstep serve` does every\n[sessions] reaper_interval: deletes session volumes idle past their TTL, closes idle session\nsandboxes, terminates sandboxes nothing needs or the ledger does not know")
	cfgPath := fs.String("config", config.DefaultPath(), "config file (env SANDSTEP_CONFIG)")
	dataDir := fs.String("data-dir", "", "the data dir `sandstep serve` uses (default: [server] data_dir)")
	asJSON := fs.Bool("json", false, "print the counts as JSON")
	logLevel := fs.String("log-level", "warn", "debug, info, warn or error")
	if _, err := parseArgs(fs, args); err != nil {
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
		if cfg.Provider.Local.StateDir == filepath.Join(cfg.Server.DataDir, "local") {
			cfg.Provider.Local.StateDir = filepath.Join(*dataDir, "local")
		}
		cfg.Server.DataDir = *dataDir
	}
	if serverAnswers(ctx, cfg.Server.Addr) {
		return fmt.Errorf("a sandstep server answers at http://%s: it runs the cleanup every %s itself, over the same state; stop it to reap by hand", cfg.Server.Addr, cfg.Sessions.ReaperInterval)
	}
	log := newLogger(stderr, *logLevel)
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
	svc, err := sessions.New(sessions.Options{Config: cfg, Store: st, DB: db, Provider: prov, Logger: log})
	if err != nil {
		return err
	}
	defer svc.Shutdown(context.WithoutCancel(ctx))
	r := &reaper.Reaper{Store: st, Provider: prov, ProviderName: cfg.Provider.Name, Sessions: svc, Logger: log}
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
