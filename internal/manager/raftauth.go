package manager

import (
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/hashicorp/raft"

	"github.com/atoll-fs/atoll/internal/auth"
)

// authStream is the raft transport's stream layer when the manager has a
// key: every raft connection, both ways, runs auth's handshake first and
// the accepting side admits only cluster members (auth.Listener).
type authStream struct {
	*auth.Listener
	key *auth.Key
}

func newAuthStream(addr string, key *auth.Key, log *slog.Logger, refused *auth.Refusals) (*authStream, error) {
	ln, err := auth.Listen(addr, key, auth.CapMember, "manager raft", log, refused)
	if err != nil {
		return nil, err
	}
	return &authStream{Listener: ln, key: key}, nil
}

// Dial connects to a raft peer and authenticates with the cluster key.
func (s *authStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := auth.Dial(string(address), s.key, timeout)
	if err != nil {
		return nil, fmt.Errorf("raft peer %s: %w", address, err)
	}
	return c, nil
}
