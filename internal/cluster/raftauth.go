package cluster

import (
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/atoll-fs/atoll/internal/auth"
)

// authStream is the raft transport's stream layer when the manager has a
// key: every raft connection, both ways, runs auth's handshake first and
// the accepting side admits only cluster members. Handshakes run on their
// own goroutines, so a peer that stalls one cannot hold up the others.
type authStream struct {
	ln       net.Listener
	key      *auth.Key
	verifier *auth.Verifier
	log      *slog.Logger
	conns    chan net.Conn
	done     chan struct{}
	once     sync.Once
	wg       sync.WaitGroup
	refused  *auth.Refusals
}

func newAuthStream(addr string, key *auth.Key, log *slog.Logger, refused *auth.Refusals) (*authStream, error) {
	v, err := auth.NewVerifier(key)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &authStream{ln: ln, key: key, verifier: v, log: log, conns: make(chan net.Conn), done: make(chan struct{}), refused: refused}
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

func (s *authStream) acceptLoop() {
	defer s.wg.Done()
	var bo time.Duration
	for {
		c, err := s.ln.Accept()
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			// EMFILE and friends: back off instead of spinning or stopping.
			bo = min(max(2*bo, 5*time.Millisecond), time.Second)
			s.log.Warn("manager: raft accept failed; retrying", "err", err, "retry_in", bo)
			select {
			case <-s.done:
				return
			case <-time.After(bo):
			}
			continue
		}
		bo = 0
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			p, err := s.verifier.Server(c, auth.DefaultTimeout)
			if err == nil {
				err = p.Allow(auth.CapMember, "raft")
			}
			if err != nil {
				s.refused.Add(s.log, "manager: refused raft connection", c.RemoteAddr().String(), err)
				c.Close()
				return
			}
			select {
			case s.conns <- c:
			case <-s.done:
				c.Close()
			}
		}()
	}
}

// Accept returns the next authenticated connection.
func (s *authStream) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting and joins the handshakes in progress.
func (s *authStream) Close() error {
	var err error
	s.once.Do(func() {
		close(s.done)
		err = s.ln.Close()
	})
	s.wg.Wait()
	return err
}

func (s *authStream) Addr() net.Addr { return s.ln.Addr() }

// Dial connects to a raft peer and authenticates with the cluster key.
func (s *authStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", string(address), timeout)
	if err != nil {
		return nil, err
	}
	if err := auth.Client(c, s.key, max(timeout, auth.DefaultTimeout)); err != nil {
		c.Close()
		return nil, fmt.Errorf("raft peer %s: %w", address, err)
	}
	return c, nil
}
