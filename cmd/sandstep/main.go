// Command sandstep is the operator's and developer's entry point: it lists and
// checks provider plugins, and (in later subcommands) serves the local stack
// and talks to a server.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand. run returns an error to print; errUsage prints
// the command's usage instead.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var errUsage = errors.New("usage")

func commands() map[string]command {
	return map[string]command{
		"version":     {"print the version", runVersion},
		"plugins":     {"list provider plugins with their versions and capabilities", runPlugins},
		"conformance": {"run the provider conformance suite against a configured provider", runConformance},
		"serve":       {"run the local stack: DynamoDB Local, the provider, the engine and the HTTP API", runServe},
		"submit":      {"submit a deep-research job to a server; --wait follows it to the end", runSubmit},
		"jobs":        {"list your jobs, newest first; --status filters, --all pages through every one", runJobs},
		"status":      {"show a job's status, phase and steps", runStatus},
		"events":      {"print a job's events; --follow streams them until the job ends", runEvents},
		"cancel":      {"cancel a job", runCancel},
		"report":      {"print a finished job's report as markdown", runReport},
		"run-code":    {"run code in a session of a server: files in /workspace stay for the session's next runs", runRunCode},
		"reap":        {"run one cleanup pass over the local state: expired session volumes, idle sandboxes, leaked sandboxes", runReap},
		"fake-sandy":  {"serve a fake Sandy API on 127.0.0.1 (real commands under bubblewrap, switchable faults) for manual tests", runFakeSandy},
		"research":    {"run a deep-research query: live steps, then the report (starts a local server if none runs)", runResearch},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "sandstep: unknown command %q\n", args[0])
		usage(stderr, cmds)
		return 2
	}
	if err := c.run(ctx, args[1:], stdout, stderr); err != nil {
		if errors.Is(err, errUsage) || errors.Is(err, flag.ErrHelp) {
			return 2
		}
		fmt.Fprintf(stderr, "sandstep %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

func usage(w io.Writer, cmds map[string]command) {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("usage: sandstep COMMAND [flags]\n\ncommands:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %-12s %s\n", n, cmds[n].summary)
	}
	b.WriteString("\nRun 'sandstep COMMAND -h' for a command's flags.\n")
	io.WriteString(w, b.String())
}

// newFlags returns a FlagSet that prints its errors and usage to stderr.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("sandstep "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}
