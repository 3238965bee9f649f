// Package memnet is an in-memory network for in-process tests: servers
// listen and clients dial by address as over TCP (wire.ClientConfig.Dial,
// the servers' Listener settings), without sockets, root or network
// namespaces, and with the faults a test needs:
//
//   - SetDown(host): the host's connections break (both ends read EOF)
//     and dials to it are refused until it is brought back;
//   - Partition(a, b): traffic between two hosts is silently lost both
//     ways, as on a cut link: nothing is refused. As wire's TCP options
//     make a kernel do (wire.ClientConfig.PeerTimeout), a connection
//     across the cut breaks once it has been cut for the peer timeout
//     (SetPeerTimeout, default 15 s), and a dial across it fails after a
//     third of it; Heal restores the link, and connections that lived
//     through the cut carry on with what was written after it;
//   - SetDelay(d): every write reaches its reader d later.
//
// Addresses are "host:port" with ports numbered per network. A
// connection is two unbounded byte queues, so a writer never waits for
// its reader (as a socket buffer mostly lets it).
package memnet

import (
	"context"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Network is one in-memory network. The zero value is not usable: New.
type Network struct {
	mu        sync.Mutex
	nextPort  int
	listeners map[string]*Listener // by address
	down      map[string]bool      // by host
	cut       map[[2]string]bool   // host pairs, sorted
	delay     time.Duration
	peerTO    time.Duration
	conns     map[*pipe]struct{}
	heals     map[[2]string]int // Heal calls per pair
	// changed is closed and replaced when a cut heals or a host comes
	// back, waking dials that hang.
	changed chan struct{}
}

// New returns an empty network.
func New() *Network {
	return &Network{nextPort: 1, listeners: map[string]*Listener{}, down: map[string]bool{}, cut: map[[2]string]bool{},
		conns: map[*pipe]struct{}{}, changed: make(chan struct{}), peerTO: 15 * time.Second, heals: map[[2]string]int{}}
}

func pair(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

// Listen opens a listener on host, at a port of its own.
func (n *Network) Listen(host string) (*Listener, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	addr := net.JoinHostPort(host, strconv.Itoa(n.nextPort))
	n.nextPort++
	l := &Listener{n: n, addr: Addr(addr), host: host, backlog: make(chan net.Conn, 128), closed: make(chan struct{})}
	n.listeners[addr] = l
	return l, nil
}

// Dialer returns a dial function for clients on host (for
// wire.ClientConfig.Dial).
func (n *Network) Dialer(host string) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) { return n.dial(ctx, host, addr) }
}

func (n *Network) dial(ctx context.Context, from, addr string) (net.Conn, error) {
	to, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "mem", Err: err}
	}
	for {
		n.mu.Lock()
		l := n.listeners[addr]
		cut := n.cut[pair(from, to)]
		changed := n.changed
		peerTO := n.peerTO
		switch {
		case cut:
			// A cut link answers nothing: wait for it to heal, as long
			// as wire's dialer waits for an answer to its SYN.
			n.mu.Unlock()
			t := time.NewTimer(peerTO / 3)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, &net.OpError{Op: "dial", Net: "mem", Addr: Addr(addr), Err: ctx.Err()}
			case <-t.C:
				return nil, &net.OpError{Op: "dial", Net: "mem", Addr: Addr(addr), Err: errTimeout}
			case <-changed:
				t.Stop()
				continue
			}
		case l == nil || n.down[to] || n.down[from]:
			n.mu.Unlock()
			return nil, &net.OpError{Op: "dial", Net: "mem", Addr: Addr(addr), Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
		}
		n.nextPort++
		local := Addr(net.JoinHostPort(from, strconv.Itoa(n.nextPort)))
		p := &pipe{n: n, hosts: [2]string{from, to}}
		p.q[0].ready = sync.NewCond(&p.mu)
		p.q[1].ready = sync.NewCond(&p.mu)
		n.conns[p] = struct{}{}
		n.mu.Unlock()
		client, server := &Conn{p: p, side: 0, local: local, remote: Addr(addr)}, &Conn{p: p, side: 1, local: Addr(addr), remote: local}
		select {
		case l.backlog <- server:
			return client, nil
		case <-l.closed:
			p.close()
			return nil, &net.OpError{Op: "dial", Net: "mem", Addr: Addr(addr), Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
		case <-ctx.Done():
			p.close()
			return nil, &net.OpError{Op: "dial", Net: "mem", Addr: Addr(addr), Err: ctx.Err()}
		}
	}
}

