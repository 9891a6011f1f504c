package conformance

import (
	"bufio"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// hostListener is a TCP listener on the host's 127.0.0.1 that sandboxes
// try to reach. A client sends one line holding its token; the listener
// records the line and only then answers "ok", so once a client has read
// the answer its visit is on record.
type hostListener struct {
	ln   net.Listener
	port int

	mu    sync.Mutex
	lines []string
	wg    sync.WaitGroup
}

func (f *fix) hostListener() *hostListener {
	f.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.t.Fatalf("listen on 127.0.0.1: %v", err)
	}
	h := &hostListener{ln: ln, port: ln.Addr().(*net.TCPAddr).Port}
	h.wg.Go(h.serve)
	f.t.Cleanup(func() {
		ln.Close()
		h.wg.Wait()
	})
	return h
}

func (h *hostListener) serve() {
	for {
		c, err := h.ln.Accept()
		if err != nil {
			// Closed at the end of the case; any other accept error also
			// ends it, and the case then sees no visits and says so.
			return
		}
		h.wg.Go(func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil && line == "" {
				return
			}
			h.mu.Lock()
			h.lines = append(h.lines, line)
			h.mu.Unlock()
			_, _ = c.Write([]byte("ok\n"))
		})
	}
}

// visits counts the recorded lines holding token.
func (h *hostListener) visits(token string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, l := range h.lines {
		if strings.Contains(l, token) {
			n++
		}
	}
	return n
}

// probeScript tries to visit the host listener with the first TCP client
// the sandbox has and prints "connected via TOOL", "blocked via TOOL" or
// "no-client". It always exits 0. The port and token are in the script so
// that it also works as a snapshot setup command.
func probeScript(port int, token string) string {
	return `CF_PORT=` + strconv.Itoa(port) + ` CF_TOKEN=` + token + `; export CF_PORT CF_TOKEN
if command -v bash >/dev/null 2>&1; then tool=bash
elif command -v python3 >/dev/null 2>&1; then tool=python3
elif command -v perl >/dev/null 2>&1; then tool=perl
elif command -v curl >/dev/null 2>&1; then tool=curl
else echo no-client; exit 0; fi
case $tool in
bash) bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$CF_PORT" || exit 1; printf "%s\n" "$CF_TOKEN" >&3; IFS= read -r reply <&3; [ "$reply" = ok ]' ;;
python3) python3 -c 'import os, socket
s = socket.create_connection(("127.0.0.1", int(os.environ["CF_PORT"])), 10)
s.sendall((os.environ["CF_TOKEN"] + "\n").encode())
assert s.makefile().readline() == "ok\n"' ;;
perl) perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$ENV{CF_PORT}", Timeout => 10) or exit 1; print $s "$ENV{CF_TOKEN}\n"; $r = <$s>; exit($r eq "ok\n" ? 0 : 1)' ;;
curl) out=$(curl --http0.9 -s -m 10 "http://127.0.0.1:$CF_PORT/$CF_TOKEN") && [ "$out" = ok ] ;;
esac >/dev/null 2>&1 && echo "connected via $tool" || echo "blocked via $tool"
`
}
