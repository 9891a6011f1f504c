package main

// sandstep sandbox: direct sandboxes on a server (/v1/sandboxes).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	sbclient "github.com/sandstep/sandstep/client"
)

const sandboxSynopsis = "create | list | exec ID -- CMD... | cp SRC DST | logs ID EXEC | url ID [PORT] | artifacts ID | terminate ID [flags]"

func runSandbox(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("sandbox", stdout, stderr)
	cf := addClientFlags(fs)
	ttl := fs.Duration("ttl", 0, "create: the sandbox's lifetime (default: [sandboxes] default_ttl of the server)")
	var ports, labels stringList
	fs.Var(&ports, "port", "create: a port to expose (repeatable); `sandstep sandbox url` prints its public URL")
	fs.Var(&labels, "label", "create: a label KEY=VALUE (repeatable)")
	network := fs.String("network", "", "create: none, all or allowlist (default: [sandbox] network of the server)")
	name := fs.String("name", "", "create: a name that makes create idempotent")
	shell := fs.String("c", "", "exec: a shell command instead of arguments after --")
	background := fs.Bool("background", false, "exec: start the command and print its exec id; read its output later with logs")
	timeout := fs.Duration("timeout", 0, "exec: the command's time limit (default 10m)")
	stream := fs.String("stream", "stdout", "logs: stdout or stderr")
	offset := fs.Int64("offset", 0, "logs: the byte offset to start from (resume where a reader stopped)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageError(fs, "missing subcommand (%s)", sandboxSynopsis)
	}
	sub, pos := pos[0], pos[1:]
	need := func(lo, hi int, names string) error {
		if len(pos) < lo || len(pos) > hi {
			return usageError(fs, "%s takes %s", sub, names)
		}
		return nil
	}
	switch sub {
	case "create", "list":
		err = need(0, 0, "no arguments")
	case "terminate", "artifacts":
		err = need(1, 1, "ID")
	case "url":
		err = need(1, 2, "ID [PORT]")
	case "logs":
		err = need(2, 2, "ID EXEC_ID")
	case "cp":
		err = need(2, 2, "SRC DST (one of them ID:/path)")
	case "exec":
		if len(pos) < 1 || (len(pos) == 1) == (*shell == "") {
			err = usageError(fs, "exec takes ID and either -c COMMAND or -- ARGS...")
		}
	default:
		err = usageError(fs, "unknown subcommand %q (%s)", sub, sandboxSynopsis)
	}
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	api := sbclient.New(c.base.String(), c.token, c.hc)
	switch sub {
	case "create":
		req := sbclient.CreateRequest{TTLSeconds: int(ttl.Seconds()), Network: *network, Name: *name}
		for _, p := range ports {
			n, err := strconv.Atoi(p)
			if err != nil {
				return usageError(fs, "--port %q is not a port number", p)
			}
			req.ExposePorts = append(req.ExposePorts, n)
		}
		for _, l := range labels {
			k, v, ok := strings.Cut(l, "=")
			if !ok {
				return usageError(fs, "--label %q is not KEY=VALUE", l)
			}
			if req.Labels == nil {
				req.Labels = map[string]string{}
			}
			req.Labels[k] = v
		}
		sb, err := api.CreateSandbox(ctx, req)
		if err != nil {
			return err
		}
		if *cf.json {
			return printJSON(stdout, sb)
		}
		fmt.Fprintln(stdout, sb.ID)
		printURLs(stderr, sb)
		return nil
	case "list":
		list, err := api.List(ctx)
		if err != nil {
			return err
		}
		if *cf.json {
			return printJSON(stdout, map[string]any{"sandboxes": list})
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTATUS\tPARENT\tEXPIRES\tTTL LEFT")
		for _, sb := range list {
			parent := "-"
			if sb.ParentID != nil {
				parent = *sb.ParentID
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%ds\n", sb.ID, sb.Status, parent, sb.ExpiresAt.Local().Format(time.DateTime), sb.TTLRemaining)
		}
		return tw.Flush()
	case "terminate":
		if err := api.TerminateSandbox(ctx, pos[0]); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "sandbox %s terminated, with its children\n", pos[0])
		return nil
	case "url":
		sb, err := api.Get(ctx, pos[0])
		if err != nil {
			return err
		}
		if *cf.json {
			return printJSON(stdout, map[string]any{"public_urls": sb.PublicURLs})
		}
		if len(pos) == 2 {
			u, ok := sb.PublicURLs[pos[1]]
			if !ok {
				return fmt.Errorf("sandbox %s exposes no port %s", sb.ID, pos[1])
			}
			fmt.Fprintln(stdout, u)
			return nil
		}
		printURLs(stdout, sb)
		return nil
	case "logs":
		code, err := api.Output(ctx, pos[0], pos[1], *stream, *offset, stdout)
		if err != nil {
			return err
		}
		if code != 0 {
			return fmt.Errorf("the command's exit status is %d", code)
		}
		return nil
	case "cp":
		return copyFile(ctx, api, pos[0], pos[1], stdout)
	case "artifacts":
		return listArtifacts(ctx, api, c.base.String(), pos[0], *cf.json, stdout, stderr)
	}
	// exec: started in the background, its output streamed live (and
	// resumed after a broken read) until it ends.
	req := sbclient.ExecRequest{Command: *shell, Argv: pos[1:], TimeoutSeconds: int(timeout.Seconds()), Background: true}
	ex, err := api.Exec(ctx, pos[0], req)
	if err != nil {
		return err
	}
	if *background {
		if *cf.json {
			return printJSON(stdout, ex)
		}
		fmt.Fprintln(stdout, ex.ExecID)
		return nil
	}
	var wg sync.WaitGroup
	var errErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, errErr = api.Output(ctx, pos[0], ex.ExecID, "stderr", 0, stderr)
	}()
	code, err := api.Output(ctx, pos[0], ex.ExecID, "stdout", 0, stdout)
	wg.Wait()
	if err = errors.Join(err, errErr); err != nil {
		return err
	}
	if code != 0 {
		return &exitStatus{code: code}
	}
	return nil
}

