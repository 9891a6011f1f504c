package local

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/egress"
)

// Exposed ports. A sandbox's network namespace has nothing but its own
// loopback, so a server in it is out of reach of the host. For each port a
// sandbox exposes (CreateSpec.ExposePorts), the plugin listens on a unix
// socket in the sandbox's directory (state_dir, private to the plugin's
// user) and forwards each connection: the agent, inside the namespace,
// dials 127.0.0.1:<port> and hands the connected socket over (opDial,
// SCM_RIGHTS), and the plugin copies bytes both ways. No port of the host
// is opened: Sandbox.PortURLs names the sockets ("unix://<path>"), and the
// host's API proxies them behind its own access token.

// portSocket is where the plugin serves a sandbox's exposed port.
func portSocket(s settings, id string, port int) string {
	return filepath.Join(s.sandboxDir(id), "port-"+strconv.Itoa(port)+".sock")
}

// portURLs are the exposed ports' URLs of a record.
func portURLs(s settings, rec sandboxRecord) map[int]string {
	if len(rec.Ports) == 0 {
		return nil
	}
	out := make(map[int]string, len(rec.Ports))
	for _, p := range rec.Ports {
		out[p] = "unix://" + portSocket(s, rec.ID, p)
	}
	return out
}

// checkPorts validates CreateSpec.ExposePorts.
func checkPorts(ports []int) error {
	seen := map[int]bool{}
	for _, p := range ports {
		if p < 1 || p > 65535 || p == egressPort || seen[p] {
			return providers.Errorf(providers.InvalidArgument, "create", "expose_ports: %d is not a port from 1 to 65535 (other than %d) listed once", p, egressPort)
		}
		seen[p] = true
	}
	return nil
}

// portServer serves one sandbox's exposed ports.
type portServer struct {
	lns  []net.Listener
	wg   sync.WaitGroup
	done chan struct{}
}

// servePorts starts serving the record's exposed ports (again, for a
// sandbox another plugin process started: a stale socket file is replaced).
func (p *Provider) servePorts(s settings, rec sandboxRecord) error {
	if len(rec.Ports) == 0 {
		return nil
	}
	p.egressMu.Lock()
	if p.ports == nil {
		p.ports = map[string]*portServer{}
	}
	if p.ports[rec.ID] != nil {
		p.egressMu.Unlock()
		return nil
	}
	ps := &portServer{done: make(chan struct{})}
	p.ports[rec.ID] = ps
	p.egressMu.Unlock()
	for _, port := range rec.Ports {
		path := portSocket(s, rec.ID, port)
		_ = os.Remove(path)
		var ln net.Listener
		err := viaShortPath(path, func(p string) error {
			var err error
			ln, err = net.Listen("unix", p)
			return err
		})
		if err != nil {
			p.stopPorts(rec.ID)
			return fmt.Errorf("listening for port %d: %w", port, err)
		}
		_ = os.Chmod(path, 0o600)
		ps.lns = append(ps.lns, ln)
		ps.wg.Add(1)
		go func() {
			defer ps.wg.Done()
			p.forwardPort(s, rec.ID, port, ln, ps.done)
		}()
	}
	return nil
}

func (p *Provider) forwardPort(s settings, id string, port int, ln net.Listener, done chan struct{}) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			f, err := fetchFD(ctx, s, id, request{Op: opDial, Port: port})
			cancel()
			if err != nil {
				p.log.Debug("exposed port: no connection", "sandbox_id", id, "port", port, "err", err)
				return
			}
			in, err := net.FileConn(f)
			f.Close()
			if err != nil {
				return
			}
			defer in.Close()
			finished := make(chan struct{})
			defer close(finished)
			go func() {
				select {
				case <-done:
					c.Close()
					in.Close()
				case <-finished:
				}
			}()
			egress.Relay(c, in)
		}()
	}
}

// stopPorts stops serving a sandbox's exposed ports.
func (p *Provider) stopPorts(id string) {
	p.egressMu.Lock()
	ps := p.ports[id]
	delete(p.ports, id)
	p.egressMu.Unlock()
	if ps == nil {
		return
	}
	close(ps.done)
	for _, ln := range ps.lns {
		ln.Close()
	}
	ps.wg.Wait()
}

// dialPort answers opDial: a connection to port on the sandbox's loopback.
func (a *agent) dialPort(conn net.Conn, port int) {
	fw := &frameWriter{w: conn}
	if port < 1 || port > 65535 {
		_ = fw.writeJSON(frameResult, errResult(providers.InvalidArgument, "port %d", port))
		return
	}
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 5*time.Second)
	if err != nil {
		_ = fw.writeJSON(frameResult, errResult(providers.Unavailable, "nothing answers on port %d in the sandbox: %v", port, err))
		return
	}
	defer c.Close()
	tc, ok := c.(*net.TCPConn)
	if !ok {
		_ = fw.writeJSON(frameResult, errResult(providers.Internal, "not a TCP connection"))
		return
	}
	f, err := tc.File()
	if err != nil {
		_ = fw.writeJSON(frameResult, errResult(providers.Internal, "connection: %v", err))
		return
	}
	defer f.Close()
	a.sendFD(conn, f)
}
