package local

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandstep/sandstep/providers"
)

// getVia sends GET / over the unix socket of an exposed port.
func getVia(t *testing.T, portURL string) (int, string, error) {
	t.Helper()
	sock := strings.TrimPrefix(portURL, "unix://")
	var c net.Conn
	err := viaShortPath(sock, func(p string) error {
		var err error
		c, err = net.DialTimeout("unix", p, 5*time.Second)
		return err
	})
	if err != nil {
		return 0, "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		return 0, "", err
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), err
}

// TestExposedPorts: an exposed port of a sandbox without any network is
// reached through its socket on the host, across a plugin restart; a port
// nothing listens on drops the connection; the socket goes with the
// sandbox.
func TestExposedPorts(t *testing.T) {
	e := newEnv(t, func(s *Settings) { s.ROPaths = append(s.ROPaths, "/usr") })
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("python3 (make deps) serves the test page")
		}
		t.Skip("python3 (make deps) serves the test page")
	}
	sb := e.create(providers.CreateSpec{ExposePorts: []int{8000, 8001}, Network: providers.NetworkPolicy{Mode: providers.NetworkNone}})
	if len(sb.PortURLs) != 2 || !strings.HasPrefix(sb.PortURLs[8000], "unix://") {
		t.Fatalf("port URLs %v", sb.PortURLs)
	}
	e.sh(sb.ID, "mkdir -p /workspace/site && echo hi > /workspace/site/index.html && "+
		"nohup python3 -m http.server 8000 --bind 127.0.0.1 -d /workspace/site > /dev/null 2>&1 &")
	get := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			status, body, err := getVia(t, sb.PortURLs[8000])
			if err == nil && status == 200 && body == "hi\n" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d %q %v", what, status, body, err)
			}
		}
	}
	get("first")
	if _, _, err := getVia(t, sb.PortURLs[8001]); err == nil {
		t.Errorf("a port nothing listens on answered")
	}
	e.p.Close()
	e.p = e.newProvider()
	get("after a plugin restart")
	got, err := e.p.Get(context.Background(), sb.ID)
	if err != nil || got.PortURLs[8000] != sb.PortURLs[8000] {
		t.Errorf("Get: %v %v", got.PortURLs, err)
	}
	if err := e.p.Terminate(context.Background(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := getVia(t, sb.PortURLs[8000]); err == nil {
		t.Errorf("the port answers after terminate")
	}
	if _, err := e.p.Create(context.Background(), providers.CreateSpec{ExposePorts: []int{3128}}); providers.CodeOf(err) != providers.InvalidArgument {
		t.Errorf("exposing the egress port: %v", err)
	}
}
