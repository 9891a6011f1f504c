package main

// sandstep sessions: a tenant's run-code sessions on a server.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"
)

// sessionItem is a session as the API shows it.
type sessionItem struct {
	SessionID      string  `json:"session_id"`
	State          string  `json:"state"`
	Mode           string  `json:"mode"`
	CreatedAt      string  `json:"created_at"`
	LastAccessedAt string  `json:"last_accessed_at"`
	ExpiresAt      *string `json:"expires_at"`
	DeletedAt      *string `json:"deleted_at"`
	Snapshot       *string `json:"snapshot"`
	Dependencies   string  `json:"dependencies"`
	Volume         struct {
		Slug      string `json:"slug"`
		MountPath string `json:"mount_path"`
	} `json:"volume"`
	Sandbox *struct {
		ID    string `json:"id"`
		Alive bool   `json:"alive"`
	} `json:"sandbox"`
	// SandboxID is a listing's: it does not ask the provider whether the
	// sandbox is alive.
	SandboxID *string `json:"sandbox_id"`
}

func (s sessionItem) sandbox() string {
	switch {
	case s.Sandbox == nil && s.SandboxID != nil:
		return *s.SandboxID
	case s.Sandbox == nil:
		return "-"
	case s.Sandbox.Alive:
		return s.Sandbox.ID + " (running)"
	}
	return s.Sandbox.ID + " (closed)"
}

func sessionPath(sid string) string { return "/v1/sessions/" + url.PathEscape(sid) }

func runSessions(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("sessions", stdout, stderr)
	lf := addListFlags(fs, "sessions", "state", "idle, running, deleting, deleted")
	cf := addClientFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	sub := "list"
	if len(pos) > 0 {
		sub, pos = pos[0], pos[1:]
	}
	need := func(names ...string) error {
		switch {
		case len(pos) < len(names):
			return usageError(fs, "%s: missing %s", sub, strings.Join(names[len(pos):], " and "))
		case len(pos) > len(names):
			return usageError(fs, "%s: unexpected argument %q", sub, pos[len(names)])
		}
		return nil
	}
	switch sub {
	case "list":
		err = need()
	case "show", "open", "delete":
		err = need("SID")
	default:
		return usageError(fs, "unknown subcommand %q (list, show, open or delete)", sub)
	}
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	if sub == "list" {
		return listSessions(ctx, c, lf, *cf.json, stdout, stderr)
	}
	sid := pos[0]
	method := map[string]string{"show": http.MethodGet, "open": http.MethodPost, "delete": http.MethodDelete}[sub]
	var s sessionItem
	raw, status, err := c.call(ctx, method, sessionPath(sid), nil, nil, &s)
	if err != nil {
		return err
	}
	if *cf.json {
		return writeJSON(stdout, raw)
	}
	switch sub {
	case "open":
		if status == http.StatusCreated {
			fmt.Fprintf(stderr, "session %s created\n", s.SessionID)
		} else {
			fmt.Fprintf(stderr, "session %s was open already\n", s.SessionID)
		}
	case "delete":
		fmt.Fprintf(stderr, "session %s deleted: its sandbox is closed and its volume, with the files in %s, is gone\n", s.SessionID, s.Volume.MountPath)
		return nil
	}
	return s.print(stdout)
}

func (s sessionItem) print(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	snapshot := deref(s.Snapshot)
	for _, row := range [][2]string{
		{"session", s.SessionID},
		{"state", s.State},
		{"mode", s.Mode},
		{"volume", strings.TrimSpace(s.Volume.Slug + " at " + s.Volume.MountPath)},
		{"sandbox", s.sandbox()},
		{"snapshot", orDash(&snapshot)},
		{"dependencies", orDash(&s.Dependencies)},
		{"created", shortTime(s.CreatedAt)},
		{"last used", shortTime(s.LastAccessedAt)},
		{"expires", shortTime(deref(s.ExpiresAt))},
	} {
		fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
	}
	if s.DeletedAt != nil {
		fmt.Fprintf(tw, "deleted\t%s\n", shortTime(*s.DeletedAt))
	}
	return tw.Flush()
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// shortTime shows an RFC 3339 time to the second in UTC; anything else as
// it is.
func shortTime(s string) string {
	if s == "" {
		return "-"
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func ellipsis(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
