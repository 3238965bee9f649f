package wire

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/lockcheck"
)

// Request is one decoded request. Msg and Payload are valid only until the
// handler returns.
type Request struct {
	Op uint16
	// Route names what the request is for inside a server that hosts
	// several (a replicated island server: the island), 0 for the
	// server's only one. Carried in the header's status field.
	Route uint32
	// ReqID is the request's id across retries (zero: none; FlagReqID).
	ReqID      ReqID
	Epoch      uint64
	Msg        []byte
	Payload    []byte
	RemoteAddr string
	// Peer is the connection's authenticated key (Unauthenticated
	// without ServerConfig.Auth).
	Peer auth.Peer
}

// Response is a handler's answer. Release, when set, is called once the
// response has been written (or dropped), so pooled payloads can be reused.
type Response struct {
	Msg     []byte
	Payload []byte
	Release func()
}

// Handler serves one request. A non-nil error becomes an error response
// whose status is ServerConfig.ErrorCode(err) and whose message is the
// error text.
type Handler func(ctx context.Context, req *Request) (Response, error)

// ServerConfig configures a Server.
type ServerConfig struct {
	Handler Handler
	Limits  Limits
	// MaxInflightBytes bounds the payload bytes buffered for requests being
	// served, across all connections; reading stops while it is reached
	// (back-pressure instead of unbounded memory). Default 96 MiB.
	MaxInflightBytes int64
	// MaxConcurrentPerConn bounds handlers running per connection. Default 32.
	MaxConcurrentPerConn int
	// ErrorCode maps a handler error to a nonzero status. Default: 1.
	ErrorCode func(error) uint32
	// IOTimeout bounds writing one response and reading one frame body.
	// Default 30s.
	IOTimeout time.Duration
	// IdleTimeout closes a connection that has had no request in flight
	// and sent nothing for this long, so that forgotten or hostile
	// connections do not hold a server's slots for ever. Default
	// DefaultIdleTimeout; negative: never. Pools retire their own idle
	// connections sooner (PoolIdle), so a live client does not race a
	// server closing under it.
	IdleTimeout time.Duration
	Logger      *slog.Logger
	// Inline, if set, names the operations served on the connection's
	// reader goroutine itself, without a handoff to a worker: only ones
	// that answer in microseconds and never wait long, since the
	// connection reads nothing else meanwhile. A handoff costs a thread
	// wakeup, which was a large part of a lone lookup's CPU.
	Inline func(op uint16) bool
	// MaxConns bounds the connections served at once, and MaxConnsPerPeer
	// those from one address; beyond them a new connection is closed at
	// once and counted as refused. Defaults 8192 and 1024: far above what
	// the clients' pools open, far below what exhausts a process.
	MaxConns, MaxConnsPerPeer int
	// Auth, when set, authenticates every connection (auth's handshake)
	// before anything else is read from it; a connection that fails is
	// closed with a logged reason and counted (Refused). Every serving
	// role started by the atoll command sets it. Without it every
	// connection's Peer is Unauthenticated, which has every capability:
	// only for in-process tests of a component.
	Auth *auth.Verifier
}

// Validate checks the configuration.
func (c *ServerConfig) Validate() error {
	if c.Handler == nil {
		return errors.New("wire: server config: nil Handler")
	}
	lim := c.Limits.withDefaults()
	if c.MaxInflightBytes != 0 && c.MaxInflightBytes < int64(lim.MaxPayload) {
		return fmt.Errorf("wire: server config: MaxInflightBytes %d below MaxPayload %d", c.MaxInflightBytes, lim.MaxPayload)
	}
	return nil
}

// Server serves framed requests on listeners.
type Server struct {
	cfg      ServerConfig
	inflight *semaphore.Weighted
	log      *slog.Logger

	mu struct {
		lockcheck.Mutex
		conns map[net.Conn]struct{}
	}
	// served bounds the connections served, per remote address
	// (MaxConnsPerPeer) and in all (MaxConns).
	served auth.Gate
	// handshakes bounds connections still proving their key, per source
	// and in all (far below MaxConns: anyone who reaches the port can
	// open them, and they must not crowd out clients with keys).
	handshakes auth.Gate
	wg         sync.WaitGroup
	refused    auth.Refusals
	// refusedAccept counts failed accepts (EMFILE and the like).
	refusedAccept atomic.Uint64
}

