package direct_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/client"
)

// wsEcho is a WebSocket echo server in the Python standard library.
const wsEcho = `
import socket, hashlib, base64, threading
def recvn(c, n):
    b = b""
    while len(b) < n:
        d = c.recv(n - len(b))
        if not d:
            raise EOFError
        b += d
    return b
def handle(c):
    data = b""
    while b"\r\n\r\n" not in data:
        data += c.recv(4096)
    key = [l.split(b":", 1)[1].strip() for l in data.split(b"\r\n") if l.lower().startswith(b"sec-websocket-key")][0]
    acc = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + acc + b"\r\n\r\n")
    while True:
        h = recvn(c, 2)
        n = h[1] & 127
        mask = recvn(c, 4)
        p = bytes(b ^ mask[i % 4] for i, b in enumerate(recvn(c, n)))
        if h[0] & 15 == 8:
            return
        c.sendall(bytes([0x81, len(p)]) + p)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 9000))
s.listen()
while True:
    c, _ = s.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
`

// TestPortProxiesWebSocket: a WebSocket to a server in the sandbox works
// through the exposed port's public URL.
func TestPortProxiesWebSocket(t *testing.T) {
	e := newEnv(t, "")
	ctx := ctxFor(t)
	acme := e.client(tokenAcme)
	sb, err := acme.CreateSandbox(ctx, client.CreateRequest{TTLSeconds: 600, ExposePorts: []int{9000}})
	if err != nil {
		t.Fatal(err)
	}
	if err := acme.WriteFile(ctx, sb.ID, "/workspace/ws.py", strings.NewReader(wsEcho)); err != nil {
		t.Fatal(err)
	}
	if _, err := acme.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"python3", "/workspace/ws.py"}, Background: true, KeepAlive: true}); err != nil {
		t.Fatal(err)
	}
	public := sb.PublicURLs["9000"]
	_, token, _ := strings.Cut(public, "?token=")
	var conn net.Conn
	var res *http.Response
	var br *bufio.Reader
	for deadline := time.Now().Add(30 * time.Second); ; {
		conn, err = net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(conn, "GET /v1/sandboxes/"+sb.ID+"/ports/9000/ws?token="+token+" HTTP/1.1\r\nHost: x\r\n"+
			"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
		br = bufio.NewReader(conn)
		if res, err = http.ReadResponse(br, nil); err != nil {
			t.Fatal(err)
		}
		if res.StatusCode == http.StatusSwitchingProtocols || time.Now().After(deadline) {
			break
		}
		conn.Close() // the server is not up yet: 502
		time.Sleep(200 * time.Millisecond)
	}
	defer conn.Close()
	if res.StatusCode != http.StatusSwitchingProtocols || res.Header.Get("Sec-Websocket-Accept") != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Fatalf("upgrade: %d %v", res.StatusCode, res.Header)
	}
	msg := []byte("hello through the port")
	mask := []byte{1, 2, 3, 4}
	frame := append([]byte{0x81, 0x80 | byte(len(msg))}, mask...)
	for i, b := range msg {
		frame = append(frame, b^mask[i%4])
	}
	if _, err := conn.Write(frame); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, 2+len(msg))
	if _, err := io.ReadFull(br, got); err != nil {
		t.Fatal(err)
	}
	if got[0] != 0x81 || int(got[1]) != len(msg) || string(got[2:]) != string(msg) {
		t.Errorf("echo frame %q", got)
	}
	// Terminating the sandbox revokes its URL: the open WebSocket ends,
	// and the link no longer leads anywhere.
	if err := acme.TerminateSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := br.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the WebSocket is still open after the sandbox ended: %d %v", n, err)
	}
	res, err = http.Get(public)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Errorf("the public URL after terminate: %d", res.StatusCode)
	}
}
