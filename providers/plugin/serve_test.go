//go:build linux && !sandstep.noserve

// Tests of the plugin's side (Serve), which builds tagged sandstep.noserve
// leave out; the rest of the package's tests run in those builds too
// (make unit), as the Lambdas link the host.

package plugin_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/providers/plugin"
)

func TestPluginExitsWhenOrphaned(t *testing.T) {
	// Started by a shell that exits at once, with no parent-death signal:
	// only the plugin's own watch of its parent can end it.
	bin := filepath.Join(binDir, "sandstep-provider-test")
	logFile := filepath.Join(t.TempDir(), "plugin.log")
	sh := exec.Command("/bin/sh", "-c", `SANDSTEP_PLUGIN_HOST_PID=$$ "$0" </dev/null >/dev/null 2>"$1" & echo $!`, bin, logFile)
	sh.Env = append(os.Environ(), plugin.Handshake.MagicCookieKey+"="+plugin.Handshake.MagicCookieValue)
	out, err := sh.Output()
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("shell printed %q", out)
	}
	awaitExit(t, pid, 10*time.Second)
	logs, _ := os.ReadFile(logFile)
	if !strings.Contains(string(logs), "the host process is gone") {
		t.Fatalf("the plugin ended for another reason:\n%s", logs)
	}
}