// SetDown takes host down (its connections break, dials to and from it
// are refused) or brings it back.
func (n *Network) SetDown(host string, down bool) {
	n.mu.Lock()
	n.down[host] = down
	var broken []*pipe
	if down {
		for p := range n.conns {
			if p.hosts[0] == host || p.hosts[1] == host {
				broken = append(broken, p)
			}
		}
	}
	n.wakeLocked()
	n.mu.Unlock()
	for _, p := range broken {
		p.close()
	}
}

// Partition cuts the link between hosts a and b. Its connections break
// after the peer timeout unless it heals first.
func (n *Network) Partition(a, b string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := pair(a, b)
	n.cut[k] = true
	heals := n.heals[k]
	var across []*pipe
	for p := range n.conns {
		if pair(p.hosts[0], p.hosts[1]) == k {
			across = append(across, p)
		}
	}
	time.AfterFunc(n.peerTO, func() {
		n.mu.Lock()
		still := n.cut[k] && n.heals[k] == heals // not healed meanwhile
		n.mu.Unlock()
		if still {
			for _, p := range across {
				p.close()
			}
		}
	})
}

// SetPeerTimeout sets how long a connection survives a cut link (wire's
// PeerTimeout; default 15 s). It applies to cuts made after it.
func (n *Network) SetPeerTimeout(d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.peerTO = d
}

// Heal restores the link between hosts a and b.
func (n *Network) Heal(a, b string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.cut, pair(a, b))
	n.heals[pair(a, b)]++
	n.wakeLocked()
}

// SetDelay makes every later write reach its reader d after it is made.
func (n *Network) SetDelay(d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.delay = d
}

func (n *Network) wakeLocked() {
	close(n.changed)
	n.changed = make(chan struct{})
}

// linkState is what a write between the pipe's hosts meets now.
func (n *Network) linkState(hosts [2]string) (cut bool, delay time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cut[pair(hosts[0], hosts[1])], n.delay
}

// Addr is a memnet address.
type Addr string

func (Addr) Network() string  { return "mem" }
func (a Addr) String() string { return string(a) }

// Listener is a memnet listener.
type Listener struct {
	n       *Network
	addr    Addr
	host    string
	backlog chan net.Conn
	once    sync.Once
	closed  chan struct{}
}

// Accept waits for the next connection.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.backlog:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close stops the listener; dials to it are refused.
func (l *Listener) Close() error {
	l.once.Do(func() {
		close(l.closed)
		l.n.mu.Lock()
		delete(l.n.listeners, string(l.addr))
		l.n.mu.Unlock()
	})
	return nil
}

// Addr is the listener's address.
func (l *Listener) Addr() net.Addr { return l.addr }

// chunk is one write, readable from at.
type chunk struct {
	b  []byte
	at time.Time
}

// queue is one direction of a pipe.
type queue struct {
	chunks []chunk
	ready  *sync.Cond
	// closedW: the writer closed (reads drain, then EOF).
	closedW bool
}

// pipe is a connection's shared state: queue q[i] is read by side i.
type pipe struct {
	n      *Network
	hosts  [2]string // dialer, listener
	mu     sync.Mutex
	q      [2]queue
	broken bool
	// readDL and writeDL are each side's deadlines.
	readDL, writeDL [2]time.Time
}

func (p *pipe) close() {
	p.mu.Lock()
	p.broken = true
	p.q[0].ready.Broadcast()
	p.q[1].ready.Broadcast()
	p.mu.Unlock()
	p.n.mu.Lock()
	delete(p.n.conns, p)
	p.n.mu.Unlock()
}

