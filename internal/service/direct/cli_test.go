package direct_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLISandbox drives `sandstep sandbox` against a server: create with a
// port, exec streaming both streams with the command's exit status, cp both
// ways, logs of a background exec, url, artifacts, list, terminate.
func TestCLISandbox(t *testing.T) {
	e := newEnv(t, "")
	cli := func(stdin string, args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.CommandContext(ctxFor(t), filepath.Join(pluginDir, "sandstep"), append([]string{"sandbox"}, args...)...)
		cmd.Env = append(os.Environ(), "SANDSTEP_URL="+e.url, "SANDSTEP_TOKEN="+tokenAcme)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), code
	}
	out, errOut, code := cli("", "create", "--ttl", "10m", "--port", "8000", "--label", "k=v")
	id := strings.TrimSpace(out)
	if code != 0 || id == "" || !strings.Contains(errOut, "port 8000: "+e.url+"/v1/sandboxes/"+id+"/ports/8000/?token=") {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	if out, errOut, code = cli("", "exec", id, "-c", "echo one; echo two >&2; exit 7"); code != 7 || out != "one\n" || errOut != "two\n" {
		t.Errorf("exec: %d %q %q", code, out, errOut)
	}
	if out, _, code = cli("", "exec", id, "--", "printf", "%s-%s", "a b", "c"); code != 0 || out != "a b-c" {
		t.Errorf("exec argv: %d %q", code, out)
	}
	if _, errOut, code = cli("payload\x00\xff", "cp", "-", id+":/workspace/in.bin"); code != 0 {
		t.Fatalf("cp up: %d %s", code, errOut)
	}
	if out, _, code = cli("", "cp", id+":/workspace/in.bin", "-"); code != 0 || out != "payload\x00\xff" {
		t.Errorf("cp down: %d %q", code, out)
	}
	out, _, code = cli("", "exec", "--background", id, "-c", "seq 1 5")
	execID := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(execID, "ex-") {
		t.Fatalf("exec --background: %d %q", code, out)
	}
	if out, _, code = cli("", "logs", "--offset", "4", id, execID); code != 0 || out != "3\n4\n5\n" {
		t.Errorf("logs from offset 4: %d %q", code, out)
	}
	if out, _, code = cli("", "url", id, "8000"); code != 0 || !strings.HasPrefix(out, e.url+"/v1/sandboxes/"+id+"/ports/8000/?token=") {
		t.Errorf("url: %d %q", code, out)
	}
	if _, errOut, code = cli("chart", "cp", "-", id+":/workspace/artifacts/plots/a.svg"); code != 0 {
		t.Fatalf("cp an artifact: %d %s", code, errOut)
	}
	out, errOut, code = cli("", "artifacts", id)
	if rows := strings.Fields(out); code != 0 || len(rows) != 6 || rows[3] != "plots/a.svg" || rows[4] != "5" || rows[5] != "image/svg+xml" ||
		!strings.HasPrefix(errOut, "in a browser: "+e.url+"/v1/sandboxes/"+id+"/artifacts?token=") {
		t.Errorf("artifacts: %d %q %q", code, out, errOut)
	}
	if out, _, code = cli("", "list"); code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "running") {
		t.Errorf("list: %d %q", code, out)
	}
	var listed struct {
		Sandboxes []struct{ ID, Status string } `json:"sandboxes"`
	}
	if out, _, code = cli("", "list", "--json"); code != 0 || json.Unmarshal([]byte(out), &listed) != nil || len(listed.Sandboxes) != 1 || listed.Sandboxes[0].ID != id {
		t.Errorf("list --json: %d %q", code, out)
	}
	if _, errOut, code = cli("", "terminate", id); code != 0 {
		t.Errorf("terminate: %d %s", code, errOut)
	}
	if _, errOut, code = cli("", "exec", id, "-c", "true"); code != 1 || !strings.Contains(errOut, "terminated") {
		t.Errorf("exec after terminate: %d %s", code, errOut)
	}
}
