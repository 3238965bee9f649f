package meta

import (
	"context"
	"errors"
	"fmt"

	"github.com/atoll-fs/atoll/internal/leaderhint"
	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/metawire"
	"github.com/atoll-fs/atoll/internal/namespace"
	"github.com/atoll-fs/atoll/internal/wire"
)

// Peer reaches other islands: island-to-island calls (two-phase commit,
// remote attributes and entries during cross-island operations, inode
// allocation). Errors wrap the metawire sentinels; an island that cannot
// be reached is ErrUnavailable.
type Peer interface {
	Call(ctx context.Context, island namespace.IslandID, op uint16, epoch uint64, msg []byte) ([]byte, error)
}

// WirePeer calls islands over internal/wire at the addresses of a map.
type WirePeer struct {
	Pool *wire.Pool
	Map  MapSource
	// Hints, when set, finds an island's leader that could not register
	// its address (internal/leaderhint): a call the mapped address
	// answers "unavailable" is sent once more to the leader a scan found.
	Hints *leaderhint.Hints
}

func (p *WirePeer) Call(ctx context.Context, island namespace.IslandID, op uint16, epoch uint64, msg []byte) ([]byte, error) {
	mapAddr, ok := p.Map.IslandAddr(island)
	if !ok {
		return nil, fmt.Errorf("%w: no address for island %d", metawire.ErrUnavailable, island)
	}
	for try := 0; ; try++ {
		addr := mapAddr
		if p.Hints != nil {
			addr = p.Hints.Addr(island, mapAddr)
		}
		reply, err := p.callAt(ctx, addr, island, op, epoch, msg)
		if err == nil || !errors.Is(err, metawire.ErrUnavailable) || p.Hints == nil || try > 0 {
			return reply, err
		}
		lm, ok := p.Map.(leaderhint.Map)
		if !ok || !p.Hints.Unavailable(ctx, lm, island, addr, func() (string, bool) { return p.Map.IslandAddr(island) }) {
			return nil, err
		}
	}
}

// askIsland is a leaderhint.Asker: whether the server at addr serves
// island (a statfs routed to it).
func (p *WirePeer) askIsland(ctx context.Context, addr string, island namespace.IslandID) error {
	_, err := p.callAt(ctx, addr, island, metawire.OpStatFS, p.Map.Epoch(), metawire.Marshal(&metawire.Empty{}))
	return err
}

func (p *WirePeer) callAt(ctx context.Context, addr string, island namespace.IslandID, op uint16, epoch uint64, msg []byte) ([]byte, error) {
	reply, err := p.Pool.CallRoute(ctx, addr, uint32(island), wire.ReqID{}, op, epoch, msg, nil, nil)
	if err != nil {
		var re *wire.RemoteError
		if errors.As(err, &re) {
			return nil, metawire.RemoteErr(err)
		}
		return nil, fmt.Errorf("%w: island %d at %s: %v", metawire.ErrUnavailable, island, addr, err)
	}
	return reply.Msg, nil
}

// LocalNet connects islands of one process (tests, single-process
// clusters). An island marked down neither receives nor sends calls.
// Errors cross it the way they cross the wire: reduced to their status.
type LocalNet struct {
	mu struct {
		lockcheck.RWMutex
		islands map[namespace.IslandID]*Island
		down    map[namespace.IslandID]bool
	}
}

// NewLocalNet returns an empty network.
func NewLocalNet() *LocalNet {
	n := &LocalNet{}
	n.mu.islands = map[namespace.IslandID]*Island{}
	n.mu.down = map[namespace.IslandID]bool{}
	return n
}

// Peer returns the Peer island from uses (Config.Peer).
func (n *LocalNet) Peer(from namespace.IslandID) Peer { return &localPeer{n: n, from: from} }

// Attach makes isl reachable (replacing an earlier island of its id) and
// marks it up.
func (n *LocalNet) Attach(isl *Island) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.mu.islands[isl.id] = isl
	delete(n.mu.down, isl.id)
}

// SetDown marks island id down (a crashed process) or up.
func (n *LocalNet) SetDown(id namespace.IslandID, down bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if down {
		n.mu.down[id] = true
	} else {
		delete(n.mu.down, id)
	}
}

type localPeer struct {
	n    *LocalNet
	from namespace.IslandID
}

func (p *localPeer) Call(ctx context.Context, island namespace.IslandID, op uint16, epoch uint64, msg []byte) ([]byte, error) {
	p.n.mu.RLock()
	isl := p.n.mu.islands[island]
	down := p.n.mu.down[island] || p.n.mu.down[p.from]
	p.n.mu.RUnlock()
	if isl == nil || down {
		return nil, fmt.Errorf("%w: island %d is down", metawire.ErrUnavailable, island)
	}
	// Islands call each other as members, whatever key the request that
	// led here came with (over the wire the peer sees the member key).
	ctx = context.WithValue(ctx, scopeKey{}, nil)
	out, err := isl.Handle(ctx, op, epoch, msg)
	if err != nil {
		return nil, asRemote(err)
	}
	return out, nil
}

// asRemote reduces err to what the wire carries: its status and text.
func asRemote(err error) error {
	st := metawire.StatusOf(err)
	for _, e := range metawire.Table {
		if e.Status == st {
			return &metawire.StatusError{Sentinel: e.Err, Message: err.Error()}
		}
	}
	return &metawire.StatusError{Sentinel: metawire.ErrInternal, Message: err.Error()}
}

// call sends req to island and decodes the answer into resp (if not nil).
func (i *Island) call(ctx context.Context, island namespace.IslandID, op uint16, req, resp metawire.Message) ([]byte, error) {
	if wire.IsInline(ctx) {
		return nil, wire.ErrWouldBlock // a peer may be slow or gone
	}
	noteIsland(ctx, island)
	ctx, cancel := context.WithTimeout(ctx, i.timing.callTimeout)
	defer cancel()
	out, err := i.peer.Call(ctx, island, op, i.cfg.Map.Epoch(), metawire.Marshal(req))
	if err != nil {
		if errors.Is(err, metawire.ErrStaleEpoch) {
			if rerr := i.cfg.Map.Refresh(ctx); rerr != nil {
				i.log.Warn("meta: refreshing the cluster map", "err", rerr)
			}
		}
		return nil, err
	}
	if resp != nil {
		if err := metawire.Unmarshal(out, resp); err != nil {
			return nil, fmt.Errorf("%w: reply of island %d to op %d: %v", metawire.ErrInternal, island, op, err)
		}
	}
	return out, nil
}
