package fakedeno_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandstep/sandstep/internal/testkit/fakedeno"
)

// The checklist of the contract's section 8 that the SDK test does not
// reach: auth, framing, refusals and lifetimes, spoken raw.

func rest(t *testing.T, method, url, token string, body any, hdr map[string]string) (int, map[string]any, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out, resp.Header
}

func dialCreate(t *testing.T, url, token string, cfg map[string]any) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	b, _ := json.Marshal(cfg)
	h := http.Header{}
	h.Set("Authorization", "Bearer "+token)
	h.Set("x-deno-sandbox-config", base64.StdEncoding.EncodeToString(b))
	ws, resp, err := websocket.Dial(t.Context(), strings.Replace(url, "http", "ws", 1)+"/api/v3/sandboxes/create", &websocket.DialOptions{HTTPHeader: h})
	if ws != nil {
		ws.SetReadLimit(1 << 20)
	}
	return ws, resp, err
}

func read(t *testing.T, ws *websocket.Conn) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, b, err := ws.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(b)
}

func TestAuthRules(t *testing.T) {
	f := startFake(t, nil)
	if st, body, _ := rest(t, "GET", f.ConsoleURL+"/api/v2/volumes", "ddo_wrong", nil, nil); st != 401 || body["code"] != "INVALID_TOKEN" {
		t.Fatalf("a wrong token: %d %v", st, body)
	}
	if _, resp, err := dialCreate(t, f.SandboxURL, "nope", map[string]any{}); err == nil || resp == nil || resp.StatusCode != 401 {
		t.Fatalf("a create with a wrong token: %v %v", resp, err)
	}
	personal, err := fakedeno.Start(fakedeno.Options{Token: "ddp_personal_tok", Org: "acme"}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	defer personal.Close()
	if st, body, _ := rest(t, "GET", personal.ConsoleURL+"/api/v2/volumes", "ddp_personal_tok", nil, nil); st != 400 || body["code"] != "MISSING_ORG" {
		t.Fatalf("a personal token without X-Deno-Org: %d %v", st, body)
	}
	if st, _, _ := rest(t, "GET", personal.ConsoleURL+"/api/v2/volumes", "ddp_personal_tok", nil, map[string]string{"X-Deno-Org": "acme"}); st != 200 {
		t.Fatalf("a personal token with its org: %d", st)
	}
}

func TestVolumeRules(t *testing.T) {
	f := startFake(t, nil)
	post := func(body map[string]any) (int, map[string]any) {
		st, out, _ := rest(t, "POST", f.ConsoleURL+"/api/v2/volumes", testToken, body, nil)
		return st, out
	}
	for _, c := range []struct {
		body map[string]any
		want int
	}{
		{map[string]any{"slug": "ab--cd", "region": "ord", "capacity": "1GB"}, 400},
		{map[string]any{"slug": "-a", "region": "ord", "capacity": "1GB"}, 400},
		{map[string]any{"slug": strings.Repeat("a", 33), "region": "ord", "capacity": "1GB"}, 400},
		{map[string]any{"slug": "small", "region": "ord", "capacity": "299MB"}, 400},
		{map[string]any{"slug": "big", "region": "ord", "capacity": "21GB"}, 400},
		{map[string]any{"slug": "amsvol", "region": "ams", "capacity": "1GB"}, 503},
		{map[string]any{"slug": "bin", "region": "ord", "capacity": "1GiB", "token": "ignored"}, 200},
	} {
		if st, out := post(c.body); st != c.want {
			t.Errorf("%v: %d %v, want %d", c.body, st, out, c.want)
		}
	}
	if _, out, _ := rest(t, "GET", f.ConsoleURL+"/api/v2/volumes/bin", testToken, nil, nil); out["capacity"] != float64(1<<30) {
		t.Errorf("1GiB is %v bytes", out["capacity"])
	}
	if st, _ := post(map[string]any{"slug": "bin", "region": "ord", "capacity": "1GB"}); st != 409 {
		t.Errorf("a taken slug: %d", st)
	}
	// Pagination: a bare array, the next page in Link.
	for _, s := range []string{"p1", "p2", "p3"} {
		post(map[string]any{"slug": s, "region": "ord", "capacity": "1GB"})
	}
	req, _ := http.NewRequestWithContext(t.Context(), "GET", f.ConsoleURL+"/api/v2/volumes?limit=2", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var page []map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&page)
	resp.Body.Close()
	if len(page) != 2 || !strings.Contains(resp.Header.Get("Link"), `cursor=`) || !strings.Contains(resp.Header.Get("Link"), `rel="next"`) {
		t.Errorf("page 1: %v, Link %q", page, resp.Header.Get("Link"))
	}
}

func TestSocketRules(t *testing.T) {
	f := startFake(t, nil)
	ws, resp, err := dialCreate(t, f.SandboxURL, testToken, map[string]any{"memory_mb": 1280, "volumes": []any{}, "unknown_key": true})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.Header.Get("x-deno-sandbox-id")
	if len(id) != len("sbx_ord_")+20 || resp.Header.Get("x-deno-trace-id") == "" {
		t.Fatalf("101 headers: %v", resp.Header)
	}
	ctx := t.Context()
	_ = ws.Write(ctx, websocket.MessageText, []byte("ping"))
	if got := read(t, ws); got != "pong" {
		t.Fatalf("ping answered %q", got)
	}
	_ = ws.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":0,"method":"noSuchMethod","params":{}}`))
	if got := read(t, ws); !strings.Contains(got, `"id":0`) || !strings.Contains(got, `-32601`) {
		t.Fatalf("unknown method: %s", got)
	}
	_ = ws.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":1,"method":"readFile","params":{"path":"/home/app/missing"}}`))
	if got := read(t, ws); !strings.Contains(got, `"result":{"error":{"constructorName":"NotFound"`) || !strings.Contains(got, `"code":"ENOENT"`) {
		t.Fatalf("an app error: %s", got)
	}
	_ = ws.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":2,"method":"spawn","params":{"command":"true","args":null,"stdout":"null","stderr":"null"}}`))
	if got := read(t, ws); !strings.Contains(got, `"stdoutStreamId":null`) || !strings.Contains(got, `"stderrStreamId":null`) {
		t.Fatalf("spawn without pipes: %s", got)
	}
	_ = ws.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":3,"method":"processWait","params":{"pid":2}}`))
	if got := read(t, ws); !strings.Contains(got, `"oom":null`) || !strings.Contains(got, `"signal":null`) || !strings.Contains(got, `"success":true`) {
		t.Fatalf("processWait: %s", got)
	}
	// Session mode: the sandbox dies with its primary socket.
	_ = ws.Close(websocket.StatusNormalClosure, "")
	deadline := time.Now().Add(5 * time.Second)
	for len(f.Running()) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if ids := f.Running(); len(ids) > 0 {
		t.Fatalf("a session sandbox outlived its socket: %v", ids)
	}
	// Garbage closes the socket with 4000.
	ws, _, err = dialCreate(t, f.SandboxURL, testToken, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	_ = ws.Write(ctx, websocket.MessageText, []byte("{not json"))
	_, _, err = ws.Read(ctx)
	if websocket.CloseStatus(err) != 4000 {
		t.Fatalf("garbage: %v, want close 4000", err)
	}
}

func TestSandboxLimitsAndLifetimes(t *testing.T) {
	f := startFake(t, nil)
	stop := time.Now().Add(1500 * time.Millisecond).UnixMilli()
	var socks []*websocket.Conn
	for range 5 {
		ws, _, err := dialCreate(t, f.SandboxURL, testToken, map[string]any{"stop_at_ms": stop})
		if err != nil {
			t.Fatal(err)
		}
		socks = append(socks, ws)
	}
	if _, resp, err := dialCreate(t, f.SandboxURL, testToken, map[string]any{}); err == nil || resp == nil || resp.StatusCode != 429 {
		t.Fatalf("a sixth sandbox: %v %v", resp, err)
	}
	// At stop_at_ms the sandboxes end and their sockets close normally.
	for _, ws := range socks {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		_, _, err := ws.Read(ctx)
		cancel()
		if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
			t.Fatalf("at stop_at_ms: %v, want close 1000", err)
		}
	}
	if ids := f.Running(); len(ids) > 0 {
		t.Fatalf("past stop_at_ms: %v", ids)
	}
	// Single attach, and no snapshot of an attached volume.
	rest(t, "POST", f.ConsoleURL+"/api/v2/volumes", testToken, map[string]any{"slug": "one", "region": "ord", "capacity": "1GB"}, nil)
	ws, _, err := dialCreate(t, f.SandboxURL, testToken, map[string]any{"stop_at_ms": time.Now().Add(time.Minute).UnixMilli(), "volumes": []any{map[string]any{"volume": "one", "path": "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	if _, resp, err := dialCreate(t, f.SandboxURL, testToken, map[string]any{"volumes": []any{map[string]any{"volume": "one", "path": "/data"}}}); err == nil || resp.StatusCode != 409 {
		t.Fatalf("a second attach: %v %v", resp, err)
	}
	if st, body, _ := rest(t, "POST", f.ConsoleURL+"/api/v2/volumes/one/snapshot", testToken, map[string]any{"slug": "snap"}, nil); st != 409 {
		t.Fatalf("a snapshot of an attached volume: %d %v", st, body)
	}
}