// listArtifacts prints the files of a sandbox's artifacts folder, and on
// stderr the folder's link, which opens the same list in a browser.
func listArtifacts(ctx context.Context, api *sbclient.Client, base, id string, asJSON bool, stdout, stderr io.Writer) error {
	files, cut, err := api.Artifacts(ctx, id)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, map[string]any{"artifacts": files, "truncated": cut})
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PATH\tSIZE\tTYPE")
	for _, f := range files {
		fmt.Fprintf(tw, "%s\t%d\t%s\n", f.Path, f.Size, f.ContentType)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if cut {
		fmt.Fprintln(stderr, "the folder holds more files than one listing names")
	}
	if sb, err := api.Get(ctx, id); err == nil && sb.Links["artifacts"] != "" {
		fmt.Fprintf(stderr, "in a browser: %s%s\n", strings.TrimSuffix(base, "/"), sb.Links["artifacts"])
	}
	return nil
}

// exitStatus is a command's non-zero exit, which sandstep exits with too.
type exitStatus struct{ code int }

func (e *exitStatus) Error() string { return "exit status " + strconv.Itoa(e.code) }

func printURLs(w io.Writer, sb sbclient.Sandbox) {
	ports := make([]string, 0, len(sb.PublicURLs))
	for p := range sb.PublicURLs {
		ports = append(ports, p)
	}
	slices.Sort(ports)
	for _, p := range ports {
		fmt.Fprintf(w, "port %s: %s\n", p, sb.PublicURLs[p])
	}
}

// copyFile copies a local file (or - for stdin/stdout) to or from a
// sandbox; the sandbox's side is ID:/path.
func copyFile(ctx context.Context, api *sbclient.Client, src, dst string, stdout io.Writer) error {
	remote := func(s string) (string, string, bool) {
		id, p, ok := strings.Cut(s, ":")
		return id, p, ok && strings.HasPrefix(p, "/") && !strings.Contains(id, "/")
	}
	if id, p, ok := remote(src); ok {
		if _, _, both := remote(dst); both {
			return errors.New("cp copies between this machine and a sandbox, not between sandboxes")
		}
		w := stdout
		if dst != "-" {
			f, err := os.Create(dst)
			if err != nil {
				return err
			}
			defer f.Close()
			w = f
		}
		_, err := api.ReadFile(ctx, id, p, w)
		return err
	}
	id, p, ok := remote(dst)
	if !ok {
		return errors.New("one of SRC and DST must be ID:/absolute/path")
	}
	var r io.Reader = os.Stdin
	if src != "-" {
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	return api.WriteFile(ctx, id, p, r)
}

// printJSON prints v as the --json answer of a sandbox command.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
