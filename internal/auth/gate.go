package auth

import (
	"net"
	"sync"
)

// Gate bounds connections from each source address and in all, for a
// listener to admit or refuse a new connection before reading from it.
// A source is the remote IP: a flood from a few addresses fills only its
// own share, and leaves room for everybody else (issue #43: nine
// addresses with 1,000 keyless connections each filled a storage
// server's global cap, and legitimate clients were refused).
//
// Wire servers and raft ports gate the connections still in the
// handshake (anyone who can reach the port can open them); the NFS
// gateway, whose clients have no key, gates every connection.
type Gate struct {
	// Max bounds the connections inside in all, PerSource those from one
	// address; zero is no bound.
	Max, PerSource int

	mu       sync.Mutex
	n        int
	bySource map[string]int
}

// Enter admits a connection from src (see Source) unless that would pass
// a bound; every admitted connection must Leave.
func (g *Gate) Enter(src string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.Max > 0 && g.n >= g.Max || g.PerSource > 0 && g.bySource[src] >= g.PerSource {
		return false
	}
	if g.bySource == nil {
		g.bySource = make(map[string]int)
	}
	g.n++
	g.bySource[src]++
	return true
}

// Leave lets out a connection Enter admitted.
func (g *Gate) Leave(src string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n--
	if g.bySource[src] <= 1 {
		delete(g.bySource, src)
	} else {
		g.bySource[src]--
	}
}

// Len is how many are inside.
func (g *Gate) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

// Source is the address a connection is counted under: its remote IP.
func Source(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return c.RemoteAddr().String()
}

// Bounds of the handshake gates (connections that have not proven a key
// yet). A handshake takes one round trip, but a host running several
// clients (a gateway, mounts, the tests' whole cluster on 127.0.0.1) may
// dial a burst of connections on a loaded machine, and a refused
// handshake fails a call: the share per source is generous, and the whole
// stays half of a wire server's MaxConns, so handshakes alone never fill
// it.
const (
	DefaultMaxHandshakes          = 4096
	DefaultMaxHandshakesPerSource = 256
)
