package wire

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/lockcheck"
)

// ErrConnClosed is returned for calls on, or pending on, a broken connection.
var ErrConnClosed = errors.New("wire: connection closed")

// RemoteError is an error response from the peer.
type RemoteError struct {
	Op      uint16
	Status  uint32
	Message string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("remote op %d: status %d: %s", e.Op, e.Status, e.Message)
}

// Reply is a successful response. Payload aliases the dst buffer passed to
// Call when it was large enough, else a new slice.
type Reply struct {
	Epoch   uint64
	Msg     []byte
	Payload []byte
}

// ClientConfig configures a client connection.
type ClientConfig struct {
	Limits Limits
	// IOTimeout bounds writing one request and reading one response body.
	// Default 30s.
	IOTimeout time.Duration
	// Key, when set, authenticates the connection (auth's handshake)
	// before the first request. Servers of a cluster refuse connections
	// without one.
	Key *auth.Key
	// PlainOK, with Key, offers to go on unsealed if the server allows it
	// (auth.ClientWith): the data path's connections to storage servers.
	PlainOK bool
	// PeerTimeout is how long the server's host may stay silent before the
	// connection is given up (default DefaultPeerTimeout; negative: the
	// kernel's defaults): a dial gets no answer (a third of it), data sent stays
	// unacknowledged (TCP_USER_TIMEOUT), or keepalive probes sent while a
	// call waits go unanswered. A partitioned or vanished host then fails
	// its calls with ErrConnClosed instead of hanging them for the many
	// minutes TCP retransmits. A server that is merely slow (or stopped:
	// its kernel still acknowledges) is not affected.
	PeerTimeout time.Duration
	// Dial, when set, connects instead of TCP (memnet in in-process
	// tests); PeerTimeout's socket options do not apply then.
	Dial DialFunc
}

// DialFunc connects to addr (ClientConfig.Dial).
type DialFunc func(ctx context.Context, addr string) (net.Conn, error)

// DefaultPeerTimeout is ClientConfig.PeerTimeout's default.
const DefaultPeerTimeout = 15 * time.Second

type call struct {
	op      uint16
	dst     []byte
	reply   Reply
	err     error
	done    chan struct{}
	claimed bool // the reader owns dst; guarded by Client.mu
}

// Client is one multiplexed connection to a server. Calls are safe for
// concurrent use. A Client whose connection broke stays broken: Err reports
// it and a Pool replaces it.
type Client struct {
	conn net.Conn
	cfg  ClientConfig

	w *frameWriter

	mu struct {
		lockcheck.Mutex
		nextID  uint64
		pending map[uint64]*call
		err     error
	}
	// lastCall is when the last call was sent, Unix ns (Pool retires
	// connections idle for PoolIdle).
	lastCall   atomic.Int64
	readerDone chan struct{}
}

// idleLongerThan reports whether c has sent no call for d and has none in
// flight. Only a connection quiet for d takes c.mu, so a Pool's Get on a
// busy connection costs no lock.
func (c *Client) idleLongerThan(now time.Time, d time.Duration) bool {
	if now.UnixNano()-c.lastCall.Load() < int64(d) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.mu.pending) == 0
}

// Dial connects to addr.
func Dial(ctx context.Context, addr string, cfg ClientConfig) (*Client, error) {
	var c net.Conn
	var err error
	if cfg.Dial != nil {
		c, err = cfg.Dial(ctx, addr)
	} else {
		c, err = peerDialer(cfg.PeerTimeout).DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("wire: dial %s: %w", addr, err)
	}
	if cfg.Key != nil {
		timeout := auth.DefaultTimeout
		if dl, ok := ctx.Deadline(); ok {
			timeout = min(timeout, max(time.Until(dl), time.Millisecond))
		}
		sc, err := auth.ClientWith(c, cfg.Key, timeout, cfg.PlainOK)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("wire: %s: %w", addr, err)
		}
		c = sc
	}
	return NewClient(c, cfg), nil
}

// peerDialer dials with timeout as ClientConfig.PeerTimeout says: a
// third of it for the dial (an answer to a SYN takes milliseconds; the
// kernel's retries would take two minutes), then keepalive probes from a
// third of it on (every sixth) and TCP_USER_TIMEOUT, so a silent host is
// noticed in about the timeout and a third while a call waits, and in
// about the timeout when data was sent.
func peerDialer(timeout time.Duration) *net.Dialer {
	if timeout == 0 {
		timeout = DefaultPeerTimeout
	}
	if timeout < 0 {
		return &net.Dialer{}
	}
	ms := int(timeout / time.Millisecond)
	return &net.Dialer{
		Timeout: timeout / 3,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: timeout / 3, Interval: timeout / 6, Count: 6,
		},
		ControlContext: func(_ context.Context, _, _ string, rc syscall.RawConn) error {
			return setUserTimeout(rc, ms)
		},
	}
}