// refuse counts a refused connection and logs it (rate-limited), unless
// the server is shutting down.
func (s *Server) refuse(ctx context.Context, remote string, why error) {
	log := s.log
	if ctx.Err() != nil {
		log = nil
	}
	s.refused.Add(log, "wire: refused connection", remote, why)
}

// Unauthenticated is the Peer of every connection to a server without
// ServerConfig.Auth.
var Unauthenticated = auth.Peer{Name: "unauthenticated", Caps: auth.AllCaps}

// Refused counts connections closed unserved: their handshake failed, or
// they were over MaxConns or MaxConnsPerPeer.
func (s *Server) Refused() uint64 { return s.refused.Count() }

// AcceptFailures counts accepts that failed (out of file descriptors and
// the like) and were retried.
func (s *Server) AcceptFailures() uint64 { return s.refusedAccept.Load() }

// NewServer returns a Server for cfg.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Limits = cfg.Limits.withDefaults()
	if cfg.MaxInflightBytes == 0 {
		cfg.MaxInflightBytes = 96 << 20
		if int64(cfg.Limits.MaxPayload) > cfg.MaxInflightBytes {
			cfg.MaxInflightBytes = int64(cfg.Limits.MaxPayload)
		}
	}
	if cfg.MaxConcurrentPerConn == 0 {
		cfg.MaxConcurrentPerConn = 32
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = 8192
	}
	if cfg.MaxConnsPerPeer == 0 {
		cfg.MaxConnsPerPeer = 1024
	}
	if cfg.ErrorCode == nil {
		cfg.ErrorCode = func(error) uint32 { return 1 }
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.IOTimeout == 0 {
		cfg.IOTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, inflight: semaphore.NewWeighted(cfg.MaxInflightBytes), log: cfg.Logger}
	s.mu.conns = make(map[net.Conn]struct{})
	s.served = auth.Gate{Max: cfg.MaxConns, PerSource: cfg.MaxConnsPerPeer}
	s.handshakes = auth.Gate{Max: auth.DefaultMaxHandshakes, PerSource: auth.DefaultMaxHandshakesPerSource}
	return s, nil
}

// Serve accepts connections on ln until ctx is done, then closes ln and
// every connection and waits for all handlers to return.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var err error
	var backoff time.Duration
	for {
		var c net.Conn
		c, err = ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				break
			}
			// Out of file descriptors (EMFILE, ENFILE), an aborted
			// handshake: keep serving the connections we have and try
			// again, instead of stopping the server.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.refusedAccept.Add(1)
			s.log.Warn("wire: accept failed; retrying", "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		peer := auth.Source(c)
		if s.cfg.Auth != nil && !s.handshakes.Enter(peer) {
			s.refuse(ctx, c.RemoteAddr().String(), fmt.Errorf("too many connections in the handshake (%d from this address at most, %d in all)", s.handshakes.PerSource, s.handshakes.Max))
			c.Close()
			continue
		}
		if !s.served.Enter(peer) {
			// Counted before the peer can see the close.
			s.refuse(ctx, c.RemoteAddr().String(), fmt.Errorf("too many connections (%d served, at most %d, %d from one address)", s.served.Len(), s.cfg.MaxConns, s.cfg.MaxConnsPerPeer))
			if s.cfg.Auth != nil {
				s.handshakes.Leave(peer)
			}
			c.Close()
			continue
		}
		s.mu.Lock()
		s.mu.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveConn(ctx, c)
		}()
	}
	s.mu.Lock()
	for c := range s.mu.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

type serverConn struct {
	s *Server
	w *frameWriter
}

