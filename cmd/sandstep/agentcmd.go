package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// runAgent is `sandstep agent run AGENT "PROMPT"`: submit an agent run,
// print its events as they happen (on stderr), then its final answer (on
// stdout) and its artifacts' URLs. It exits non-zero when the run did not
// succeed.
func runAgent(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("agent", stdout, stderr)
	var files stringList
	fs.Var(&files, "file", "a local file to put in the agent's /workspace (a relative path keeps its folders, an absolute one only its name); repeatable")
	timeout := fs.Duration("timeout", 0, "the agent's time limit (default: the agent's timeout in the server's config, 5m unless set)")
	id := fs.String("id", "", "the run's job_id, which makes the submission idempotent (default: generated)")
	cf := addClientFlags(fs)
	pos, err := positional(fs, args, "run", "AGENT", "PROMPT")
	if err != nil {
		return err
	}
	if pos[0] != "run" {
		return usageError(fs, "unknown subcommand %q (run)", pos[0])
	}
	body := map[string]any{"agent": pos[1], "prompt": pos[2]}
	if len(files) > 0 {
		m := map[string]string{}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			name := filepath.ToSlash(filepath.Clean(f))
			if filepath.IsAbs(f) || strings.HasPrefix(name, "../") {
				name = path.Base(name)
			}
			m[name] = string(data)
		}
		body["files"] = m
	}
	if *timeout > 0 {
		body["timeout_seconds"] = int64((*timeout + time.Second - 1) / time.Second)
	}
	if *id != "" {
		body["job_id"] = *id
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	var ans submitAnswer
	if _, _, err := c.call(ctx, http.MethodPost, "/v1/agent-runs", nil, body, &ans); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "agent run %s\n", ans.JobID)
	final, err := c.follow(ctx, ans.JobID, 0, eventPrinter{w: stderr, json: *cf.json}, stderr)
	if err != nil {
		return err
	}
	var res struct {
		Complete  bool   `json:"complete"`
		Answer    string `json:"answer"`
		ExitCode  *int   `json:"exit_code"`
		Artifacts []struct {
			Path        string `json:"path"`
			Size        int64  `json:"size"`
			ContentType string `json:"content_type"`
			URL         string `json:"url"`
		} `json:"artifacts"`
	}
	raw, _, err := c.call(ctx, http.MethodGet, "/v1/agent-runs/"+url.PathEscape(ans.JobID)+"/result", nil, nil, &res)
	if err == nil {
		if *cf.json {
			if err := writeJSON(stdout, raw); err != nil {
				return err
			}
		} else {
			if res.Answer != "" {
				fmt.Fprintln(stdout, res.Answer)
			}
			for _, a := range res.Artifacts {
				fmt.Fprintf(stderr, "artifact %s (%s, %d bytes): %s\n", a.Path, a.ContentType, a.Size, c.base.JoinPath(a.URL).Redacted())
			}
			if !res.Complete {
				fmt.Fprintln(stderr, "(the run did not finish: this is what it printed until then)")
			}
		}
	}
	return outcome(ctx, c, ans.JobID, final)
}
