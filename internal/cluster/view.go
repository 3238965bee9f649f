package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/atoll-fs/atoll/internal/auth"

	"github.com/atoll-fs/atoll/internal/lockcheck"
	"github.com/atoll-fs/atoll/internal/namespace"
)

// View is a member's or client's cached copy of the cluster map. Readers
// get the current map without a round trip; Refresh (after a stale-epoch
// or wrong-island answer) and Update (from RunMember's OnMap) move it
// forward, never back.
type View struct {
	c  *Client
	mu struct {
		lockcheck.RWMutex
		m           *Map
		lastRefresh time.Time
	}
	// MinRefreshGap rate-limits Refresh so a storm of stale answers does
	// not become a storm of map fetches. Default 50ms.
	MinRefreshGap time.Duration
	subs          []func(*Map)
}

// NewView fetches the current map through c.
func NewView(ctx context.Context, c *Client) (*View, error) {
	m, err := c.Map(ctx, 0)
	if err != nil {
		return nil, err
	}
	v := &View{c: c, MinRefreshGap: 50 * time.Millisecond}
	v.mu.m = m
	return v, nil
}

// WaitView is NewView for long-running roles (islands, gateways), which
// must not depend on the order machines come up in: while no manager
// answers it logs and retries with backoff until ctx is done. Answers
// that retrying cannot change (a key this cluster refuses, a malformed
// request) return at once.
func WaitView(ctx context.Context, c *Client, log *slog.Logger, who string) (*View, error) {
	bo := Backoff{Min: 500 * time.Millisecond, Max: 10 * time.Second}
	for {
		v, err := NewView(ctx, c)
		if err == nil {
			return v, nil
		}
		if ctx.Err() != nil || errors.Is(err, auth.ErrRefused) || errors.Is(err, auth.ErrNoKey) ||
			errors.Is(err, auth.ErrForbidden) || errors.Is(err, ErrBadRequest) {
			return nil, err
		}
		wait := bo.Next()
		log.Warn(who+": cannot reach the cluster manager; retrying", "retry_in", wait.Round(time.Millisecond), "err", err)
		if !SleepCtx(ctx, wait) {
			return nil, err
		}
	}
}

// Map returns the current map (do not modify it).
func (v *View) Map() *Map {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.mu.m
}

// Epoch returns the current map's epoch.
func (v *View) Epoch() uint64 { return v.Map().Epoch }

// OnChange registers fn to be called with every newer map (set up before
// sharing the View).
func (v *View) OnChange(fn func(*Map)) { v.subs = append(v.subs, fn) }

// Update installs m if it is newer.
func (v *View) Update(m *Map) {
	v.mu.Lock()
	if m == nil || m.Epoch <= v.mu.m.Epoch {
		v.mu.Unlock()
		return
	}
	v.mu.m = m
	v.mu.Unlock()
	for _, fn := range v.subs {
		fn(m)
	}
}

// Refresh fetches a map newer than the current one, if the managers have
// one.
func (v *View) Refresh(ctx context.Context) error {
	v.mu.Lock()
	if time.Since(v.mu.lastRefresh) < v.MinRefreshGap {
		v.mu.Unlock()
		return nil
	}
	v.mu.lastRefresh = time.Now()
	v.mu.Unlock()
	m, err := v.c.Map(ctx, 0)
	if err != nil {
		return fmt.Errorf("cluster: refresh map: %w", err)
	}
	v.Update(m)
	return nil
}

