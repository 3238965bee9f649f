package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/atoll-fs/atoll/internal/auth"

	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/wire"
)

// Client talks to the manager group. Give it any manager addresses: it
// follows "not leader" redirects to the leader, waits out elections, moves
// on from unreachable managers and learns the other managers' addresses
// from every map it receives. Safe for concurrent use.
type Client struct {
	log  *slog.Logger
	pool *wire.Pool

	// CallTimeout bounds one attempt against one manager (default 5s);
	// LeaderWait bounds waiting for a leader to be elected or a stale
	// manager to catch up within one call (default 10s). Set them before
	// the first call.
	CallTimeout time.Duration
	LeaderWait  time.Duration

	mu struct {
		lockcheck.Mutex
		addrs  []string
		next   int
		leader string // last known leader client address
		epoch  uint64 // highest epoch seen
	}
}

// NewClient returns a client for the managers at addrs that
// authenticates with key (nil: none, for managers started in-process
// without a key).
func NewClient(addrs []string, key *auth.Key, logger *slog.Logger) *Client {
	if logger == nil {
		logger = slog.Default()
	}
	c := &Client{
		log:         logger,
		pool:        wire.NewPool(wire.ClientConfig{Key: key, Limits: wire.Limits{MaxMsg: MaxMsg, MaxPayload: 1 << 10}}, 1),
		CallTimeout: 5 * time.Second,
		LeaderWait:  10 * time.Second,
	}
	for _, a := range addrs {
		c.addAddrLocked(a)
	}
	return c
}

// Close closes the connections.
func (c *Client) Close() { c.pool.Close() }

// Leader returns the last known leader address ("" if none).
func (c *Client) Leader() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.leader
}

// Addrs returns the manager addresses the client knows.
func (c *Client) Addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.mu.addrs)
}

func (c *Client) addAddrLocked(a string) {
	if a != "" && !slices.Contains(c.mu.addrs, a) {
		c.mu.addrs = append(c.mu.addrs, a)
	}
}

func (c *Client) setLeader(a string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.leader = a
	c.addAddrLocked(a)
}

// learn records the managers and the epoch of a received map.
func (c *Client) learn(m *Map) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range m.ManagerAddrs() {
		c.addAddrLocked(a)
	}
	c.mu.epoch = max(c.mu.epoch, m.Epoch)
}

// target picks the address for the next attempt: the leader when known
// and not failed in this call, else the next address in rotation not
// failed in this call, else "".
func (c *Client) target(failed map[string]bool) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.leader != "" && !failed[c.mu.leader] {
		return c.mu.leader
	}
	for range c.mu.addrs {
		a := c.mu.addrs[c.mu.next%len(c.mu.addrs)]
		c.mu.next++
		if !failed[a] {
			return a
		}
	}
	return ""
}

