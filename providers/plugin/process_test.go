//go:build linux

package plugin_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandstep/sandstep/internal/testkit/testlog"
	"github.com/sandstep/sandstep/providers/plugin"
)

// The host speaks go-plugin's client protocol itself (process.go); these
// tests hold it to what go-plugin's client guaranteed.

// What a plugin writes to its os.Stdout and os.Stderr after the handshake
// reaches the host's log through go-plugin's stdio stream, one log line
// per line with the stream named.
func TestPluginStdoutAndStderrReachHostLogger(t *testing.T) {
	logs := &testlog.Buffer{}
	opts := testOptions(logs)
	opts.Env = append(opts.Env, "SANDSTEP_TEST_PRINT=printed-by-the-plugin")
	c := start(t, opts)
	if _, err := c.Info(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"stdout": false, "stderr": false}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range logLines(t, logs) {
			if s, _ := m["stream"].(string); m["msg"] == "printed-by-the-plugin on "+s && m["provider"] == "test" {
				want[s] = true
			}
		}
		if want["stdout"] && want["stderr"] {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("relayed %v; log:\n%s", want, logs.String())
}

// A binary that answers with something other than a handshake fails Start
// with what it printed, and is not left running.
func TestNotAPluginFailsStartAndIsKilled(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sandstep-provider-liar")
	// exec keeps the pid the script prints.
	script := "#!/bin/sh\necho \"not a handshake $$\"\nexec sleep 60\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := plugin.Start(context.Background(), plugin.Options{Path: path, Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		t.Fatal("Start accepted a binary that printed no handshake")
	}
	t.Log(err)
	m := regexp.MustCompile(`not a handshake (\d+)`).FindStringSubmatch(err.Error())
	if m == nil || !strings.Contains(err.Error(), `provider "liar"`) {
		t.Fatalf("error does not name the provider and quote the line: %v", err)
	}
	pid, _ := strconv.Atoi(m[1])
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("process %d of the failed start still exists (%v)", pid, err)
	}
}

// A plugin that never prints its handshake is killed when StartTimeout
// runs out.
func TestSilentPluginTimesOutAndIsKilled(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sandstep-provider-silent")
	pidFile := filepath.Join(dir, "pid")
	script := "#!/bin/sh\necho $$ > " + pidFile + "\nexec sleep 60\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := plugin.Start(context.Background(), plugin.Options{Path: path, StartTimeout: 300 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "timeout while waiting for plugin to start") {
		t.Fatalf("Start: %v, want a start timeout", err)
	}
	b, rerr := os.ReadFile(pidFile)
	if rerr != nil {
		t.Fatal(rerr)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("process %d of the timed-out start still exists (%v)", pid, err)
	}
}

// A plugin built for another architecture is named as such, which
// go-plugin's client did with debug/elf.
func TestPluginOfAnotherArchitectureIsNamed(t *testing.T) {
	machine, other := byte(62), "amd64" // EM_X86_64
	if runtime.GOARCH == "amd64" {
		machine, other = 183, "arm64" // EM_AARCH64
	}
	hdr := make([]byte, 64)
	copy(hdr, "\x7fELF\x02\x01\x01")
	hdr[16] = 2 // ET_EXEC
	hdr[18] = machine
	path := filepath.Join(t.TempDir(), "sandstep-provider-foreign")
	if err := os.WriteFile(path, hdr, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := plugin.Start(context.Background(), plugin.Options{Path: path, Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		t.Fatal("Start accepted a binary of another architecture")
	}
	want := "the plugin binary is built for " + other + ", this host is linux/" + runtime.GOARCH
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not contain %q", err, want)
	}
}

// Close asks the plugin to stop (go-plugin's controller): it exits on its
// own, which is logged as no error.
func TestCloseStopsThePluginGracefully(t *testing.T) {
	logs := &testlog.Buffer{}
	c := start(t, testOptions(logs))
	id := newSandbox(t, c)
	pid := pidOf(t, c, id)
	c.Close()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("plugin process %d still exists after Close (%v)", pid, err)
	}
	var exited bool
	for _, m := range logLines(t, logs) {
		if m["msg"] == "plugin process exited" {
			exited = true
			if m["level"] != "INFO" || m["exit"] != nil || m["error"] != nil {
				t.Errorf("a plugin stopped on request exits with status 0: %v", m)
			}
		}
	}
	if !exited {
		t.Fatalf("no exit line:\n%s", logs.String())
	}
}