func (s *Server) serveConn(ctx context.Context, c net.Conn) {
	ctx, cancel := context.WithCancel(ctx)
	var handlers sync.WaitGroup
	defer func() {
		cancel()
		c.Close()
		handlers.Wait()
		s.mu.Lock()
		delete(s.mu.conns, c)
		s.mu.Unlock()
		s.served.Leave(auth.Source(c))
	}()
	remote := c.RemoteAddr().String()
	peer := Unauthenticated
	rw := c // what frames travel on: c, or c in sealed records
	if s.cfg.Auth != nil {
		var err error
		rw, peer, err = s.cfg.Auth.Server(c, auth.DefaultTimeout)
		s.handshakes.Leave(auth.Source(c))
		if err != nil {
			s.refuse(ctx, remote, err)
			return
		}
	}
	sc := &serverConn{s: s, w: newFrameWriter(rw, s.cfg.IOTimeout)}
	// Requests go to a pool of worker goroutines that lives as long as the
	// connection: a fresh goroutine per request would grow (copy) its
	// stack on every deep handler call.
	type job struct {
		h       Header
		req     Request
		payload []byte
	}
	jobs := make(chan job)
	idle := 0 // workers waiting for a job; guarded by being touched only here and via idleCh
	idleCh := make(chan struct{}, s.cfg.MaxConcurrentPerConn)
	workers := 0
	// collectIdle counts the workers that finished a job since it last ran.
	collectIdle := func() {
		for {
			select {
			case <-idleCh:
				idle++
			default:
				return
			}
		}
	}
	worker := func() {
		defer handlers.Done()
		for j := range jobs {
			sc.handle(ctx, j.h, &j.req)
			if j.payload != nil {
				PutBuf(j.payload)
				s.inflight.Release(int64(j.h.PayloadLen))
			}
			idleCh <- struct{}{}
		}
	}
	defer close(jobs)
	var hdr [HeaderSize]byte
	var deadline time.Time                // the read deadline last set (zero: none)
	br := bufio.NewReaderSize(rw, 64<<10) // several small frames per read syscall
	inlineCtx := WithInlineForTest(ctx)   // one per connection, not per request
	for {
		// Idle between frames as long as the peer likes; once a frame
		// has begun, its header and message must arrive within
		// IOTimeout (a peer that sends half a header and stalls would
		// otherwise hold this goroutine forever). A frame already
		// buffered whole needs no deadline (the common case costs
		// nothing).
		if br.Buffered() < HeaderSize {
			var idleUntil time.Time
			if s.cfg.IdleTimeout > 0 {
				idleUntil = time.Now().Add(s.cfg.IdleTimeout)
			}
			_ = c.SetReadDeadline(idleUntil)
			if _, err := br.Peek(1); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() && br.Buffered() == 0 {
					collectIdle()
					if idle < workers {
						continue // requests still being served: not idle
					}
					s.log.Debug("wire: closing idle connection", "remote", remote, "idle", s.cfg.IdleTimeout)
					return
				}
				if !errors.Is(err, io.EOF) && ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
					s.log.Warn("wire: closing connection", "remote", remote, "reason", err)
				}
				return
			}
			deadline = time.Now().Add(s.cfg.IOTimeout)
			_ = c.SetReadDeadline(deadline)
		} else if !deadline.IsZero() && time.Until(deadline) < s.cfg.IOTimeout/2 {
			// A busy connection keeps a deadline it set frames ago:
			// push it out before it can cut a frame short.
			deadline = time.Now().Add(s.cfg.IOTimeout)
			_ = c.SetReadDeadline(deadline)
		}
		if s.cfg.Auth.Revoked(peer) {
			// Revoked since its handshake (the map's revocations): no
			// further request of this key is served.
			s.refuse(ctx, remote, fmt.Errorf("key %s generation %d was revoked", peer.Name, peer.Scope.Gen))
			return
		}
		h, msg, err := ReadFrameHeader(br, hdr[:], nil, s.cfg.Limits)
		if err != nil {
			if !errors.Is(err, io.EOF) && ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				s.log.Warn("wire: closing connection", "remote", remote, "reason", err)
			}
			return
		}
		if h.Kind != KindRequest {
			s.log.Warn("wire: closing connection", "remote", remote, "reason", "response frame sent to server")
			return
		}
		var reqID ReqID
		if h.Flags&FlagReqID != 0 {
			if len(msg) < len(reqID) {
				s.log.Warn("wire: closing connection", "remote", remote, "reason", "request id flag on a message shorter than an id")
				return
			}
			copy(reqID[:], msg)
			msg = msg[len(reqID):]
		}
		var payload []byte
		if h.PayloadLen > 0 {
			if err := s.inflight.Acquire(ctx, int64(h.PayloadLen)); err != nil {
				return
			}
			payload = GetBuf(int(h.PayloadLen))
			deadline = time.Now().Add(s.cfg.IOTimeout)
			_ = c.SetReadDeadline(deadline)
			if _, err := io.ReadFull(br, payload); err != nil {
				PutBuf(payload)
				s.inflight.Release(int64(h.PayloadLen))
				s.log.Warn("wire: closing connection", "remote", remote, "reason", fmt.Errorf("reading payload: %w", noEOF(err)))
				return
			}
		}
		// Inline only on a connection with nothing more to read yet: a
		// burst of requests goes to workers, which serve it in parallel.
		if s.cfg.Inline != nil && payload == nil && br.Buffered() == 0 && s.cfg.Inline(h.Op) {
			req := Request{Op: h.Op, Route: h.Status, ReqID: reqID, Epoch: h.Epoch, Msg: msg, RemoteAddr: remote, Peer: peer}
			resp, err := sc.call(inlineCtx, &req)
			if !errors.Is(err, ErrWouldBlock) {
				sc.reply(h, resp, err)
				continue
			}
			// It would wait: serve it on a worker like any other.
		}
		// Take an idle worker, start one while under the limit, or wait.
		collectIdle()
		if idle == 0 && workers < s.cfg.MaxConcurrentPerConn {
			workers++
			handlers.Add(1)
			go worker()
			idle++
		}
		if idle == 0 {
			select {
			case <-idleCh:
				idle++
			case <-ctx.Done():
				if payload != nil {
					PutBuf(payload)
					s.inflight.Release(int64(h.PayloadLen))
				}
				return
			}
		}
		idle--
		jobs <- job{h: h, req: Request{Op: h.Op, Route: h.Status, ReqID: reqID, Epoch: h.Epoch, Msg: msg, Payload: payload, RemoteAddr: remote, Peer: peer}, payload: payload}
	}
}

