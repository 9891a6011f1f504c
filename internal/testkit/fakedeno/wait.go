package fakedeno

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

// Deno's VM tells a command that exited from one a signal killed
// (processWait's code and signal), and a spawn of a program that does not
// exist fails at once with NotFound. Under bubblewrap neither shows: bwrap
// reports a command killed by signal N as exit 128+N, and a failed exec as
// exit 1 after the spawn. So each command runs as the child of this
// process's own executable, bound into the sandbox at waitPath and started
// with waitEnv set: it starts the command, says whether that worked, waits
// for it and reports the wait status on fd 3, a pipe to the fake.

// waitPath is where a sandbox finds the fake's executable.
const waitPath = "/.fakedeno/wait"

// waitEnv set in a process's environment makes it the waiter (see init).
const waitEnv = "FAKEDENO_WAITER"

// The waiter's lines on fd 3.
const (
	waitStarted  = "started"
	waitNotFound = "notfound"
	waitExit     = "exit"
	waitSignal   = "signal"
)

func init() {
	if os.Getenv(waitEnv) == "" {
		return
	}
	os.Exit(waiter(os.Args[1:]))
}

// waiter runs argv as its child and reports on fd 3 how it ended. It
// catches every signal, so that a signal sent to the command's process
// group ends the command and not the report; SIGKILL ends both, which the
// fake reads from bwrap's status as before.
func waiter(argv []string) int {
	status := os.NewFile(3, "status")
	if status == nil || len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "fakedeno waiter: no status fd or no command")
		return 126
	}
	syscall.CloseOnExec(3) // the command and its children do not hold it
	_ = os.Unsetenv(waitEnv)
	sigs := make(chan os.Signal, 32)
	signal.Notify(sigs) // caught, not ignored: the child gets the defaults
	go func() {
		for range sigs {
		}
	}()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		msg := strings.ReplaceAll(err.Error(), "\n", " ")
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(status, "%s %s\n", waitNotFound, msg)
			return 127
		}
		fmt.Fprintf(os.Stderr, "%s: %v\n", argv[0], err)
		fmt.Fprintf(status, "%s 126\n", waitExit)
		return 126
	}
	fmt.Fprintln(status, waitStarted)
	_ = cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		fmt.Fprintf(status, "%s %d\n", waitSignal, int(ws.Signal()))
		return 128 + int(ws.Signal())
	}
	fmt.Fprintf(status, "%s %d\n", waitExit, ws.ExitStatus())
	return ws.ExitStatus()
}

// waitReport reads the waiter's lines.
type waitReport struct {
	r *bufio.Reader
	c io.Closer
}

// started reads the first line: nil once the command runs, the message of
// a program not found, or nil as well when the waiter said nothing (it
// could not run: the fake then knows what bwrap says).
func (w *waitReport) started() (notFound string) {
	line, _ := w.r.ReadString('\n')
	if msg, ok := strings.CutPrefix(strings.TrimSpace(line), waitNotFound+" "); ok {
		return msg
	}
	return ""
}

// ended reads how the command ended; ok is false when the waiter did not
// say (it was killed with SIGKILL, as the command was).
func (w *waitReport) ended() (code int, sig syscall.Signal, ok bool) {
	defer w.c.Close()
	line, _ := w.r.ReadString('\n')
	kind, num, found := strings.Cut(strings.TrimSpace(line), " ")
	n, err := strconv.Atoi(num)
	if !found || err != nil {
		return 0, 0, false
	}
	switch kind {
	case waitExit:
		return n, 0, true
	case waitSignal:
		return 128 + n, syscall.Signal(n), true
	}
	return 0, 0, false
}
