package sessions

import (
	"context"
	"fmt"
	"time"

	"github.com/sandstep/sandstep/providers"
)

// Stateful runs: with RunRequest.Stateful, Python and JavaScript code runs
// in a long-lived interpreter inside the session's sandbox (the runner in
// kernel mode), so that variables, imports and open handles persist from
// one run to the next while the sandbox lives. Each run is an exec of a
// small shell client (statefulClient) that starts the interpreter when
// there is none and hands it the run: the interpreter reads the code from
// the client's standard input and writes to its standard output and error
// (through /proc/<client>/fd/7, 8 and 9), so output, the last expression's value and
// errors come back exactly as from a stateless run, and a warm run starts
// no process but the client's shell. A run that times out or runs out of
// memory ends the interpreter (endInterpreter); the next run starts another
// and says the state was lost, and why. Each session has a sandbox of its
// own, and the interpreter lives in it: two sessions never share one.
//
// The interpreter's directory holds ctl, a FIFO of requests ("<client
// pid> <mark> <started 0|1> <why state was lost>"), status, a FIFO it
// opens for writing when it takes a run and writes "<client pid>
// <status>" to at its end (its closing early tells the client the
// interpreter died), and pid.

// kernelDir is where a language's interpreter keeps its FIFOs and pid in
// the sandbox; $SANDSTEP_LANG completes it.
const kernelDir = "/tmp/.sandstep-kernel-"

// statefulClient runs one piece of code in the interpreter, $1 being the
// runner and $2 the command that runs it ($3 its options). It exits with
// the code's status. Only shell builtins run in a warm run.
const statefulClient = `d=` + kernelDir + `$SANDSTEP_LANG
started=0 lost= pid=
[ -f "$d/pid" ] && read -r pid < "$d/pid"
if [ -z "$pid" ] || [ ! -d "/proc/$pid" ]; then
  command -v "$2" >/dev/null 2>&1 || { echo "sandstep: the sandbox has no $2 for stateful runs" >&2; exit 127; }
  [ -n "$pid" ] && lost="the interpreter ended (it exited, crashed or was killed)"
  [ -f "$d/lost" ] && read -r lost < "$d/lost"
  rm -rf "$d"
  mkdir -p "$d" && mkfifo "$d/ctl" "$d/status" || exit 126
  SANDSTEP_KERNEL=$d "$2" $3 "$1" </dev/null >/dev/null 2>&1 &
  i=0
  while [ ! -f "$d/pid" ]; do
    i=$((i+1))
    if [ $i -gt 3000 ] || ! kill -0 $! 2>/dev/null; then
      echo "sandstep: the $SANDSTEP_LANG interpreter did not start" >&2
      exit 1
    fi
    sleep 0.005
  done
  started=1
fi
# The interpreter takes the run's input and output from these: 0, 1 and 2
# are redirected for a moment by every builtin with a redirection.
exec 7<&0 8>&1 9>&2
printf '%s %s %s %s\n' $$ "$SANDSTEP_MARK" "$started" "$lost" > "$d/ctl"
# The interpreter holds status open for writing its whole life, so the end
# of status is its death, whether it has been reaped yet or not (a killed
# process closes its files first). The status of an earlier run whose
# client went away may come first.
exec 3< "$d/status"
while read -r id st <&3; do
  [ "$id" = $$ ] && exit "$st"
done
echo "sandstep: the interpreter ended during the run; its state is lost" >&2
# As a shell reports a child killed by SIGKILL: the provider then tells an
# OOM kill (the interpreter is the sandbox's largest process).
exit 137`

// endClient ends a language's interpreter (an interrupt first, so that it
// may close what it holds) and leaves the reason, $1, for the next run.
const endClient = `d=` + kernelDir + `$SANDSTEP_LANG
pid=
[ -f "$d/pid" ] && read -r pid < "$d/pid"
if [ -n "$pid" ] && [ -d "/proc/$pid" ]; then
  kill -INT "$pid" 2>/dev/null
  i=0
  while [ $i -lt 20 ] && kill -0 "$pid" 2>/dev/null; do sleep 0.01; i=$((i+1)); done
  kill -KILL "$pid" 2>/dev/null
fi
rm -f "$d/pid"
mkdir -p "$d" && printf '%s\n' "$1" > "$d/lost"`

// Interpreter describes the interpreter a stateful run ran in.
type Interpreter struct {
	// Started: this run started it, so nothing of earlier runs is there.
	Started bool `json:"started"`
	// StateLost says why the interpreter of earlier runs is gone, when it
	// ended rather than never having run.
	StateLost string `json:"state_lost,omitempty"`
}

// statefulLanguage reports whether language has a stateful interpreter.
func statefulLanguage(language string) bool {
	return language == LangPython || language == LangJavaScript || language == LangTypeScript
}

// statefulRequest is execRequest for a stateful run.
func statefulRequest(language, code, mark string, env map[string]string, timeout time.Duration) providers.ExecRequest {
	req := execRequest(language, code, mark, env, timeout)
	switch language {
	case LangPython:
		req.Argv = []string{"/bin/sh", "-c", statefulClient, "sh", pyRunner, "python3", "-c"}
	default:
		req.Argv = []string{"/bin/sh", "-c", statefulClient, "sh", jsRunner, "node", "--no-warnings --experimental-vm-modules --expose-internals -e"}
	}
	return req
}

// endInterpreter ends the session sandbox's interpreter for language after
// a run that did not end by itself, so that the next run starts a fresh
// one and says why the state was lost.
func (s *Service) endInterpreter(ctx context.Context, sbID, language, why string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	res, err := s.prov.Exec(ctx, sbID, providers.ExecRequest{
		Argv:    []string{"/bin/sh", "-c", endClient, "sh", why},
		Env:     map[string]string{"SANDSTEP_LANG": language},
		Timeout: 10 * time.Second,
	})
	if err != nil || res.ExitCode != 0 {
		// The sandbox may be gone with it; if not, the next run finds the
		// interpreter busy and times out too.
		s.log.Warn("ending a session's interpreter", "sandbox_id", sbID, "language", language, "exit_code", res.ExitCode, "err", s.redact.Error(err))
	}
}

// lostReason says why a run's end costs the interpreter its state, or ""
// when it does not.
func lostReason(res providers.ExecResult, timeout time.Duration) string {
	switch {
	case res.TimedOut:
		return fmt.Sprintf("the previous run timed out after %s and its interpreter was restarted", timeout)
	case res.OOM:
		return "the previous run ran out of memory and its interpreter was restarted"
	}
	return ""
}