// DefaultIdleTimeout is ServerConfig.IdleTimeout's default.
const DefaultIdleTimeout = 10 * time.Minute

// ErrWouldBlock is what a handler returns for a request served inline
// (ServerConfig.Inline; see IsInline) that would have to wait: the server
// then serves the same request on a worker goroutine. Its response is
// never sent.
var ErrWouldBlock = errors.New("wire: would block")

type inlineKey struct{}

// IsInline reports whether ctx belongs to a request served on its
// connection's reader goroutine, which must not wait: a handler returns
// ErrWouldBlock instead.
func IsInline(ctx context.Context) bool {
	v, _ := ctx.Value(inlineKey{}).(bool)
	return v
}

// WithInlineForTest returns ctx marked as IsInline, as the server marks
// the requests it serves inline; tests of handlers use it.
func WithInlineForTest(ctx context.Context) context.Context {
	return context.WithValue(ctx, inlineKey{}, true)
}

func (sc *serverConn) handle(ctx context.Context, h Header, req *Request) {
	resp, err := sc.call(ctx, req)
	sc.reply(h, resp, err)
}

// reply sends the response to the request with header h.
func (sc *serverConn) reply(h Header, resp Response, err error) {
	out := Header{Kind: KindResponse, Op: h.Op, ID: h.ID}
	if err != nil {
		out.Status = sc.s.cfg.ErrorCode(err)
		if out.Status == 0 {
			out.Status = 1
		}
		resp = Response{Msg: []byte(truncate(err.Error(), 4096)), Release: resp.Release}
	}
	if resp.Release != nil {
		defer resp.Release()
	}
	out.PayloadLen = uint32(len(resp.Payload))
	// A write error closes the connection; the reader then ends it.
	_ = sc.w.write(&out, resp.Msg, [][]byte{resp.Payload}, time.Time{})
}

// call runs the handler, turning a panic into an error so that no request
// can kill the server.
func (sc *serverConn) call(ctx context.Context, req *Request) (resp Response, err error) {
	defer func() {
		if r := recover(); r != nil {
			sc.s.log.Error("wire: handler panic", "op", req.Op, "panic", r)
			err = fmt.Errorf("wire: internal error serving op %d", req.Op)
		}
	}()
	return sc.s.cfg.Handler(ctx, req)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
