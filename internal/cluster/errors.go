package cluster

import (
	"errors"
	"fmt"
	"strings"

	"github.com/atoll-fs/atoll/internal/auth"

	"github.com/atoll-fs/atoll/internal/wire"
)

// Status codes of the manager's error responses (the wire frame's status
// field), and the sentinels a client sees for them.
const (
	StatusInternal      uint32 = 1
	StatusBadRequest    uint32 = 2
	StatusNotLeader     uint32 = 3
	StatusStaleEpoch    uint32 = 4
	StatusNotFormatted  uint32 = 5
	StatusUnknownMember uint32 = 6
	StatusFormatted     uint32 = 7
	StatusUnavailable   uint32 = 8
	StatusForbidden     uint32 = 9
	StatusLimit         uint32 = 10
)

// Errors of the cluster protocol.
var (
	// ErrInternal is an unexpected manager failure.
	ErrInternal = errors.New("cluster manager internal error")
	// ErrBadRequest is a malformed or invalid request; it changed nothing.
	ErrBadRequest = errors.New("malformed cluster request")
	// ErrNotLeader is a write (or leader-only read) sent to a follower.
	// Errors matching it are *NotLeaderError, naming the leader if known;
	// Client follows them by itself.
	ErrNotLeader = errors.New("not the cluster leader")
	// ErrStaleEpoch means the sender's map is older than the server's (or,
	// from a manager, the manager's map is older than the requested
	// minimum epoch): refresh the map and retry.
	ErrStaleEpoch = errors.New("stale cluster map epoch")
	// ErrNeedRefresh is returned by CheckEpoch to a server whose map is
	// older than the sender's: fetch the newer map before serving.
	ErrNeedRefresh = errors.New("cluster map older than the request's epoch")
	// ErrNotFormatted means the namespace table does not exist yet.
	ErrNotFormatted = errors.New("cluster not formatted")
	// ErrFormatted refuses formatting a cluster twice.
	ErrFormatted = errors.New("cluster already formatted")
	// ErrUnknownMember names a member that never registered.
	ErrUnknownMember = errors.New("unknown cluster member")
	// ErrUnavailable means no manager could serve the request (none
	// reachable, no leader elected yet, or shutting down).
	ErrUnavailable = errors.New("cluster manager unavailable")
	// ErrLimit refuses a registration past a bound of the map (gateways
	// per key, gateways, the map's size) or over another key's entry.
	ErrLimit = errors.New("cluster map limit")
)

// statusTable maps sentinels to status codes: the one place both
// directions are defined.
var statusTable = []struct {
	err    error
	status uint32
}{
	{ErrBadRequest, StatusBadRequest},
	{ErrNotLeader, StatusNotLeader},
	{ErrStaleEpoch, StatusStaleEpoch},
	{ErrNotFormatted, StatusNotFormatted},
	{ErrUnknownMember, StatusUnknownMember},
	{ErrFormatted, StatusFormatted},
	{ErrUnavailable, StatusUnavailable},
	{ErrLimit, StatusLimit},
	{auth.ErrForbidden, StatusForbidden},
	{ErrInternal, StatusInternal},
}

// StatusOf maps a handler error to its status code.
func StatusOf(err error) uint32 {
	for _, e := range statusTable {
		if errors.Is(err, e.err) {
			return e.status
		}
	}
	if errors.Is(err, wire.ErrMalformed) {
		return StatusBadRequest
	}
	return StatusInternal
}

func sentinelOf(status uint32) error {
	for _, e := range statusTable {
		if e.status == status {
			return e.err
		}
	}
	return ErrInternal
}

// StatusError carries a manager's error text and the sentinel it maps to.
type StatusError struct {
	Sentinel error
	Message  string
}

func (e *StatusError) Error() string { return e.Message }
func (e *StatusError) Unwrap() error { return e.Sentinel }

// NotLeaderError is the answer of a follower to a leader-only request.
// Leader is the leader's client address, empty when no leader is known.
type NotLeaderError struct{ Leader string }

const leaderMarker = "; leader="

func (e *NotLeaderError) Error() string {
	if e.Leader == "" {
		return "cluster: not the leader; no leader known"
	}
	return "cluster: not the leader" + leaderMarker + e.Leader
}

func (e *NotLeaderError) Unwrap() error { return ErrNotLeader }

// RemoteErr turns a *wire.RemoteError from a manager into an error
// wrapping the sentinel for its status (a *NotLeaderError for
// StatusNotLeader). Other errors pass through.
func RemoteErr(err error) error {
	var re *wire.RemoteError
	if !errors.As(err, &re) {
		return err
	}
	if re.Status == StatusNotLeader {
		nl := &NotLeaderError{}
		if i := strings.LastIndex(re.Message, leaderMarker); i >= 0 {
			nl.Leader = strings.TrimSpace(re.Message[i+len(leaderMarker):])
		}
		return nl
	}
	return &StatusError{Sentinel: sentinelOf(re.Status), Message: re.Message}
}

// CheckEpoch applies the epoch rule of DESIGN.md "Epochs" for a server
// whose map has epoch mine receiving a request stamped with theirs:
//
//   - theirs == mine: serve.
//   - theirs < mine: the sender's map is stale; answer ErrStaleEpoch so it
//     refreshes its map and retries (epoch 0, "no map", is stale too).
//   - theirs > mine: the server is behind; it gets ErrNeedRefresh and must
//     fetch a map of at least epoch theirs (Client.Map(ctx, theirs))
//     before serving the request.
func CheckEpoch(mine, theirs uint64) error {
	switch {
	case theirs < mine:
		return fmt.Errorf("%w: request epoch %d, map epoch %d", ErrStaleEpoch, theirs, mine)
	case theirs > mine:
		return fmt.Errorf("%w: request epoch %d, map epoch %d", ErrNeedRefresh, theirs, mine)
	}
	return nil
}