// call sends one request, retrying as described on Client. Definitive
// answers (bad request, unknown member, ...) return at once.
func (c *Client) call(ctx context.Context, op uint16, msg []byte) ([]byte, error) {
	bo := Backoff{Min: 25 * time.Millisecond, Max: 500 * time.Millisecond}
	deadline := time.Now().Add(c.LeaderWait)
	failed := make(map[string]bool)
	var lastErr error
	rounds, hops := 0, 0
	wait := func() bool {
		if time.Now().After(deadline) {
			return false
		}
		return SleepCtx(ctx, bo.Next())
	}
	giveUp := func() error {
		if lastErr == nil {
			lastErr = errors.New("no manager address")
		}
		if ctx.Err() != nil {
			return fmt.Errorf("cluster: %s: %w (last error: %w)", Schema.Name(op), ctx.Err(), lastErr)
		}
		if errors.Is(lastErr, ErrNotLeader) || errors.Is(lastErr, ErrUnavailable) || errors.Is(lastErr, ErrStaleEpoch) {
			return fmt.Errorf("cluster: %s: %w", Schema.Name(op), lastErr)
		}
		return fmt.Errorf("cluster: %s: %w: %w", Schema.Name(op), ErrUnavailable, lastErr)
	}
	for ctx.Err() == nil {
		addr := c.target(failed)
		if addr == "" {
			// Every known manager failed at the connection level.
			rounds++
			if rounds >= 2 || !wait() {
				return nil, giveUp()
			}
			clear(failed)
			continue
		}
		c.mu.Lock()
		epoch := c.mu.epoch
		c.mu.Unlock()
		actx, cancel := context.WithTimeout(ctx, c.CallTimeout)
		rep, err := c.pool.Call(actx, addr, op, epoch, msg, nil, nil)
		cancel()
		if err == nil {
			if op != OpGetMap && op != OpStatus {
				// Only the leader answers the other operations.
				c.setLeader(addr)
			}
			return rep.Msg, nil
		}
		err = RemoteErr(err)
		var nl *NotLeaderError
		var se *StatusError
		switch {
		case errors.As(err, &nl):
			lastErr = fmt.Errorf("%s: %w", addr, err)
			if nl.Leader != "" && nl.Leader != addr && !failed[nl.Leader] && hops < 4 {
				hops++
				c.setLeader(nl.Leader)
				continue
			}
			// An election is under way, or the follower still names a
			// leader we could not reach: wait for the group to settle.
			c.setLeader("")
			hops = 0
			if !wait() {
				return nil, giveUp()
			}
		case errors.Is(err, ErrUnavailable), errors.Is(err, ErrStaleEpoch):
			lastErr = fmt.Errorf("%s: %w", addr, err)
			if !wait() {
				return nil, giveUp()
			}
		case errors.As(err, &se):
			// A definitive answer; its text names the operation.
			return nil, err
		case errors.Is(err, auth.ErrRefused), errors.Is(err, auth.ErrNoKey):
			// Our key is not one of this cluster's: no manager will
			// take it.
			return nil, fmt.Errorf("cluster: %s: %w", Schema.Name(op), err)
		default:
			// Transport failure: try another manager.
			lastErr = fmt.Errorf("%s: %w", addr, err)
			c.pool.Forget(addr)
			failed[addr] = true
			c.mu.Lock()
			if c.mu.leader == addr {
				c.mu.leader = ""
			}
			c.mu.Unlock()
		}
	}
	return nil, giveUp()
}

func (c *Client) callMap(ctx context.Context, op uint16, msg []byte) (*Map, error) {
	b, err := c.call(ctx, op, msg)
	if err != nil {
		return nil, err
	}
	m, err := DecodeMap(b)
	if err != nil {
		return nil, fmt.Errorf("cluster: %s: reply: %w", Schema.Name(op), err)
	}
	c.learn(m)
	return m, nil
}

// Map returns a map of at least minEpoch, from any manager.
func (c *Client) Map(ctx context.Context, minEpoch uint64) (*Map, error) {
	return c.callMap(ctx, OpGetMap, Marshal(&GetMapReq{MinEpoch: minEpoch}))
}

// Register adds (or re-registers) a member and returns the new map.
func (c *Client) Register(ctx context.Context, kind Kind, id uint32, addr string, pid int) (*Map, error) {
	return c.callMap(ctx, OpRegister, Marshal(&RegisterReq{Kind: kind, ID: id, Addr: addr, PID: pid}))
}

// Heartbeat reports that a member is alive; the reply carries the current
// epoch and the member's state.
func (c *Client) Heartbeat(ctx context.Context, kind Kind, id uint32, epoch uint64, stats MemberStats) (HeartbeatResp, error) {
	b, err := c.call(ctx, OpHeartbeat, Marshal(&HeartbeatReq{Kind: kind, ID: id, Epoch: epoch, Stats: stats}))
	var r HeartbeatResp
	if err == nil {
		if err = Unmarshal(b, &r); err != nil {
			err = fmt.Errorf("cluster: heartbeat: reply: %w", err)
		}
	}
	if err != nil {
		return HeartbeatResp{}, err
	}
	return r, nil
}

