package auth

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Listener accepts connections that pass the handshake with a key of
// this cluster holding a capability (a raft port: the manager's, an
// island server's). Handshakes run on their own goroutines, so a peer
// that stalls one cannot hold up the others; refused connections are
// counted and logged at a bounded rate. A nil key admits every
// connection without a handshake (in-process tests).
type Listener struct {
	ln       net.Listener
	verifier *Verifier
	need     Caps
	what     string
	log      *slog.Logger
	refused  *Refusals
	conns    chan net.Conn
	done     chan struct{}
	once     sync.Once
	wg       sync.WaitGroup
	// handshakes bounds connections that have not proven a key yet, per
	// source and in all; admitted ones are bounded by their user (raft's
	// pool of a few connections per peer).
	handshakes Gate
	// warned is when an accept failure was last logged (acceptLoop only).
	warned time.Time
}

// Listen listens on addr. Connections whose key lacks need are refused
// (what names the port in logs and refusals).
func Listen(addr string, key *Key, need Caps, what string, log *slog.Logger, refused *Refusals) (*Listener, error) {
	l := &Listener{need: need, what: what, log: log, refused: refused, conns: make(chan net.Conn), done: make(chan struct{}),
		handshakes: Gate{Max: DefaultMaxHandshakes, PerSource: DefaultMaxHandshakesPerSource}}
	if l.refused == nil {
		l.refused = &Refusals{}
	}
	if key != nil {
		v, err := NewVerifier(key)
		if err != nil {
			return nil, err
		}
		l.verifier = v
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	l.ln = ln
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	var bo time.Duration
	for {
		c, err := l.ln.Accept()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			// EMFILE and friends: back off instead of spinning or stopping.
			bo = min(max(2*bo, 5*time.Millisecond), time.Second)
			if time.Since(l.warned) >= time.Second {
				l.warned = time.Now()
				l.log.Warn(l.what+": accept failed; retrying", "err", err, "retry_in", bo)
			}
			select {
			case <-l.done:
				return
			case <-time.After(bo):
			}
			continue
		}
		bo = 0
		src := Source(c)
		if l.verifier != nil && !l.handshakes.Enter(src) {
			l.refused.Add(l.log, l.what+": refused connection", c.RemoteAddr().String(), errTooManyHandshakes)
			c.Close()
			continue
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			if l.verifier != nil {
				sc, p, err := l.verifier.Server(c, DefaultTimeout)
				l.handshakes.Leave(src)
				if err == nil {
					err = p.Allow(l.need, l.what)
				}
				if err != nil {
					l.refused.Add(l.log, l.what+": refused connection", c.RemoteAddr().String(), err)
					c.Close()
					return
				}
				c = sc
			}
			select {
			case l.conns <- c:
			case <-l.done:
				c.Close()
			}
		}()
	}
}

var errTooManyHandshakes = errors.New("too many connections in the handshake from this address or in all")

// Accept returns the next admitted connection.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting and joins the handshakes in progress.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		err = l.ln.Close()
	})
	l.wg.Wait()
	return err
}

// Addr is the listening address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Refused counts the connections refused.
func (l *Listener) Refused() uint64 { return l.refused.Count() }

// Dial connects to addr and, with a key, authenticates with it.
func Dial(addr string, key *Key, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	if key != nil {
		sc, err := Client(c, key, max(timeout, DefaultTimeout))
		if err != nil {
			c.Close()
			return nil, err
		}
		return sc, nil
	}
	return c, nil
}