// Conn is one end of a memnet connection.
type Conn struct {
	p             *pipe
	side          int // reads q[side], writes q[1-side]
	local, remote Addr
}

var errTimeout = timeoutError{}

type timeoutError struct{}

func (timeoutError) Error() string   { return "memnet: i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }
func (timeoutError) Is(err error) bool {
	return err == os.ErrDeadlineExceeded
}

// Read reads what the other side wrote, waiting for it.
func (c *Conn) Read(b []byte) (int, error) {
	p := c.p
	p.mu.Lock()
	defer p.mu.Unlock()
	q := &p.q[c.side]
	for {
		if p.broken {
			return 0, io.EOF
		}
		now := time.Now()
		if dl := p.readDL[c.side]; !dl.IsZero() && !now.Before(dl) {
			return 0, &net.OpError{Op: "read", Net: "mem", Addr: c.remote, Err: errTimeout}
		}
		if len(q.chunks) > 0 && !now.Before(q.chunks[0].at) {
			n := copy(b, q.chunks[0].b)
			if q.chunks[0].b = q.chunks[0].b[n:]; len(q.chunks[0].b) == 0 {
				q.chunks = q.chunks[1:]
			}
			return n, nil
		}
		if len(q.chunks) == 0 && q.closedW {
			return 0, io.EOF
		}
		// Wake at the first chunk's time or the deadline, whichever
		// comes first (a Cond has no timeout: a timer broadcasts).
		wake := time.Time{}
		if len(q.chunks) > 0 {
			wake = q.chunks[0].at
		}
		if dl := p.readDL[c.side]; !dl.IsZero() && (wake.IsZero() || dl.Before(wake)) {
			wake = dl
		}
		var t *time.Timer
		if !wake.IsZero() {
			t = time.AfterFunc(time.Until(wake), func() {
				p.mu.Lock()
				q.ready.Broadcast()
				p.mu.Unlock()
			})
		}
		q.ready.Wait()
		if t != nil {
			t.Stop()
		}
	}
}

// Write queues b for the other side; on a cut link it is lost.
func (c *Conn) Write(b []byte) (int, error) {
	p := c.p
	cut, delay := p.n.linkState(p.hosts)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.broken {
		return 0, &net.OpError{Op: "write", Net: "mem", Addr: c.remote, Err: syscall.EPIPE}
	}
	if dl := p.writeDL[c.side]; !dl.IsZero() && !time.Now().Before(dl) {
		return 0, &net.OpError{Op: "write", Net: "mem", Addr: c.remote, Err: errTimeout}
	}
	q := &p.q[1-c.side]
	if q.closedW {
		return 0, &net.OpError{Op: "write", Net: "mem", Addr: c.remote, Err: net.ErrClosed}
	}
	if cut {
		return len(b), nil
	}
	q.chunks = append(q.chunks, chunk{b: append([]byte(nil), b...), at: time.Now().Add(delay)})
	q.ready.Broadcast()
	return len(b), nil
}

// Close closes this end: the other side reads what was written, then
// EOF, and its writes fail; this side's reads and writes fail.
func (c *Conn) Close() error {
	p := c.p
	p.mu.Lock()
	for i := range p.q {
		p.q[i].closedW = true
		p.q[i].ready.Broadcast()
	}
	p.q[c.side].chunks = nil
	p.mu.Unlock()
	p.n.mu.Lock()
	delete(p.n.conns, p)
	p.n.mu.Unlock()
	return nil
}

func (c *Conn) LocalAddr() net.Addr  { return c.local }
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

func (c *Conn) SetDeadline(t time.Time) error {
	c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

func (c *Conn) SetReadDeadline(t time.Time) error {
	p := c.p
	p.mu.Lock()
	defer p.mu.Unlock()
	p.readDL[c.side] = t
	p.q[c.side].ready.Broadcast() // a waiting Read re-checks
	return nil
}

func (c *Conn) SetWriteDeadline(t time.Time) error {
	p := c.p
	p.mu.Lock()
	defer p.mu.Unlock()
	p.writeDL[c.side] = t
	return nil
}