// NewClient wraps an established connection and starts its reader.
func NewClient(c net.Conn, cfg ClientConfig) *Client {
	cfg.Limits = cfg.Limits.withDefaults()
	if cfg.IOTimeout == 0 {
		cfg.IOTimeout = 30 * time.Second
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	cl := &Client{conn: c, cfg: cfg, w: newFrameWriter(c, cfg.IOTimeout), readerDone: make(chan struct{})}
	cl.mu.pending = make(map[uint64]*call)
	cl.lastCall.Store(time.Now().UnixNano())
	go cl.readLoop()
	return cl
}

// Err returns the error that broke the connection, or nil.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.err
}

// Close closes the connection, fails pending calls and joins the reader.
func (c *Client) Close() error {
	c.fail(ErrConnClosed)
	err := c.conn.Close()
	<-c.readerDone
	return err
}

func (c *Client) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.err == nil {
		c.mu.err = err
	}
	for id, cl := range c.mu.pending {
		if !cl.claimed {
			delete(c.mu.pending, id)
			cl.err = c.mu.err
			close(cl.done)
		}
	}
}

// Call sends a request with msg and payload and waits for the response.
// When dst is large enough the response payload is read straight into it.
// An error response is returned as *RemoteError.
func (c *Client) Call(ctx context.Context, op uint16, epoch uint64, msg, payload, dst []byte) (Reply, error) {
	return c.CallV(ctx, op, epoch, msg, [][]byte{payload}, dst)
}

// CallV is Call with a payload gathered from several slices, written with
// one vectored write and no copy.
func (c *Client) CallV(ctx context.Context, op uint16, epoch uint64, msg []byte, payload [][]byte, dst []byte) (Reply, error) {
	return c.callRoute(ctx, 0, ReqID{}, op, epoch, msg, payload, dst)
}

// CallRoute is Call for route (Request.Route) inside the server, with
// request id id (zero: none; see ReqID).
func (c *Client) CallRoute(ctx context.Context, route uint32, id ReqID, op uint16, epoch uint64, msg, payload, dst []byte) (Reply, error) {
	return c.callRoute(ctx, route, id, op, epoch, msg, [][]byte{payload}, dst)
}

func (c *Client) callRoute(ctx context.Context, route uint32, reqID ReqID, op uint16, epoch uint64, msg []byte, payload [][]byte, dst []byte) (Reply, error) {
	var flags uint16
	if reqID != (ReqID{}) {
		flags = FlagReqID
		msg = append(append(make([]byte, 0, len(reqID)+len(msg)), reqID[:]...), msg...)
	}
	plen := 0
	for _, p := range payload {
		plen += len(p)
	}
	if uint32(len(msg)) > c.cfg.Limits.MaxMsg || uint64(plen) > uint64(c.cfg.Limits.MaxPayload) {
		return Reply{}, fmt.Errorf("wire: op %d: %w", op, ErrTooLarge)
	}
	cl := &call{op: op, dst: dst, done: make(chan struct{})}
	c.mu.Lock()
	if c.mu.err != nil {
		err := c.mu.err
		c.mu.Unlock()
		return Reply{}, err
	}
	c.mu.nextID++
	id := c.mu.nextID
	c.mu.pending[id] = cl
	c.mu.Unlock()
	c.lastCall.Store(time.Now().UnixNano())

	if err := c.write(ctx, &Header{Kind: KindRequest, Op: op, Flags: flags, ID: id, Epoch: epoch, Status: route, PayloadLen: uint32(plen)}, msg, payload); err != nil {
		c.fail(fmt.Errorf("%w: write: %v", ErrConnClosed, err))
		c.conn.Close()
		<-cl.done
		return Reply{}, cl.err
	}
	select {
	case <-cl.done:
		return cl.reply, cl.err
	case <-ctx.Done():
		c.mu.Lock()
		if !cl.claimed {
			delete(c.mu.pending, id)
			c.mu.Unlock()
			return Reply{}, fmt.Errorf("wire: op %d: %w", op, ctx.Err())
		}
		c.mu.Unlock()
		// The reader is filling dst; wait so the caller may reuse it.
		<-cl.done
		return cl.reply, cl.err
	}
}

func (c *Client) write(ctx context.Context, h *Header, msg []byte, payload [][]byte) error {
	dl, _ := ctx.Deadline()
	return c.w.write(h, msg, payload, dl)
}

