package replica

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/lockcheck"
)

// Mux is one island server's raft port, shared by the replica groups it
// hosts. Every connection, both ways, runs auth's handshake first (when
// the Mux has a key) and the accepting side admits only cluster members
// (auth.Listener); the dialler then names the group (4 bytes, big-endian
// island id) and the connection goes to that group's raft transport. A
// connection for a group this server does not host is closed.
type Mux struct {
	ln   *auth.Listener
	key  *auth.Key
	log  *slog.Logger
	done chan struct{}
	once sync.Once
	wg   sync.WaitGroup

	mu struct {
		lockcheck.Mutex
		groups map[uint32]*muxLayer
		probe  func(island uint32) (Probe, bool)
	}
}

// Probe is what a server says of its replica of an island when asked
// over the raft port (ProbeReplica): a leader moving replicas asks a new
// one how far it has caught up, and a server whose replica the placement
// dropped asks the leader whether the group still counts it.
type Probe struct {
	Leader  bool
	Applied uint64
	Members []Member // the replica's raft configuration (addresses omitted)
	// Ready: the server could serve the island if it led it (it has the
	// formatted cluster map). A leader hands its island to a preferred
	// server only when it is ready. Servers that predate the field send
	// none and are taken as ready.
	Ready bool
}

// probeGroup is the group id a probe connection names (islands are
// numbered from 1).
const probeGroup = 0

// SetProbe installs the function answering probes (nil: none answered).
func (m *Mux) SetProbe(f func(island uint32) (Probe, bool)) {
	m.mu.Lock()
	m.mu.probe = f
	m.mu.Unlock()
}

// answerProbe reads the island a probe asks about and answers: u8 found,
// u8 leader, u64 applied, u8 n, n × (u32 server, u8 voter), u8 ready.
func (m *Mux) answerProbe(c net.Conn) {
	defer c.Close()
	var q [4]byte
	_ = c.SetDeadline(time.Now().Add(muxHello))
	if _, err := io.ReadFull(c, q[:]); err != nil {
		return
	}
	m.mu.Lock()
	f := m.mu.probe
	m.mu.Unlock()
	var p Probe
	found := false
	if f != nil {
		p, found = f(binary.BigEndian.Uint32(q[:]))
	}
	b := []byte{0, 0}
	if found {
		b[0] = 1
	}
	if p.Leader {
		b[1] = 1
	}
	b = binary.BigEndian.AppendUint64(b, p.Applied)
	n := min(len(p.Members), 255)
	b = append(b, byte(n))
	for _, mb := range p.Members[:n] {
		b = binary.BigEndian.AppendUint32(b, mb.ID)
		v := byte(0)
		if mb.Voter {
			v = 1
		}
		b = append(b, v)
	}
	b = append(b, 0)
	if p.Ready {
		b[len(b)-1] = 1
	}
	_, _ = c.Write(b)
}

