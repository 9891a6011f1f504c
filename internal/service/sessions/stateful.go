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
// there is none, hands it the code through a FIFO and relays its output
// FIFOs to the exec's own stdout and stderr, so output, the last
// expression's value and errors come back exactly as from a stateless run.
// A run that times out or runs out of memory ends the interpreter
// (endInterpreter); the next run starts another and says the state was
// lost, and why. Each session has a sandbox of its own, and the
// interpreter lives in it: two sessions never share one.

// kernelDir is where a language's interpreter keeps its FIFO and pid in
// the sandbox; $SANDSTEP_LANG completes it.
const kernelDir = "/tmp/.sandstep-kernel-"

// statefulClient runs one piece of code in the interpreter, $1 being the
// runner and $2 the command that runs it. It exits with the code's status.
const statefulClient = `d=` + kernelDir + `$SANDSTEP_LANG
command -v "$2" >/dev/null 2>&1 || { echo "sandstep: the sandbox has no $2 for stateful runs" >&2; exit 127; }
mkdir -p "$d" || exit 126
started=0 lost=
pid=$(cat "$d/pid" 2>/dev/null)
if [ -z "$pid" ] || ! grep -qs sandstep-kernel "/proc/$pid/cmdline"; then
  [ -n "$pid" ] && lost="the interpreter ended (it exited, crashed or was killed)"
  [ -f "$d/lost" ] && lost=$(cat "$d/lost")
  rm -f "$d/lost" "$d/pid" "$d/ctl"
  mkfifo "$d/ctl" || exit 126
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
r=$d/run.$$
rm -f "$r.out" "$r.err" "$r.status"
mkfifo "$r.out" "$r.err" || exit 126
cat > "$r.code"
printf '%s %s %s %s\n' "$r" "$SANDSTEP_MARK" "$started" "$lost" > "$d/ctl"
cat "$r.err" >&2 &
e=$!
cat "$r.out"
wait $e
st=$(cat "$r.status" 2>/dev/null)
rm -f "$r.out" "$r.err" "$r.code" "$r.status"
if [ -z "$st" ]; then
  echo "sandstep: the interpreter ended during the run; its state is lost" >&2
  exit 1
fi
exit "$st"`

// endClient ends a language's interpreter (an interrupt first, so that it
// may close what it holds) and leaves the reason, $1, for the next run.
const endClient = `d=` + kernelDir + `$SANDSTEP_LANG
pid=$(cat "$d/pid" 2>/dev/null)
if [ -n "$pid" ] && grep -qs sandstep-kernel "/proc/$pid/cmdline"; then
  kill -INT "$pid" 2>/dev/null
  i=0
  while [ $i -lt 20 ] && kill -0 "$pid" 2>/dev/null; do sleep 0.01; i=$((i+1)); done
  kill -KILL "$pid" 2>/dev/null
fi
rm -f "$d/pid"
mkdir -p "$d" && printf '%s' "$1" > "$d/lost"`

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
