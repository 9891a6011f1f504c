package plugin_test

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"

	"github.com/sandstep/sandstep/internal/testkit/testlog"
)

// logLines parses the host's JSON log.
func logLines(t *testing.T, logs *testlog.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// A line a provider logs through a logger it made before Serve (in New, as
// providers do) reaches the host with its own level and message, not as
// "INFO configured ..." re-logged at info, and its durations in ms.
func TestPluginLogLineKeepsItsLevelAndMessage(t *testing.T) {
	logs := &testlog.Buffer{}
	c := start(t, testOptions(logs))
	c.Close()
	var found bool
	for _, m := range logLines(t, logs) {
		if !strings.Contains(m["msg"].(string), "configured") {
			continue
		}
		found = true
		if n := strings.Count(line(t, logs, "configured"), `"provider":`); n != 1 {
			t.Errorf("the provider attribute appears %d times: %s", n, line(t, logs, "configured"))
		}
		if m["msg"] != "configured" || m["level"] != "INFO" || m["name"] != "test" || m["provider"] != "test" || m["took_ms"] != 1.5 {
			t.Errorf("relayed line: %v", m)
		}
		// go-plugin's copy of the plugin's time and its relay's name add
		// nothing to the host's time and the provider attribute.
		if _, ok := m["timestamp"]; ok {
			t.Errorf("relayed line has the plugin's timestamp: %v", m)
		}
		if _, ok := m["logger"]; ok {
			t.Errorf("relayed line names the relay: %v", m)
		}
	}
	if !found {
		t.Fatalf("the configured line was not relayed:\n%s", logs.String())
	}
}

// A SIGTERM to the host's whole process group (systemd stopping it) does
// not end the plugin, which the host still needs to stop its sandboxes;
// the host's Close then ends it, and that exit is no error.
func TestPluginOutlivesSIGTERMAndItsExitOnCloseIsNoError(t *testing.T) {
	logs := &testlog.Buffer{}
	c := start(t, testOptions(logs))
	id := newSandbox(t, c)
	pid := pidOf(t, c, id)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Still the same process, answering.
	if got := pidOf(t, c, id); got != pid {
		t.Fatalf("the plugin was restarted after SIGTERM: pid %d, was %d", got, pid)
	}
	c.Close()
	exited := false
	for _, m := range logLines(t, logs) {
		if m["level"] == "ERROR" || m["level"] == "WARN" {
			t.Errorf("a %s line on a normal shutdown: %v", m["level"], m)
		}
		if m["msg"] == "plugin process exited" {
			exited = true
		}
	}
	if !exited {
		t.Fatalf("the exit was not logged:\n%s", logs.String())
	}
}

// line is the raw log line whose msg is msg.
func line(t *testing.T, logs *testlog.Buffer, msg string) string {
	t.Helper()
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"msg":"`+msg+`"`) {
			return l
		}
	}
	t.Fatalf("no %q line in:\n%s", msg, logs.String())
	return ""
}
