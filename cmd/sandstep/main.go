// Command sandstep is the operator's and developer's entry point: it serves
// the local stack, talks to a server as a client (research, submit, jobs,
// sessions, run-code...), and lists and checks provider plugins.
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
	"strconv"
	"strings"
	"syscall"
)

// command is one subcommand. run returns an error to print; errUsage means
// the usage was printed already (exit 2).
type command struct {
	// args is the synopsis after the command's name, as in the usage line.
	args    string
	summary string
	// more is a paragraph shown by `sandstep help CMD` under the summary.
	more string
	run  func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var errUsage = errors.New("usage")

func commands() map[string]command {
	return map[string]command{
		"version":     {"", "print the version", "", runVersion},
		"plugins":     {"[flags]", "list provider plugins with their versions and capabilities", "", runPlugins},
		"conformance": {"[flags]", "run the provider conformance suite against a configured provider", "", runConformance},
		"serve":       {"[flags]", "run the local stack: DynamoDB Local, the provider, the engine and the HTTP API", "", runServe},
		"research": {`"QUERY" [flags]`, "run a deep-research query on a server: live steps, then the report",
			"The steps redraw in place on a terminal and are appended when the output is not one.", runResearch},
		"submit": {`"QUERY" [flags]`, "submit a deep-research job to a server; --wait follows it to the end", "", runSubmit},
		"jobs":   {"[flags]", "list your jobs, newest first", "", runJobs},
		"status": {"ID [flags]", "show a job's status, phase and steps", "", runStatus},
		"events": {"ID [flags]", "print a job's events; --follow streams them until the job ends", "", runEvents},
		"cancel": {"ID [flags]", "cancel a job", "", runCancel},
		"report": {"ID [flags]", "print a finished job's report as markdown", "", runReport},
		"agent": {`run AGENT "PROMPT" [flags]`, "run a configured command-line agent in a sandbox on a server: live events, then its answer",
			"The events (sandbox.created, exec.started, agent.message, agent.tool_use, file.written, sandbox.terminated,\n" +
				"job.*) go to stderr as they happen; the agent's final answer goes to stdout, then the URLs of its\n" +
				"artifacts (on stderr). Exits non-zero when the run failed or was cancelled.", runAgent},
		"usage": {"[flags]", "show what your jobs used and cost, by day, job type or provider",
			"Reads GET /v1/usage: sandbox seconds, commands run, model tokens, search calls and pages crawled of the\n" +
				"jobs created in the range, with their cost at the server's [pricing].", runUsage},
		"run-code": {"[FILE | -e CODE] [flags]", "run code in a session of a server: files in /workspace stay for the session's next runs",
			"The code comes from FILE, from -e, or from standard input. Its output goes to stdout and stderr, then the\n" +
				"value of its last expression as JSON. The language is --language, else FILE's extension, else javascript\n" +
				"(said on stderr when assumed).", runRunCode},
		"sessions": {"[list | show SID | open SID | delete SID] [flags]", "list your run-code sessions; show, open or delete one",
			"list (the default) lists your sessions, newest first; show prints one session's record; open opens it\n" +
				"(in warm mode its sandbox starts); delete closes its sandbox and deletes its volume, with its files, now.", runSessions},
		"sandbox": {sandboxSynopsis, "create, use and terminate direct sandboxes on a server; exec streams live",
			"create prints the new sandbox's id (and on stderr the public URLs of --port); exec runs a command and\n" +
				"streams its stdout and stderr as they come, resuming after a broken connection, and exits with its exit\n" +
				"status; logs prints an exec's output from --offset; cp copies a file to or from ID:/path (- is stdin or\n" +
				"stdout); url prints the public URLs of exposed ports; terminate ends a sandbox and its children.", runSandbox},
		"reap": {"[flags]", "run one cleanup pass over the local state: expired session volumes, idle sandboxes, leaked sandboxes",
			"Runs the pass `sandstep serve` runs every [sessions] reaper_interval: deletes session volumes idle past their\n" +
				"TTL, closes idle session sandboxes, terminates sandboxes nothing needs or the ledger does not know.\n" +
				"It refuses to run while a server answers at [server] addr, which owns the same state.", runReap},
		"fake-sandy": {"[flags]", "serve a fake Sandy API on 127.0.0.1 (real commands under bubblewrap, switchable faults) for manual tests", "", runFakeSandy},
		"fake-deno":  {"[flags]", "serve a fake Deno Sandbox (console and regional APIs) on 127.0.0.1 (real commands under bubblewrap) for manual tests", "", runFakeDeno},
		"fake-modal": {"[flags]", "serve a fake Modal (its gRPC control plane and command router) on 127.0.0.1 (real commands under bubblewrap, switchable faults) for manual tests", "", runFakeModal},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func isHelp(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	switch {
	case len(args) == 0:
		usage(stderr, cmds)
		return 2
	case isHelp(args[0]) || (args[0] == "help" && len(args) == 1):
		usage(stdout, cmds)
		return 0
	case args[0] == "--version" || args[0] == "-version":
		return run(ctx, []string{"version"}, stdout, stderr)
	case args[0] == "help":
		c, ok := cmds[args[1]]
		if !ok || len(args) > 2 {
			fmt.Fprintf(stderr, "sandstep help: unknown command %q\n", strings.Join(args[1:], " "))
			usage(stderr, cmds)
			return 2
		}
		// The command prints its own usage, flags included, for -h.
		c.run(ctx, []string{"-h"}, stdout, stdout)
		return 0
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "sandstep: unknown command %q\n", args[0])
		usage(stderr, cmds)
		return 2
	}
	err := c.run(ctx, args[1:], stdout, stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	var es *exitStatus
	if errors.As(err, &es) {
		// The command in the sandbox said it all on stderr.
		return min(max(es.code, 1), 255)
	}
	fmt.Fprintf(stderr, "sandstep %s: %v\n", args[0], err)
	return 1
}

func usage(w io.Writer, cmds map[string]command) {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("usage: sandstep COMMAND [flags]\n       sandstep --version\n       sandstep help COMMAND\n\ncommands:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %-12s %s\n", n, cmds[n].summary)
	}
	b.WriteString("\nRun 'sandstep help COMMAND' (or 'sandstep COMMAND --help') for a command's arguments and flags.\n")
	io.WriteString(w, b.String())
}

// flags is a command's FlagSet with the one usage style every command
// shares: -h (--help) prints the whole usage (synopsis, summary, flags) to
// stdout; a mistake on the command line prints what is wrong and the
// synopsis to stderr.
type flags struct {
	*flag.FlagSet
	name           string
	cmd            command
	stdout, stderr io.Writer
	help, h        *bool
}

func newFlags(name string, stdout, stderr io.Writer) *flags {
	fs := flag.NewFlagSet("sandstep "+name, flag.ContinueOnError)
	// The flag package's own messages are replaced by usageError's.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	f := &flags{FlagSet: fs, name: name, cmd: commands()[name], stdout: stdout, stderr: stderr}
	f.h = fs.Bool("h", false, "")
	f.help = fs.Bool("help", false, "")
	return f
}

// synopsis is the usage line.
func (f *flags) synopsis() string {
	return strings.TrimSpace("usage: sandstep " + f.name + " " + f.cmd.args)
}

// printHelp prints the whole usage to stdout.
func (f *flags) printHelp() {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n%s.\n", f.synopsis(), upperFirst(f.cmd.summary))
	if f.cmd.more != "" {
		fmt.Fprintf(&b, "\n%s\n", f.cmd.more)
	}
	if defaults := flagDefaults(f.FlagSet); defaults != "" {
		b.WriteString("\nflags:\n" + defaults)
	}
	io.WriteString(f.stdout, b.String())
}

// flagDefaults lists the flags as flag.PrintDefaults does, without -h and
// -help.
func flagDefaults(fs *flag.FlagSet) string {
	var b strings.Builder
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "h" || f.Name == "help" {
			return
		}
		arg, usage := flag.UnquoteUsage(f)
		b.WriteString("  -" + f.Name)
		if arg != "" {
			b.WriteString(" " + arg)
		}
		b.WriteString("\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t"))
		if d := f.DefValue; d != "" && d != "false" && d != "0" && d != "[]" {
			if _, isString := f.Value.(interface{ IsBoolFlag() bool }); !isString && arg == "string" {
				d = strconv.Quote(d)
			}
			b.WriteString(" (default " + d + ")")
		}
		b.WriteByte('\n')
	})
	return b.String()
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// parseArgs parses flags that may come before or after the positional
// arguments ("submit QUERY --wait"), where flag.Parse alone stops at the
// first positional one; after "--" everything is positional.
func parseArgs(fs *flags, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usageError(fs, "%v", err)
		}
		if *fs.h || *fs.help {
			fs.printHelp()
			return nil, flag.ErrHelp
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// positional parses args and checks the positional arguments against
// names, all required: a missing one or one too many is named, then the
// usage printed.
func positional(fs *flags, args []string, names ...string) ([]string, error) {
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	switch {
	case len(pos) < len(names):
		return nil, usageError(fs, "missing %s", strings.Join(names[len(pos):], " and "))
	case len(pos) > len(names):
		return nil, usageError(fs, "unexpected argument %q", pos[len(names)])
	}
	for i, p := range pos {
		if strings.TrimSpace(p) == "" {
			return nil, usageError(fs, "%s is empty", names[i])
		}
	}
	return pos, nil
}

// usageError prints what is wrong with the command line and the synopsis.
func usageError(fs *flags, format string, args ...any) error {
	fmt.Fprintf(fs.stderr, "sandstep %s: %s\n%s\nRun 'sandstep help %s' for the flags.\n",
		fs.name, fmt.Sprintf(format, args...), fs.synopsis(), fs.name)
	return errUsage
}
