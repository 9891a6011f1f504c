package local

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The agent binary (cmd/sandstep-local-agent, or the provider binary
// itself) plays three roles. bwrap runs it, bound read-only at agentPath,
// as roleAgent. The agent starts commands itself, each in a cgroup of its
// own (direct.go); where it has no cgroup to make them in, it re-executes
// itself as roleShim, one per exec: the subreaper that owns the command's
// process tree. roleProbe checks at Configure that the binary runs inside a
// sandbox at all and speaks the plugin's protocol (agentProtocol).
const (
	roleAgent = "__sandstep_agent"
	roleShim  = "__sandstep_shim"
	roleProbe = "__sandstep_probe"
)

// RunSandboxRole runs the in-sandbox side of the provider when the process was
// started as one of its roles, and then exits; otherwise it returns at once.
// A main (or a TestMain) that can be used as the sandbox agent calls it first,
// before parsing flags.
func RunSandboxRole() {
	if len(os.Args) < 2 {
		return
	}
	switch os.Args[1] {
	case roleAgent:
		os.Exit(runAgent())
	case roleShim:
		os.Exit(runShim(os.Args[2:]))
	case roleProbe:
		fmt.Println("ok", agentProtocol())
		os.Exit(0)
	}
}

// rlimits are the per-process limits of every command in a sandbox. Zero
// leaves a limit as inherited.
type rlimits struct {
	NProc  uint64 `json:"nproc"`
	FSize  uint64 `json:"fsize"`
	CPU    uint64 `json:"cpu"`
	AS     uint64 `json:"as"`
	NoFile uint64 `json:"nofile"`
}

// String encodes the limits for the shim's command line.
func (l rlimits) String() string {
	return fmt.Sprintf("%d,%d,%d,%d,%d", l.NProc, l.FSize, l.CPU, l.AS, l.NoFile)
}

func parseRlimits(s string) (rlimits, error) {
	parts := strings.Split(s, ",")
	if len(parts) != 5 {
		return rlimits{}, fmt.Errorf("bad limits %q", s)
	}
	var v [5]uint64
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return rlimits{}, fmt.Errorf("bad limits %q: %w", s, err)
		}
		v[i] = n
	}
	return rlimits{NProc: v[0], FSize: v[1], CPU: v[2], AS: v[3], NoFile: v[4]}, nil
}

// apply sets the limits on process pid; its children inherit them.
func (l rlimits) apply(pid int) error {
	set := func(res int, name string, v uint64) error {
		if v == 0 {
			return nil
		}
		if err := unix.Prlimit(pid, res, &unix.Rlimit{Cur: v, Max: v}, nil); err != nil {
			return fmt.Errorf("setrlimit %s=%d: %w", name, v, err)
		}
		return nil
	}
	if err := set(unix.RLIMIT_NPROC, "nproc", l.NProc); err != nil {
		return err
	}
	if err := set(unix.RLIMIT_FSIZE, "fsize", l.FSize); err != nil {
		return err
	}
	if err := set(unix.RLIMIT_CPU, "cpu", l.CPU); err != nil {
		return err
	}
	if err := set(unix.RLIMIT_AS, "as", l.AS); err != nil {
		return err
	}
	return set(unix.RLIMIT_NOFILE, "nofile", l.NoFile)
}