func (c *Client) callEpoch(ctx context.Context, op uint16, msg []byte) (uint64, error) {
	b, err := c.call(ctx, op, msg)
	if err != nil {
		return 0, err
	}
	var r EpochResp
	if err := Unmarshal(b, &r); err != nil {
		return 0, fmt.Errorf("cluster: %s: reply: %w", Schema.Name(op), err)
	}
	return r.Epoch, nil
}

// SetState sets a member's operator state (up, draining, out) and returns
// the resulting epoch.
func (c *Client) SetState(ctx context.Context, kind Kind, id uint32, st State) (uint64, error) {
	return c.callEpoch(ctx, OpSetState, Marshal(&SetStateReq{Kind: kind, ID: id, State: st}))
}

// Remove forgets a gateway or mount (storage servers and islands leave
// by drain and out) and returns the resulting epoch.
func (c *Client) Remove(ctx context.Context, kind Kind, id uint32) (uint64, error) {
	return c.callEpoch(ctx, OpRemove, Marshal(&RemoveReq{Kind: kind, ID: id}))
}

// Revoke revokes every key made so far under name and returns the
// resulting epoch (the map's Revoked gives the generation new keys get).
func (c *Client) Revoke(ctx context.Context, name string) (uint64, error) {
	return c.callEpoch(ctx, OpRevoke, Marshal(&RevokeReq{Name: name}))
}

// Format creates the namespace table over islands (nil: every registered
// island that is not out) and returns the new map.
func (c *Client) Format(ctx context.Context, islands []uint32) (*Map, error) {
	return c.callMap(ctx, OpFormat, Marshal(&FormatReq{Islands: islands}))
}

// SetTable replaces the namespace table and returns the resulting epoch.
func (c *Client) SetTable(ctx context.Context, t Table) (uint64, error) {
	return c.callEpoch(ctx, OpSetTable, Marshal(&SetTableReq{Table: t}))
}

// SetPolicy sets the default policy ("" returns to the automatic default)
// and returns the resulting epoch.
func (c *Client) SetPolicy(ctx context.Context, policy string) (uint64, error) {
	return c.callEpoch(ctx, OpSetPolicy, Marshal(&SetPolicyReq{Policy: policy}))
}

// Join asks the manager group to add a manager as a raft voter.
func (c *Client) Join(ctx context.Context, r JoinReq) error {
	_, err := c.callEpoch(ctx, OpJoin, Marshal(&r))
	return err
}

// Status returns the map and the raft view of the leader (of any manager
// when there is no leader).
func (c *Client) Status(ctx context.Context) (*Status, error) {
	b, err := c.call(ctx, OpStatus, nil)
	var r StatusResp
	if err != nil {
		return nil, err
	}
	if err = Unmarshal(b, &r); err == nil {
		r.Status.Map, err = DecodeMap(r.MapBytes)
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: status: reply: %w", err)
	}
	c.learn(r.Status.Map)
	if r.Status.RaftState == "Leader" {
		c.setLeader(r.Status.Leader)
	}
	st := r.Status
	return &st, nil
}

// Backoff yields growing, jittered waits between Min and Max.
type Backoff struct {
	Min, Max time.Duration
	cur      time.Duration
}

// Next is the next wait.
func (b *Backoff) Next() time.Duration {
	if b.cur == 0 {
		b.cur = b.Min
	} else {
		b.cur = min(b.cur*2, b.Max)
	}
	// ±20% jitter so that many members do not retry in lockstep.
	j := time.Duration(rand.Int64N(int64(b.cur)/5+1)) - b.cur/10
	return b.cur + j
}

// Reset starts again from Min.
func (b *Backoff) Reset() { b.cur = 0 }

// SleepCtx waits d or until ctx is done; it reports whether d elapsed.
func SleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
