package sessions_test

import (
	"net/http"
	"strings"
	"testing"
)

// Two stacks with their own deployment ids and tables on one provider state
// directory, with the same tenant and session id: each session has a volume
// of its own, and deleting one stack's session leaves the other's files.
func TestTwoDeploymentsNeverShareAVolume(t *testing.T) {
	a := newEnv(t, envConfig{deployment: "stack-a"})
	b := newEnv(t, envConfig{deployment: "stack-b", dir: a.dir})

	wantOK(t, a.run(tokenAcme, "s1", "shell", "echo from-a > /workspace/who"))
	if out := wantOK(t, b.run(tokenAcme, "s1", "shell", "cat /workspace/who 2>/dev/null; echo from-b > /workspace/who")); strings.Contains(out, "from-a") {
		t.Fatalf("stack-b's session sees stack-a's volume: %q", out)
	}
	va, vb := a.session(tokenAcme, "s1")["volume"].(map[string]any)["slug"], b.session(tokenAcme, "s1")["volume"].(map[string]any)["slug"]
	if va == nil || va == vb {
		t.Fatalf("both stacks' sessions use volume %v", va)
	}
	if r := b.do(http.MethodDelete, "/v1/sessions/s1", tokenAcme, nil); r.status != http.StatusOK {
		t.Fatalf("delete stack-b's session: %d %s", r.status, r.body)
	}
	if out := wantOK(t, a.run(tokenAcme, "s1", "shell", "cat /workspace/who")); strings.TrimSpace(out) != "from-a" {
		t.Fatalf("stack-a's file after stack-b deleted its session: %q", out)
	}
}