// ProbeReplica asks the island server at raft address addr about its
// replica of island. ok is false when it hosts none.
func ProbeReplica(addr string, key *auth.Key, island uint32, timeout time.Duration) (p Probe, ok bool, err error) {
	c, err := auth.Dial(addr, key, timeout)
	if err != nil {
		return Probe{}, false, fmt.Errorf("replica: probing island %d at %s: %w", island, addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	var q [8]byte
	binary.BigEndian.PutUint32(q[:4], probeGroup)
	binary.BigEndian.PutUint32(q[4:], island)
	if _, err := c.Write(q[:]); err != nil {
		return Probe{}, false, fmt.Errorf("replica: probing island %d at %s: %w", island, addr, err)
	}
	var h [11]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return Probe{}, false, fmt.Errorf("replica: probing island %d at %s: %w", island, addr, err)
	}
	p = Probe{Leader: h[1] == 1, Applied: binary.BigEndian.Uint64(h[2:10])}
	body := make([]byte, 5*int(h[10]))
	if _, err := io.ReadFull(c, body); err != nil {
		return Probe{}, false, fmt.Errorf("replica: probing island %d at %s: %w", island, addr, err)
	}
	for k := 0; k < len(body); k += 5 {
		p.Members = append(p.Members, Member{ID: binary.BigEndian.Uint32(body[k:]), Voter: body[k+4] == 1})
	}
	// The ready byte came later: an older server closes the connection
	// after the members.
	var ready [1]byte
	switch _, err := io.ReadFull(c, ready[:]); {
	case err == io.EOF:
		p.Ready = true
	case err != nil:
		return Probe{}, false, fmt.Errorf("replica: probing island %d at %s: %w", island, addr, err)
	default:
		p.Ready = ready[0] == 1
	}
	return p, h[0] == 1, nil
}

// muxHello bounds how long an accepted connection may take to name its
// group after the handshake.
const muxHello = 10 * time.Second

// NewMux listens on addr. key nil: no authentication (in-process tests).
func NewMux(addr string, key *auth.Key, log *slog.Logger, refused *auth.Refusals) (*Mux, error) {
	ln, err := auth.Listen(addr, key, auth.CapMember, "island raft", log, refused)
	if err != nil {
		return nil, err
	}
	m := &Mux{ln: ln, key: key, log: log, done: make(chan struct{})}
	m.mu.groups = map[uint32]*muxLayer{}
	m.wg.Add(1)
	go m.acceptLoop()
	return m, nil
}

// Addr is the raft address (the listener's).
func (m *Mux) Addr() string { return m.ln.Addr().String() }

// Refused counts connections refused for want of a cluster key.
func (m *Mux) Refused() uint64 { return m.ln.Refused() }

// Close stops accepting, closes every group's layer and joins the
// connections being admitted.
func (m *Mux) Close() error {
	var err error
	m.once.Do(func() {
		close(m.done)
		err = m.ln.Close()
	})
	m.wg.Wait()
	return err
}

func (m *Mux) acceptLoop() {
	defer m.wg.Done()
	for {
		c, err := m.ln.Accept()
		if err != nil {
			return // closed
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.admit(c)
		}()
	}
}

// admit reads an authenticated connection's group and hands it over.
func (m *Mux) admit(c net.Conn) {
	var hello [4]byte
	_ = c.SetReadDeadline(time.Now().Add(muxHello))
	if _, err := io.ReadFull(c, hello[:]); err != nil {
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	group := binary.BigEndian.Uint32(hello[:])
	if group == probeGroup {
		m.answerProbe(c)
		return
	}
	m.mu.Lock()
	l := m.mu.groups[group]
	m.mu.Unlock()
	if l == nil {
		m.log.Debug("replica: raft connection for a group not hosted here", "island", group, "from", c.RemoteAddr())
		c.Close()
		return
	}
	select {
	case l.conns <- c:
	case <-l.done:
		c.Close()
	case <-m.done:
		c.Close()
	}
}

// Layer returns the raft stream layer of group (one per group; a second
// call for a group still open fails).
func (m *Mux) Layer(group uint32) (raft.StreamLayer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.groups[group] != nil {
		return nil, fmt.Errorf("replica: island %d already has a raft layer", group)
	}
	l := &muxLayer{m: m, group: group, conns: make(chan net.Conn), done: make(chan struct{})}
	m.mu.groups[group] = l
	return l, nil
}

// muxLayer is one group's raft.StreamLayer over the Mux.
type muxLayer struct {
	m     *Mux
	group uint32
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *muxLayer) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-l.m.done:
		return nil, net.ErrClosed
	}
}

// Close detaches the group: its connections are refused from now on.
func (l *muxLayer) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.m.mu.Lock()
		if l.m.mu.groups[l.group] == l {
			delete(l.m.mu.groups, l.group)
		}
		l.m.mu.Unlock()
	})
	return nil
}

func (l *muxLayer) Addr() net.Addr { return l.m.ln.Addr() }

// Dial connects to the Mux at address, authenticates and names the group.
func (l *muxLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := auth.Dial(string(address), l.m.key, timeout)
	if err != nil {
		return nil, fmt.Errorf("raft peer %s: %w", address, err)
	}
	var hello [4]byte
	binary.BigEndian.PutUint32(hello[:], l.group)
	_ = c.SetWriteDeadline(time.Now().Add(max(timeout, time.Second)))
	if _, err := c.Write(hello[:]); err != nil {
		c.Close()
		return nil, fmt.Errorf("raft peer %s: %w", address, err)
	}
	_ = c.SetWriteDeadline(time.Time{})
	return c, nil
}