// WaitFormatted waits until the map has a namespace table, refreshing it
// every 200ms; who names the waiting role in the one log line.
func (v *View) WaitFormatted(ctx context.Context, log *slog.Logger, who string) error {
	for logged := false; !v.Map().Formatted; {
		if !logged {
			log.Info(who + ": waiting for the namespace to be formatted (`atoll format`, which atoll dev runs itself)")
			logged = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if err := v.Refresh(ctx); err != nil {
			log.Warn(who+": map refresh", "err", err)
		}
	}
	return nil
}

// DefaultPolicy is the cluster's default redundancy policy.
func (v *View) DefaultPolicy() string { return v.Map().DefaultPolicy }

// IslandForBucket returns the id and address of the island owning bucket.
func (v *View) IslandForBucket(bucket uint32) (uint32, string, bool) {
	m := v.Map()
	id, ok := m.Table.Owner(bucket)
	if !ok {
		return 0, "", false
	}
	is, ok := m.Island(id)
	if !ok {
		return id, "", false
	}
	return id, is.Addr, true
}

// IslandAddr returns the address of the island owning bucket (the client
// naming layer's view of the map).
func (v *View) IslandAddr(bucket uint32) (string, bool) {
	_, addr, ok := v.IslandForBucket(bucket)
	return addr, ok && addr != ""
}

// Islands returns the address of every island in the map by id (the
// cleaner asks each for its stripe counters and references).
func (v *View) Islands() map[namespace.IslandID]string {
	out := map[namespace.IslandID]string{}
	for _, is := range v.Map().Islands {
		if is.Addr != "" {
			out[namespace.IslandID(is.ID)] = is.Addr
		}
	}
	return out
}

// IslandFor returns the id and address of the island owning bucket.
func (v *View) IslandFor(bucket uint32) (namespace.IslandID, string, bool) {
	id, addr, ok := v.IslandForBucket(bucket)
	return namespace.IslandID(id), addr, ok && addr != ""
}

// StorageSlots returns every storage slot's address and the slots that
// are not Up (so new stripes avoid them).
func (v *View) StorageSlots() (slots []SlotInfo, down []uint16) {
	for _, s := range v.Map().Storage {
		if s.State == StateOut {
			continue
		}
		slots = append(slots, SlotInfo{Slot: s.Slot, Addr: s.Addr})
		if s.State != StateUp {
			down = append(down, s.Slot)
		}
	}
	return slots, down
}

// SlotInfo is a storage slot and its server's address.
type SlotInfo struct {
	Slot uint16
	Addr string
}

// IslandMap adapts a View to what a metadata island needs of the map: the
// namespace table and other islands' addresses by id. Make it with
// NewIslandMap.
type IslandMap struct {
	*View
	// last is the table of the last map converted: an island asks for
	// the table on every request, and maps change rarely. Maps are never
	// changed once published, and namespace.Table operations copy, so the
	// table is shared.
	last *atomic.Pointer[islandTable]
}

type islandTable struct {
	m *Map
	t namespace.Table
}

// NewIslandMap returns the IslandMap of v.
func NewIslandMap(v *View) IslandMap {
	return IslandMap{View: v, last: new(atomic.Pointer[islandTable])}
}

// Table returns the namespace table of the current map (empty before the
// namespace is formatted: every lookup then finds no island).
func (m IslandMap) Table() namespace.Table {
	mp := m.Map()
	if m.last != nil {
		if c := m.last.Load(); c != nil && c.m == mp {
			return c.t
		}
	}
	t := mp.NamespaceTable()
	if m.last != nil {
		m.last.Store(&islandTable{mp, t})
	}
	return t
}

// FinishMove asks the manager to give a pending move's entry to its
// destination (meta.MoveFinisher) and returns the new epoch, which the
// view then has.
func (m IslandMap) FinishMove(ctx context.Context, id uint64) (uint64, error) {
	return m.catchUp(ctx)(m.c.FinishMove(ctx, id))
}

// catchUp returns a function that, given a change's epoch, brings the
// view to it (the island acting on its own change must see it at once).
func (m IslandMap) catchUp(ctx context.Context) func(uint64, error) (uint64, error) {
	return func(epoch uint64, err error) (uint64, error) {
		if err != nil {
			return 0, err
		}
		if m.Epoch() < epoch {
			mp, err := m.c.Map(ctx, epoch)
			if err != nil {
				return epoch, err
			}
			m.Update(mp)
		}
		return epoch, nil
	}
}

// CancelMove asks the manager to forget a pending move (meta.MoveCanceller)
// and returns the new epoch, which the view then has.
func (m IslandMap) CancelMove(ctx context.Context, id uint64) (uint64, error) {
	return m.catchUp(ctx)(m.c.CancelMove(ctx, id))
}

// IslandAddr returns the address of island id.
func (m IslandMap) IslandAddr(id namespace.IslandID) (string, bool) {
	is, ok := m.Map().Island(uint32(id))
	return is.Addr, ok && is.Addr != ""
}

// FollowRevocations makes the verifiers built from k (after this call)
// refuse the keys the cluster map revokes: it gives k a Revocations if it
// has none and returns the function to call with every new map (a
// member's OnMap, a View's OnChange).
func FollowRevocations(k *auth.Key) func(*Map) {
	if k == nil {
		return func(*Map) {}
	}
	if k.Revocations == nil {
		k.Revocations = &auth.Revocations{}
	}
	r := k.Revocations
	return func(m *Map) { r.Set(m.Revocations()) }
}
