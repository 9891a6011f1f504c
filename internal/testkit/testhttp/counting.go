package testhttp

import (
	"net"
	"sync/atomic"
)

// CountingListener counts the bytes read from every connection it
// accepts: what the clients sent the server, exactly, the figure a
// sandbox's bytes out must match when the server is all it talks to.
type CountingListener struct {
	net.Listener
	n atomic.Int64
}

// Count wraps l.
func Count(l net.Listener) *CountingListener { return &CountingListener{Listener: l} }

// Received is the bytes read so far, from every connection.
func (l *CountingListener) Received() int64 { return l.n.Load() }

func (l *CountingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, n: &l.n}, nil
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.n.Add(int64(n))
	return n, err
}