func (c *Client) readLoop() {
	defer close(c.readerDone)
	var hdr [HeaderSize]byte
	br := bufio.NewReaderSize(c.conn, 64<<10)
	for {
		_ = c.conn.SetReadDeadline(time.Time{})
		h, msg, err := ReadFrameHeader(br, hdr[:], nil, c.cfg.Limits)
		if err == nil && h.Kind != KindResponse {
			err = fmt.Errorf("%w: request frame sent to client", ErrBadFrame)
		}
		if err != nil {
			c.fail(fmt.Errorf("%w: %v", ErrConnClosed, err))
			c.conn.Close()
			return
		}
		c.mu.Lock()
		cl := c.mu.pending[h.ID]
		if cl != nil {
			cl.claimed = true
		}
		c.mu.Unlock()
		var payload []byte
		if h.PayloadLen > 0 {
			_ = c.conn.SetReadDeadline(time.Now().Add(c.cfg.IOTimeout))
			switch {
			case cl == nil:
				_, err = io.CopyN(io.Discard, br, int64(h.PayloadLen))
			case cap(cl.dst) >= int(h.PayloadLen):
				payload = cl.dst[:h.PayloadLen]
				_, err = io.ReadFull(br, payload)
			default:
				payload = make([]byte, h.PayloadLen)
				_, err = io.ReadFull(br, payload)
			}
		}
		if cl != nil {
			c.mu.Lock()
			delete(c.mu.pending, h.ID)
			c.mu.Unlock()
			switch {
			case err != nil:
				cl.err = fmt.Errorf("%w: reading payload: %v", ErrConnClosed, noEOF(err))
			case h.Status != 0:
				cl.err = &RemoteError{Op: cl.op, Status: h.Status, Message: string(msg)}
			default:
				cl.reply = Reply{Epoch: h.Epoch, Msg: msg, Payload: payload}
			}
			close(cl.done)
		}
		if err != nil {
			c.fail(fmt.Errorf("%w: %v", ErrConnClosed, noEOF(err)))
			c.conn.Close()
			return
		}
	}
}

// Pool keeps a few multiplexed connections per server address, redialing
// broken ones.
type Pool struct {
	cfg     ClientConfig
	perAddr int
	mu      struct {
		lockcheck.Mutex
		conns  map[string][]*Client
		next   map[string]int
		closed bool
	}
}

// NewPool returns a pool keeping up to perAddr connections per address
// (default 2: one connection's reader is one goroutine, and two let both
// cores copy bytes).
func NewPool(cfg ClientConfig, perAddr int) *Pool {
	if perAddr <= 0 {
		perAddr = 2
	}
	p := &Pool{cfg: cfg, perAddr: perAddr}
	p.mu.conns = make(map[string][]*Client)
	p.mu.next = make(map[string]int)
	return p
}

// Get returns a healthy connection to addr, dialing if needed.
func (p *Pool) Get(ctx context.Context, addr string) (*Client, error) {
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return nil, ErrConnClosed
	}
	conns := p.mu.conns[addr]
	// Drop broken connections, and retire idle ones before the server's
	// idle timeout can close them under a call.
	live := conns[:0]
	var dead []*Client
	now := time.Now()
	for _, c := range conns {
		if c.Err() == nil && !c.idleLongerThan(now, PoolIdle) {
			live = append(live, c)
		} else {
			dead = append(dead, c)
		}
	}
	p.mu.conns[addr] = live
	if len(live) >= p.perAddr {
		i := p.mu.next[addr] % len(live)
		p.mu.next[addr]++
		c := live[i]
		p.mu.Unlock()
		closeAll(dead)
		return c, nil
	}
	p.mu.Unlock()
	closeAll(dead)

	c, err := Dial(ctx, addr, p.cfg)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.closed {
		go c.Close()
		return nil, ErrConnClosed
	}
	p.mu.conns[addr] = append(p.mu.conns[addr], c)
	return c, nil
}

// PoolIdle is how long a Pool keeps a connection that carried no call:
// half the servers' DefaultIdleTimeout, so a pool closes its idle
// connections before a server would (a server closing one as a call is
// sent would fail that call).
var PoolIdle = DefaultIdleTimeout / 2

func closeAll(cs []*Client) {
	for _, c := range cs {
		c.Close()
	}
}

// Call is Get followed by Client.Call.
func (p *Pool) Call(ctx context.Context, addr string, op uint16, epoch uint64, msg, payload, dst []byte) (Reply, error) {
	return p.CallV(ctx, addr, op, epoch, msg, [][]byte{payload}, dst)
}

// CallV is Get followed by Client.CallV.
func (p *Pool) CallV(ctx context.Context, addr string, op uint16, epoch uint64, msg []byte, payload [][]byte, dst []byte) (Reply, error) {
	c, err := p.Get(ctx, addr)
	if err != nil {
		return Reply{}, err
	}
	return c.CallV(ctx, op, epoch, msg, payload, dst)
}

// CallRoute is Get followed by Client.CallRoute.
func (p *Pool) CallRoute(ctx context.Context, addr string, route uint32, id ReqID, op uint16, epoch uint64, msg, payload, dst []byte) (Reply, error) {
	c, err := p.Get(ctx, addr)
	if err != nil {
		return Reply{}, err
	}
	return c.CallRoute(ctx, route, id, op, epoch, msg, payload, dst)
}

// Forget closes and drops the connections to addr (after a server restart,
// say).
func (p *Pool) Forget(addr string) {
	p.mu.Lock()
	conns := p.mu.conns[addr]
	delete(p.mu.conns, addr)
	p.mu.Unlock()
	closeAll(conns)
}

// Close closes every connection.
func (p *Pool) Close() {
	p.mu.Lock()
	p.mu.closed = true
	all := p.mu.conns
	p.mu.conns = map[string][]*Client{}
	p.mu.Unlock()
	for _, cs := range all {
		closeAll(cs)
	}
}
