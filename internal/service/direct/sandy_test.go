package direct_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/conformance"
	"github.com/sandstep/sandstep/providers/plugin/plugintest"
	"github.com/sandstep/sandstep/providers/sandy"
)

// TestSandyFacadePassesConformance points the Sandy provider, Sandy's own
// client in sandstep, at sandstep's /api/sandboxes and runs the
// conformance suite's core cases through the plugin protocol: an agent
// written for Sandy works against sandstep unchanged.
func TestSandyFacadePassesConformance(t *testing.T) {
	e := newEnv(t, "")
	settings, _ := json.Marshal(map[string]any{"base_url": e.url, "retry_base_delay": "10ms", "max_retries": 4})
	p := plugintest.Connect(t, sandy.New())
	if err := p.Configure(t.Context(), providers.Config{Settings: settings, Secrets: map[string]string{"api_key": tokenAcme}}); err != nil {
		t.Fatal(err)
	}
	conformance.Run(t, p, conformance.Options{Core: true, CaseTimeout: 2 * time.Minute})
	if n := e.liveSandboxes(); n != 0 {
		t.Errorf("%d sandboxes left running by the conformance cases", n)
	}
}

// TestSandyFacadeShapes checks the facade's answers against Sandy's
// contract on what the Sandy plugin does not exercise, and takes the
// requests of an agent library written from Sandy's docs (seed 004's
// SandyClient: a named priority, timeout in seconds, base64 writes, and id,
// public_url and exit_code read from the answers).
func TestSandyFacadeShapes(t *testing.T) {
	e := newEnv(t, "")
	do := func(method, path, token string, body any) (int, map[string]any) {
		t.Helper()
		r := e.do(method, path, token, body)
		return r.status, r.json(t)
	}
	status, sb := do("POST", "/api/sandboxes", tokenAcme, map[string]any{"ttl_seconds": 600, "expose_ports": []int{8000}, "priority": "NORMAL"})
	id, _ := sb["sandboxId"].(string)
	if status != 200 || id == "" || sb["id"] != id || sb["sandbox_id"] != id || sb["url"] == "" || sb["public_url"] != sb["url"] ||
		sb["createdAt"] == nil || sb["timeoutAt"] == nil || sb["status"] != "running" {
		t.Fatalf("create: %d %v", status, sb)
	}
	if status, body := do("POST", "/api/sandboxes", tokenAcme, map[string]any{"priority": "URGENT"}); status != 422 || body["detail"] == nil {
		t.Errorf("a priority that is neither an int nor a name: %d %v", status, body)
	}
	base := "/api/sandboxes/" + id
	status, ex := do("POST", base+"/exec", tokenAcme, map[string]any{"command": "pwd; printf x > rel.txt; exit 3", "timeout": 30})
	if status != 200 || ex["stdout"] != "/workspace\n" || ex["exitCode"] != float64(3) || ex["exit_code"] != float64(3) {
		t.Errorf("exec: %d %v", status, ex)
	}
	bin := base64.StdEncoding.EncodeToString([]byte{0, 0xff, 0xfe, 'a'})
	if status, body := do("POST", base+"/files/write", tokenAcme, map[string]any{"path": "sub/b.bin", "content": bin, "encoding": "base64"}); status != 200 || body["success"] != true {
		t.Errorf("write base64: %d %v", status, body)
	}
	if status, body := do("GET", base+"/files/read?path=sub/b.bin", tokenAcme, nil); status != 200 || body["content"] != bin || body["encoding"] != "base64" {
		t.Errorf("read binary: %d %v", status, body)
	}
	if status, body := do("GET", base+"/files/read?path=/workspace/rel.txt", tokenAcme, nil); status != 200 || body["content"] != "x" || body["encoding"] != nil {
		t.Errorf("read text: %d %v", status, body)
	}
	if status, body := do("GET", base+"/files/list?path=/workspace", tokenAcme, nil); status != 200 || fmt.Sprint(body["files"]) != "[rel.txt sub/b.bin]" {
		t.Errorf("list: %d %v", status, body)
	}
	if status, body := do("GET", base+"/files/read?path=missing.txt", tokenAcme, nil); status != 404 || body["detail"] == nil {
		t.Errorf("read a missing file: %d %v", status, body)
	}
	// The facade holds a file in memory whole: past its bounds it says
	// where the streamed route is, in Sandy's error shape.
	if err := e.client(tokenAcme).WriteFile(ctxFor(t), id, "/workspace/big.bin", io.LimitReader(zeros{}, 33<<20)); err != nil {
		t.Fatal(err)
	}
	if status, body := do("GET", base+"/files/read?path=big.bin", tokenAcme, nil); status != 413 || !strings.Contains(fmt.Sprint(body["detail"]), "/v1/sandboxes/"+id+"/files") {
		t.Errorf("read a file past the bound: %d %v", status, body)
	}
	huge := `{"path":"h.txt","content":"` + strings.Repeat("a", 11<<20) + `"}`
	if r := e.do("POST", base+"/files/write", tokenAcme, huge); r.status != 413 {
		t.Errorf("write a body past the bound: %d %.200s", r.status, r.body)
	}
	if status, body := do("GET", base, tokenGlobex, nil); status != 404 || body["detail"] == nil {
		t.Errorf("another tenant's sandbox: %d %v", status, body)
	}
	if status, body := do("POST", base+"/terminate", tokenAcme, nil); status != 200 || body["status"] != "terminated" {
		t.Errorf("terminate: %d %v", status, body)
	}
	for _, path := range []string{base + "/terminate", base + "/exec"} {
		if status, body := do("POST", path, tokenAcme, map[string]any{"command": "true"}); status != 404 || body["detail"] == nil {
			t.Errorf("%s after terminate: %d %v", path, status, body)
		}
	}
	if status, _ := do("GET", base, tokenAcme, nil); status != 404 {
		t.Errorf("status after terminate: %d", status)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
