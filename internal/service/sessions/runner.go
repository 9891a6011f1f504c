package sessions

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandstep/sandstep/providers"
)

// Languages a run may be written in.
const (
	LangTypeScript = "typescript"
	LangJavaScript = "javascript"
	LangPython     = "python"
	LangShell      = "shell"
)

// Languages lists them, for messages.
var Languages = []string{LangTypeScript, LangJavaScript, LangPython, LangShell}

// WorkspacePath is where a session's volume is mounted and where code runs.
const WorkspacePath = "/workspace"

var (
	//go:embed runners/runner.js
	jsRunner string
	//go:embed runners/runner.py
	pyRunner string
)

// The programs run with /bin/sh -c, the runner as $1 and the code on
// standard input. JavaScript and TypeScript run on Deno where the sandbox
// has it (the local provider mounts it with its tools; the Deno provider's
// sandboxes are Deno), so that both give the same results; JavaScript falls
// back to Node.js, TypeScript does not (Node.js before 22.13 cannot read
// it, and a later one only strips types where Deno checks its syntax).
const (
	jsCommand = `if command -v deno >/dev/null 2>&1; then exec deno eval "$1"; fi
if command -v node >/dev/null 2>&1; then exec node --no-warnings --experimental-vm-modules --expose-internals -e "$1"; fi
echo "sandstep: the sandbox has neither Deno nor Node.js to run JavaScript" >&2
exit 127`
	tsCommand = `if command -v deno >/dev/null 2>&1; then exec deno eval "$1"; fi
echo "sandstep: typescript runs on Deno, which the sandbox lacks (make deps installs it; make build puts it in tools_dir); send the code as javascript to run it on Node.js" >&2
exit 127`
	pyCommand = `if command -v python3 >/dev/null 2>&1; then exec python3 -c "$1"; fi
echo "sandstep: the sandbox has no python3" >&2
exit 127`
	// A script file rather than sh -c "$code": code may be longer than
	// one argument may be (128 KiB on Linux), and it must not read its own
	// text as input.
	shCommand = `f=$(mktemp) || exit 126
cat > "$f"
/bin/sh "$f" < /dev/null
c=$?
rm -f "$f"
exit $c`
)

// execRequest builds the command that runs code in language.
func execRequest(language, code, mark string, env map[string]string, timeout time.Duration) providers.ExecRequest {
	e := make(map[string]string, len(env)+3)
	for k, v := range env {
		e[k] = v
	}
	var argv []string
	switch language {
	case LangShell:
		argv = []string{"/bin/sh", "-c", shCommand}
	case LangPython:
		argv = []string{"/bin/sh", "-c", pyCommand, "sh", pyRunner}
	case LangTypeScript:
		argv = []string{"/bin/sh", "-c", tsCommand, "sh", jsRunner}
	default:
		argv = []string{"/bin/sh", "-c", jsCommand, "sh", jsRunner}
	}
	if language != LangShell {
		e["SANDSTEP_MARK"] = mark
		e["SANDSTEP_LANG"] = language
		// The runner cuts a larger value to a string preview; half the
		// limit leaves room for the escaping that adds.
		e["SANDSTEP_MAX_RESULT"] = strconv.Itoa(MaxResultBytes / 2)
	}
	return providers.ExecRequest{
		Argv:    argv,
		Cwd:     WorkspacePath,
		Env:     e,
		Stdin:   strings.NewReader(code),
		Timeout: timeout,
	}
}

// newCaptures returns the writers for a run's stdout and stderr.
func newCaptures(r *redactor) (stdout, stderr *capture) {
	keep := MaxOutputBytes + r.maxLen
	return &capture{keep: keep, tail: 2*MaxResultBytes + 1024}, &capture{keep: keep}
}

// result assembles what a run returns from what it printed and how it
// ended.
// memoryMB is the sandbox's memory limit, for the message of a run killed
// for it.
func result(language, mark string, stdout, stderr *capture, res providers.ExecResult, r *redactor, memoryMB int) *Result {
	out := &Result{ExitCode: res.ExitCode, DurationMS: res.Duration.Milliseconds(), TimedOut: res.TimedOut, OOM: res.OOM, Result: json.RawMessage("null")}
	var v verdict
	found := false
	outBytes, outTotal := stdout.head, stdout.total
	if language != LangShell {
		raw, whole := stdout.whole()
		if !whole {
			raw = stdout.last()
		}
		var before []byte
		if before, v, found = splitVerdict(raw, mark); found {
			// The verdict line is not the code's output.
			lineLen := int64(len(raw) - len(before))
			outTotal -= lineLen
			if whole {
				outBytes = before
			}
		}
	}
	if int64(len(outBytes)) > outTotal {
		outBytes = outBytes[:outTotal]
	}
	out.Stdout, out.StdoutTruncated = text(outBytes, outTotal, r)
	out.Stderr, out.StderrTruncated = text(stderr.head, stderr.total, r)

	if found {
		out.Interpreter = v.Interpreter
	}
	switch {
	case res.TimedOut:
		out.Error = ptr("the run timed out after " + res.Duration.Round(time.Millisecond).String())
	case res.OOM:
		// Whatever the runner printed, the kernel ended the code.
		out.Error = ptr(fmt.Sprintf("out of memory: the run was killed at the sandbox's memory limit (%d MiB)", memoryMB))
	case found && !v.OK:
		out.Error = v.Error
		if out.Error == nil {
			out.Error = ptr("the code failed")
		}
	case found:
		out.Success = res.ExitCode == 0
		if v.Result != nil {
			out.Result, out.ResultTruncated = capJSON(r.JSON(v.Result))
			out.ResultTruncated = out.ResultTruncated || v.Truncated
		}

	case res.Signal != "":
		out.Error = ptr("the code was killed by " + res.Signal)
	case res.ExitCode == 0:
		out.Success = true
	default:
		msg := fmt.Sprintf("exit status %d", res.ExitCode)
		if first, _, _ := strings.Cut(out.Stderr, "\n"); res.ExitCode == 127 && first != "" {
			msg += ": " + first
		}
		out.Error = &msg
	}
	if out.Error != nil {
		e := cutAt(r.String(*out.Error), MaxErrorBytes)
		out.Error = &e
	}
	return out
}

// capJSON keeps a result within MaxResultBytes: a larger one becomes a
// JSON string holding its beginning.
func capJSON(raw json.RawMessage) (json.RawMessage, bool) {
	if len(raw) <= MaxResultBytes {
		return raw, false
	}
	s := string(raw)
	for n := MaxResultBytes / 2; ; n /= 2 {
		b, _ := json.Marshal(strings.ToValidUTF8(cutAt(s, n), "\uFFFD"))
		if len(b) <= MaxResultBytes {
			return b, true
		}
	}
}

func validLanguage(l string) bool { return slices.Contains(Languages, l) }

func ptr[T any](v T) *T { return &v }
